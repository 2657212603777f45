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


# Tests that take tens of seconds each: started first, so that none of them is the last
# thing a worker does while the others sit idle (measured on 2 cores, 2026-12-07).  The
# tests of the graded P01 battery go last instead: test_grade.py grades it in the background
# meanwhile.
SLOW_FIRST = ("test_grade.py", "test_grade_pythons.py", "test_slow_not_stuck.py",
              "test_watch.py", "test_live_checklist.py", "test_web_browser.py",
              "test_web_progress.py", "test_mutate.py", "test_runner.py")


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        if "graded" in getattr(item, "fixturenames", ()):
            return 2
        return 0 if item.path.name in SLOW_FIRST else 1
    items.sort(key=rank)  # stable: the order within each rank is kept
