"""Progress says what is true now (issue 23.4/23.5/23.8): a failing check after "done" is
shown, a changed file is shown, a pass after a failure suggests --repeat; and the small
command-line defects (status at 80 columns, `P01`, --section's closest list)."""
from __future__ import annotations

import json
import time

import pytest

from tests.selftest.conftest import cli
from workbook import manifest, progress
from workbook.run import CheckpointResult, Result

P01 = manifest.get("p01")


def _result(file, passed: bool) -> Result:
    cps = [CheckpointResult(cp.id, cp.title, cp.kind, "passed") for cp in P01.checkpoints]
    if not passed:
        cps[-1].status = "failed"
    return Result("p01", str(file), cps)


def test_a_failing_check_after_done_is_shown_and_a_changed_file_is_noticed(
        tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBOOK_PROGRESS", str(tmp_path / "progress.json"))
    own = tmp_path / "p01_output_sink.py"
    own.write_text("v1\n")
    assert progress.record_check("p01", _result(own, True)) is None
    e = progress.entry(progress.load(), "p01")
    assert progress.status_text(e, own) == "done"
    assert e["last_check"]["ok"] is True and e["last_check"]["source"] == "terminal"
    assert e["last_check"]["sha256"] == progress.file_hash(own)
    previous = progress.record_check("p01", _result(own, False), source="page")
    assert previous["ok"] is True
    e = progress.entry(progress.load(), "p01")
    assert progress.status_text(e, own) == "done, but the last check failed"
    assert e["last_check"]["source"] == "page"
    own.write_text("v2\n")
    assert progress.status_text(e, own) == \
        "done, but the last check failed · file changed since"


def test_repeat_is_suggested_only_when_the_outcome_changed(tmp_path):
    own = tmp_path / "p01_output_sink.py"
    own.write_text("same\n")
    same = {"ok": False, "at": "2026-12-02 05:40:00", "sha256": progress.file_hash(own)}
    text = progress.repeat_advice(same, _result(own, True), "p01")
    assert text and "This same file failed its last check (05:40)" in text
    assert "./check.sh p01 --repeat 20" in text
    text = progress.repeat_advice({**same, "ok": True}, _result(own, False), "p01")
    assert text and "This same file passed its last check" in text
    other = {**same, "sha256": "0" * 64}
    assert "a race can pass by luck" in progress.repeat_advice(other, _result(own, True), "p01")
    assert progress.repeat_advice(other, _result(own, False), "p01") is None  # a new bug
    assert progress.repeat_advice({**same, "ok": True}, _result(own, True), "p01") is None
    assert progress.repeat_advice(None, _result(own, True), "p01") is None


def test_the_cli_prints_the_repeat_advice_after_a_pass_that_follows_a_failure(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    own = mine / P01.learner_file.name
    own.write_text(P01.solution_file.read_text())
    store = tmp_path / "progress.json"
    store.write_text(json.dumps({"problems": {"p01": {"last_check": {
        "passed": 5, "total": 6, "at": "2026-12-02 05:40:00", "ok": False,
        "sha256": progress.file_hash(own)}}}}))
    env = {"WORKBOOK_PROGRESS": str(store), "WORKBOOK_MINE": str(mine)}
    out = cli("p01", "--file", str(own), env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "failed its last check (05:40)" in " ".join(out.stdout.split())
    assert "--repeat 20" in out.stdout


@pytest.mark.parametrize("day", ["today", "another day"])
def test_status_at_80_columns_shows_every_title_whole(tmp_path, day):
    # A last check of today shows its time only, one of another day its date too: the
    # wider cell must not squeeze a title into a folded word (it did on the day after).
    at = time.strftime("%Y-%m-%d") if day == "today" else "2026-12-02"
    store = tmp_path / "progress.json"
    store.write_text(json.dumps({"problems": {"p01": {
        "done_at": "2026-12-01 10:00:00", "last_check": {
            "passed": 5, "total": 6, "at": f"{at} 05:40:11", "ok": False,
            "sha256": "0" * 64}}}}))
    out = cli("status", env={"WORKBOOK_PROGRESS": str(store), "COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    rows = [line for line in lines if line.startswith("│")]
    assert rows and all(line.endswith("│") for line in rows), out.stdout  # nothing cut off
    text = " ".join(out.stdout.split())
    assert "…" not in out.stdout
    for problem in manifest.problems().values():
        for word in problem.title.split():
            assert word in text, (word, out.stdout)
    # The status column, read cell by cell down its lines (other columns wrap too).
    status = " ".join(row.split("│")[-2].strip() for row in rows)
    assert "done, but the last check failed · file changed since" in " ".join(status.split()), \
        out.stdout


def test_problem_ids_are_not_case_sensitive():
    out = cli("P01", "--json")  # the skeleton: a quick check, accepted (exit 1, not 2)
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout)["problem"] == "p01"
    assert cli("hint", "P01", "1").returncode == 0


def test_section_lists_the_closest_headings_whole_one_per_line():
    out = cli("book", "p01", "--section", "xyzzy")
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    assert lines[0].startswith("error: no section of p01 matches 'xyzzy'; the closest:")
    near = [line.strip() for line in lines[1:] if line.strip()]
    assert len(near) == 3 and not any(n.endswith("…") for n in near), out.stderr
    assert cli("book", "p01", "--section", near[0]).returncode == 0
