"""Shared fixtures of the project's own tests."""
from __future__ import annotations

import os
import subprocess
import sys
from functools import lru_cache

import pytest

from workbook import ROOT, manifest
from workbook.run import Result, run_check

PROBLEMS = list(manifest.problems().values())


def pitfall_cases():
    return [pytest.param(p, pit, id=f"{p.id}-{pit.name}") for p in PROBLEMS for pit in p.pitfalls]


def variant_cases(kind: str | None = None):
    """Every pitfall and wrong variant (or those of one kind) as pytest params."""
    from workbook import variants
    return [pytest.param(v, id=f"{p.id}-{v.kind}-{v.name}")
            for p in PROBLEMS for v in variants.all_variants(p) if kind in (None, v.kind)]


def alternate_cases():
    from workbook import variants
    return [pytest.param(p, path, id=f"{p.id}-{name}")
            for p in PROBLEMS for name, path in variants.alternates(p)]


@lru_cache(maxsize=None)
def checked(problem_id: str, path: str) -> Result:
    """Run (once per session) the acceptance set of ``problem_id`` against ``path``."""
    return run_check(manifest.get(problem_id), path)


@pytest.fixture(autouse=True)
def private_progress(tmp_path, monkeypatch):
    """Never touch the learner's real progress file."""
    monkeypatch.setenv("WORKBOOK_PROGRESS", str(tmp_path / "progress.json"))


def cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m workbook ARGS`` the way check.sh does; capture its output."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "workbook", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


#: The longest tests (wall seconds on a quiet 2-core box, measured per test with xdist's 4
#: workers), handed out first: xdist gives each idle worker the next test in collection
#: order, so a long test left to the end runs alone while the other workers have finished.
#: Only the order changes, never what runs.
LONGEST_FIRST = {
    "test_slow_not_stuck.py::test_a_queue_that_sleeps_20_ms_per_call": 43,
    "test_grade.py::test_a_batch_killed_midway": 38,
    "test_grade.py::test_a_grade_records_the_exploration_seed": 33,
    "test_watch.py::": 25,
    "test_grade.py::test_gradescope_format_writes_results_json": 22,
    "test_cli.py::test_only_checks_of_the_learner_file_change_progress": 20,
    "test_cli.py::test_repeat_reports_runs_and_failed_runs": 20,
    "test_grade.py::test_a_changed_submission_is_graded_again": 19,
    "test_web_browser.py::test_checks_on_a_correct_file_tick": 18,
    "test_mutate.py::": 17,
    "test_web_progress.py::test_a_terminal_check_reaches_the_open_page": 14,
    "test_web_progress.py::test_done_then_a_failing_check": 13,
    "test_grade_pythons.py::": 13,
    "test_web_progress.py::test_a_diagnosis_opens_the_hint": 12,
    "test_live_checklist.py::test_repeat_on_a_terminal": 12,
    "test_runner.py::test_a_run_killed_by_its_wall_clock_limit": 12,
    "test_web_browser.py::test_a_pitfall_file_gets_the_same_diagnosis": 12,
    "test_grade.py::test_the_bundled_run_autograder": 10,
    "test_grade.py::test_fresh_grades_again": 10,
    "test_grade.py::test_a_sigterm_midway": 9,
    "test_stuck.py::test_the_reference_gets_no_stuck_verdict": 9,
    "test_acceptance_sets.py::test_the_reference_passes": 7,
    "test_acceptance_sets.py::test_a_correct_solution_in_another_style": 6,
    "test_acceptance_sets.py::test_each_variant_fails_exactly": 4,
}


def _expected_seconds(item: pytest.Item) -> float:
    key = item.nodeid.rpartition("/")[2]
    return max((s for prefix, s in LONGEST_FIRST.items() if key.startswith(prefix)),
               default=0.0)


def pytest_collection_modifyitems(config, items):
    """Longest first (``LONGEST_FIRST``); and the tests of the graded P01 battery in one
    xdist group (``--dist loadgroup``): one worker grades it (about three minutes) and runs
    them all, none waits idle for another's battery, and the group, the largest, starts
    first."""
    items.sort(key=lambda item: -_expected_seconds(item))  # stable: the rest keep their order
    for item in items:
        if "graded" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("p01-battery"))
