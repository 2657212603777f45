"""``--pythons``: a checkpoint passes only when it passes under every interpreter, and a
failure on one version says which."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbook import ROOT, manifest, pythons
from workbook.errors import UsageError
from workbook.run import CheckpointResult, Result

P03 = manifest.get("p03")


def _result(statuses: dict[str, str], message: str = "lost wake-up", **extra) -> Result:
    cps = [CheckpointResult(cp.id, cp.title, cp.kind, statuses.get(cp.id, "passed"),
                            seconds=1.0, message=message if statuses.get(cp.id) == "failed"
                            else None)
           for cp in P03.checkpoints]
    return Result("p03", "x.py", cps, seconds=2.0, **extra)


def test_a_failure_on_one_version_fails_the_combined_check_and_names_that_version():
    runs = {"3.10": _result({"p03.mpmc": "failed"}), "3.12": _result({}), "3.13": _result({})}
    combined = pythons.combine(P03, runs)
    assert not combined.passed
    mpmc = next(cp for cp in combined.checkpoints if cp.id == "p03.mpmc")
    assert mpmc.status == "failed"
    assert mpmc.message.startswith("on Python 3.10 only (passed on 3.12, 3.13):")
    assert "lost wake-up" in mpmc.message
    assert combined.seconds == 6.0


def test_passing_everywhere_says_where_it_passed():
    combined = pythons.combine(P03, {"3.11": _result({}), "3.13": _result({})})
    assert combined.passed
    assert all("passed on Python 3.11, 3.13" in cp.notes for cp in combined.checkpoints)


def test_an_import_error_on_one_version_is_the_combined_import_error():
    runs = {"3.10": _result({}, import_error="SyntaxError: match"), "3.13": _result({})}
    combined = pythons.combine(P03, runs)
    assert combined.import_error == "on Python 3.10: SyntaxError: match"
    assert not combined.passed


def test_the_running_interpreter_is_always_found_and_needs_no_venv(monkeypatch):
    monkeypatch.delenv("WORKBOOK_PYTHONS", raising=False)
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = {i.version: i for i in pythons.find()}
    assert Path(found[here].path) == Path(sys.executable)
    assert pythons.venv_python(found[here], say=lambda _: None) == sys.executable


def test_workbook_pythons_restricts_the_versions_and_refuses_unknown_ones(monkeypatch):
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    monkeypatch.setenv("WORKBOOK_PYTHONS", here)
    assert [i.version for i in pythons.find()] == [here]
    monkeypatch.setenv("WORKBOOK_PYTHONS", "2.7")
    with pytest.raises(UsageError, match="2.7"):
        pythons.find()


def test_pythons_and_repeat_do_not_go_together():
    out = subprocess.run([sys.executable, "-m", "workbook", "p03", "--solution", "--pythons",
                          "--repeat", "2"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "leave out --repeat" in out.stderr


def test_a_check_under_the_running_python_alone_reports_it(tmp_path):
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    out = subprocess.run([sys.executable, "-m", "workbook", "p03", "--solution", "--pythons",
                          "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "WORKBOOK_PYTHONS": here})
    doc = json.loads(out.stdout)
    assert out.returncode == 0 and doc["passed"]
    assert all(f"passed on Python {here}" in cp["notes"] for cp in doc["checkpoints"]
               if cp["status"] == "passed")
