"""``grade --pythons`` (the default): each submission × problem is judged under every supported
Python found; a checkpoint earns its points only when it passes under all of them, its
message names the Python it failed on, and the gradebook records which interpreters judged
the row."""
from __future__ import annotations

import csv
import io
import json
import sys

import pytest

from tests.selftest.conftest import cli
from tests.selftest.grading import battery
from workbook import manifest, pythons
from workbook.grading import exports, interpreters
from workbook.grading.gradebook import Entry, Gradebook
from workbook.run import CheckpointResult

P01 = manifest.get("p01")
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
#: The reference's timed wait, and the same wait written with ``asyncio.timeout``: new in
#: Python 3.11, an AttributeError on 3.10 (a mistake a learner on 3.12 never sees).
WAIT_FOR = """            try:
                await asyncio.wait_for(self._event.wait(), remaining)
            except asyncio.TimeoutError:
                pass"""
TIMEOUT_311 = """            try:
                async with asyncio.timeout(remaining):  # Python 3.11+
                    await self._event.wait()
            except TimeoutError:
                pass"""


def _found(monkeypatch) -> list[str]:
    monkeypatch.delenv("WORKBOOK_PYTHONS", raising=False)
    return [i.version for i in pythons.find()]


def _one_version_mistake(found: list[str]) -> tuple[str, str, str]:
    """P01's reference with one visible change that breaks it on one Python only: (source,
    the version it fails on, a version it passes on)."""
    reference = P01.solution_file.read_text()
    assert WAIT_FOR in reference
    if "3.10" in found:
        return reference.replace(WAIT_FOR, TIMEOUT_311), "3.10", found[-1]
    # No 3.10 here: the same kind of mistake, spelled as a version test.
    major, minor = found[0].split(".")
    remaining = "            remaining = deadline - loop.time()\n"
    assert remaining in reference
    wrong = reference.replace("import asyncio\n", "import asyncio\nimport sys\n", 1).replace(
        remaining, f"            remaining = (deadline - loop.time() if sys.version_info[:2] "
                   f"!= ({major}, {minor}) else 0.0)\n")
    return wrong, found[0], found[-1]


def test_a_mistake_of_one_python_loses_its_points_there_and_the_message_names_it(
        tmp_path, monkeypatch):
    found = _found(monkeypatch)
    if len(found) < 2:
        pytest.skip(f"one supported Python on this machine ({', '.join(found)}): "
                    "nothing to judge against")
    source, bad, good = _one_version_mistake(found)
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    (tmp_path / "subs" / "ann" / P01.learner_file.name).write_text(source)
    state = tmp_path / "g.json"
    out = cli("grade", str(tmp_path / "subs"), "--problem", "p01", "--python", bad,
              "--python", good, "--jobs", "2", "--format", "json", "--out", str(state),
              "--time-limit", "60", timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    doc = json.loads(state.read_text())
    releases = {p["version"]: p["release"] for p in doc["pythons"]}
    assert sorted(releases) == sorted([bad, good])
    entry = doc["rows"]["ann"]["problems"]["p01"]
    assert entry["pythons"] == [releases[v] for v in sorted([bad, good], key=found.index)]
    assert entry["scores_by_python"][releases[good]] == P01.points  # the reference's score
    assert entry["score"] == entry["scores_by_python"][releases[bad]] < P01.points
    failed = [cp for cp in entry["checkpoints"] if cp["status"] != "passed"]
    assert failed and all(cp["message"].startswith(f"on Python {bad} only (passed on {good}):")
                          for cp in failed), failed
    book = Gradebook(state, [P01])
    rows = list(csv.reader(io.StringIO(exports.csv_text(book))))
    assert rows[1][rows[0].index("p01 lower on Python")] == releases[bad]
    assert rows[1][rows[0].index("pythons")].split() == entry["pythons"]


def test_on_a_machine_with_one_python_grading_says_so_once_and_grades_under_it(monkeypatch):
    """(``test_grade.py`` grades its whole battery so, and checks the gradebook says it.)"""
    monkeypatch.setenv("WORKBOOK_PYTHONS", HERE)  # what pythons.find() sees on such a machine
    said: list[str] = []
    warned: list[str] = []
    chosen = interpreters.choose(False, None, say=said.append, warn=warned.append)
    assert chosen == [interpreters.this_python()] and not warned
    assert len(said) == 1 and said[0].startswith(f"only Python {chosen[0].release} found")


@pytest.mark.parametrize("args,env,message", [
    (["--python", "3.9"], {}, "--python 3.9: not a supported version"),
    (["--python", "3.10", "--python", "3.13"], {"WORKBOOK_PYTHONS": HERE},
     "not found on this machine"),
], ids=["unsupported", "not_found"])
def test_a_python_that_cannot_judge_is_one_line_and_exit_2(tmp_path, args, env, message):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / P01.learner_file.name).write_text(battery.skeleton(P01))
    out = cli("grade", str(tmp_path), "--problem", "p01", "--out", str(tmp_path / "g.csv"),
              *args, env=env)
    assert out.returncode == 2 and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "g.json").exists()


def test_a_pair_judged_under_other_pythons_is_graded_again_on_resume(tmp_path):
    from workbook.grading import batch, discovery
    from workbook.grading.sandbox.limits import Limits
    from workbook.grading.sandbox.stage import Harness
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    (tmp_path / "subs" / "ann" / P01.learner_file.name).write_text("x = 1\n")
    subs = discovery.discover(tmp_path / "subs", [P01])
    harness, limits = {"p01": Harness.snapshot(P01)}, {"p01": Limits.for_wall(20)}
    book = Gradebook(tmp_path / "g.json", [P01])
    one = [interpreters.this_python().release]
    (_, _, fp), = batch._plan(subs, [P01], book, limits, harness, pythons=one).todo
    book.record("ann", "p01", _entry({}), fp)
    assert batch._plan(subs, [P01], book, limits, harness, pythons=one).todo == []
    assert len(batch._plan(subs, [P01], book, limits, harness,
                           pythons=["3.10.13", *one]).todo) == 1


# -- combining, without running anything -----------------------------------------------------

JUDGES = {v: interpreters.GradingPython(v, f"{v}.1", f"/py{v}") for v in ("3.10", "3.13")}


def _entry(statuses: dict[str, str], **fields) -> Entry:
    cps = [CheckpointResult(cp.id, cp.title, cp.kind, statuses.get(cp.id, "passed"),
                            seconds=1.0, message=None if statuses.get(cp.id) is None
                            else "not run to the end: timed out (limit 90 s)")
           for cp in P01.checkpoints]
    return Entry(status=fields.pop("status", "ok"), checkpoints=cps, max_score=P01.points,
                 points={cp.id: P01.checkpoint(cp.id).points for cp in cps
                         if cp.status == "passed"}, **fields)


def test_a_checkpoint_unfinished_under_one_python_earns_nothing_and_says_where():
    entries = {"3.10": _entry({"p01.explore": "incomplete"}, status="error", seconds=4.0,
                              cpu=1.5, reasons=["timed out (limit 90 s)"], notes=["same"]),
               "3.13": _entry({}, seconds=3.0, cpu=1.0, notes=["same"])}
    merged = interpreters.combine(P01, entries, JUDGES)
    explore = next(cp for cp in merged.checkpoints if cp.id == "p01.explore")
    assert explore.status == "incomplete"
    assert explore.message.startswith("on Python 3.10 only (passed on 3.13):")
    assert merged.score == P01.points - P01.checkpoint("p01.explore").points
    assert merged.status == "error"
    assert merged.reasons == ["on Python 3.10: timed out (limit 90 s)"]
    assert merged.notes == ["same"]  # every run had it: said once, with no Python named
    assert (merged.seconds, merged.cpu) == (7.0, 2.5)
    assert merged.pythons == ["3.10.1", "3.13.1"]
    assert merged.scores_by_python == {"3.10.1": merged.score, "3.13.1": P01.points}
    assert exports.lower_on(merged) == ["3.10.1"]


def test_one_python_judging_keeps_the_entry_as_it_was_and_names_its_python():
    entry = _entry({"p01.fifo": "failed"})
    merged = interpreters.combine(P01, {"3.13": entry}, JUDGES)
    assert merged is entry and merged.pythons == ["3.13.1"]
    assert exports.lower_on(merged) == []


def test_a_python_the_sandbox_cannot_run_is_left_out_with_a_warning_unless_named(monkeypatch):
    own = interpreters.this_python()
    other = interpreters.GradingPython("3.10", "3.10.1", "/nowhere/python", ("/nowhere",))
    monkeypatch.setattr(interpreters, "probe", lambda mode, forbidden, python, binds:
                        None if python == own.executable else "Permission denied")
    warned: list[str] = []
    kept = interpreters.sandboxed([other, own], "uid", [], strict=False, warn=warned.append)
    assert kept == [own] and len(warned) == 1 and "Python 3.10 left out" in warned[0]
    with pytest.raises(interpreters.IsolationError, match="Python 3.10 cannot be sandboxed"):
        interpreters.sandboxed([other, own], "uid", [], strict=True, warn=warned.append)

