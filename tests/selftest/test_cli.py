"""The command line: every path, its output and its exit code."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.selftest.conftest import cli
from workbook import ROOT, manifest, progress, variants

P01 = manifest.get("p01")
CHECKPOINT_KEYS = {"id", "title", "kind", "status", "seconds", "message", "pitfall"}


def test_the_reference_check_exits_0_and_shows_a_checklist():
    out = cli("p01", "--solution")
    assert out.returncode == 0, out.stdout + out.stderr
    for cp in P01.checkpoints:
        assert cp.title in out.stdout
    assert "✓" in out.stdout and "marked done" not in out.stdout


def test_the_skeleton_check_exits_1_with_one_not_implemented_line():
    out = cli("p01")
    assert out.returncode == 1
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 2, out.stdout  # the header, then one line
    assert "still the skeleton" in lines[1] and "not implemented" in lines[1]
    assert "Traceback" not in out.stdout + out.stderr


def test_json_report_follows_the_documented_schema():
    out = cli("p01", "--solution", "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 0
    assert {"problem", "file", "passed", "checkpoints"} <= set(doc)
    assert doc["problem"] == "p01" and doc["passed"] is True
    assert [cp["id"] for cp in doc["checkpoints"]] == [cp.id for cp in P01.checkpoints]
    for cp in doc["checkpoints"]:
        assert CHECKPOINT_KEYS <= set(cp)
        assert cp["status"] == "passed" and cp["kind"] in ("core", "extension")
        assert isinstance(cp["seconds"], float)


def test_a_pitfall_check_exits_1_and_names_the_pitfall():
    out = cli("p01", "--pitfall", "per_put_wakeup", "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 1 and doc["passed"] is False
    assert "per_put_wakeup" in {cp["pitfall"] for cp in doc["checkpoints"]}
    text = cli("p01", "--pitfall", "per_put_wakeup").stdout
    assert "Looks like" in text and "hint level" in text


def test_repeat_reports_runs_and_failed_runs():
    out = cli("p01", "--solution", "--repeat", "2", "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 0 and doc["runs"] == 2 and doc["failed_runs"] == 0
    assert doc["stuck_verdicts"] == 0 and [r["failed"] for r in doc["each_run"]] == [[], []]
    out = cli("p01", "--pitfall", "single_drain", "--repeat", "2", "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 1 and doc["runs"] == 2 and doc["failed_runs"] == 2
    assert doc["pitfall_runs"]["single_drain"] == 2
    declared = variants.get(manifest.get("p01"), "pitfall", "single_drain").fails
    assert [sorted(r["failed"]) for r in doc["each_run"]] == [sorted(declared)] * 2


def test_a_syntax_error_shows_file_line_and_a_caret_under_the_column(tmp_path):
    bad = tmp_path / "p01_output_sink.py"
    bad.write_text("class OutputSink:\n    def put(self, item)\n        pass\n")
    out = cli("p01", "--file", str(bad))
    assert out.returncode == 1
    assert f"syntax error at {bad}:2" in out.stdout.replace("\n", "")
    lines = out.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "def put(self, item)")
    caret = lines[at + 1]
    assert caret.strip() == "^" and caret.index("^") == lines[at].index(")") + 1, out.stdout
    assert "Traceback" not in out.stdout + out.stderr


def test_an_import_time_exception_is_reported_with_its_line(tmp_path):
    bad = tmp_path / "p01_output_sink.py"
    bad.write_text("import no_such_module_here\n")
    out = cli("p01", "--file", str(bad), "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 1 and "no_such_module_here" in doc["import_error"]
    assert all(cp["status"] == "failed" for cp in doc["checkpoints"])


def test_a_file_missing_a_name_fails_its_checkpoints_readably(tmp_path):
    empty = tmp_path / "p01_output_sink.py"
    empty.write_text("")
    doc = json.loads(cli("p01", "--file", str(empty), "--json").stdout)
    assert "AttributeError" in doc["checkpoints"][0]["message"]


@pytest.mark.parametrize("args,needle", [
    (("p99",), "unknown problem"),
    (("p01", "--file", "/no/such/file.py"), "no such file"),
    (("p01", "--pitfall", "nope"), "no pitfall"),
    (("p01", "--bogus"), "unrecognized arguments"),
    (("p01", "--repeat", "0"), "--repeat"),
    (("p01", "--solution", "--pitfall", "single_drain"), "not allowed"),
    (("hint", "p99"), "unknown problem"),
    (("hint", "p01", "4"), "invalid choice"),
    (("book",), "required"),
    (("list", "extra"), "takes no arguments"),
    (("demo", "p01", "--bogus"), "unrecognized arguments"),
    (("demo",), "usage"),
    (("bench",), "usage"),
    ((), "usage"),
])
def test_bad_input_is_a_usage_error_with_exit_2(args, needle):
    out = cli(*args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert needle in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("command", [
    ("grade", "folder"), ("gradescope-bundle", "out.zip"), ("serve",), ("site", "out"),
    ("new", "p05", "name"), ("mutate", "p01"), ("demo", "p02"), ("hint", "p01"), ("book", "p01"),
    ("all",), ("p01",)])
def test_every_commands_unknown_option_is_one_line_with_exit_2(command):
    """Each command's parser says a bad option in one line, never argparse's usage block."""
    out = cli(*command, "--no-such-option")
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "unrecognized arguments: --no-such-option" in lines[0], lines
    assert "usage:" not in out.stderr


def test_the_grader_run_as_a_module_says_a_bad_option_in_one_line_too():
    out = subprocess.run([sys.executable, "-m", "workbook.grading.batch", "folder", "--jobs",
                          "0"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--jobs needs a whole number" in lines[0], lines


def test_list_shows_every_problem():
    out = cli("list")
    assert out.returncode == 0
    for p in manifest.problems().values():
        assert p.id in out.stdout and p.title in out.stdout


def test_hint_reveals_the_next_unseen_level_and_records_it(tmp_path):
    env = {"WORKBOOK_PROGRESS": str(tmp_path / "progress.json")}
    levels = []
    for _ in range(4):
        out = cli("hint", "p01", env=env)
        assert out.returncode == 0
        levels.append(next(n for n in (1, 2, 3) if f"hint level {n} of 3" in out.stdout))
    assert levels == [1, 2, 3, 3]
    out = cli("hint", "p01", "1", env=env)
    assert "hint level 1 of 3" in out.stdout
    status = cli("status", env=env)
    assert status.returncode == 0 and "L3" in status.stdout


def test_passing_the_learner_check_marks_the_problem_done(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    own = mine / P01.learner_file.name
    own.write_text(P01.solution_file.read_text())
    env = {"WORKBOOK_PROGRESS": str(tmp_path / "progress.json"), "WORKBOOK_MINE": str(mine)}
    out = cli("p01", "--file", str(own), env=env)
    assert out.returncode == 0 and "marked done" in out.stdout
    data = json.loads((tmp_path / "progress.json").read_text())
    assert data["problems"]["p01"]["done_at"]
    assert "done" in cli("status", env=env).stdout


def test_only_checks_of_the_learner_file_change_progress(tmp_path):
    """--file, --solution and --pitfall runs never overwrite the learner's record."""
    env = {"WORKBOOK_PROGRESS": str(tmp_path / "progress.json")}
    for args in (("--file", str(P01.solution_file)), ("--solution",),
                 ("--pitfall", "single_drain")):
        out = cli("p01", *args, env=env)
        assert "marked done" not in out.stdout
    assert not (tmp_path / "progress.json").exists()
    status = cli("status", env=env).stdout
    assert "done" not in status.split("p01", 1)[1].split("\n", 1)[0]


def test_a_usage_error_is_one_line_within_80_columns():
    for args in (("p99",), ("p01", "--bogus"), ("p01", "--pitfall", "nope"),
                 ("p01", "--repeat", "0")):
        out = cli(*args, env={"COLUMNS": "80"})
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, out.stderr
        assert len(lines[0]) <= 80, lines[0]


def test_the_verdict_counts_core_and_extensions_separately(tmp_path):
    out = cli("p03", "--pitfall", "shutdown_no_wake", env={"COLUMNS": "200"})
    assert "11/12 core checkpoints, 1/2 extensions passed" in out.stdout, out.stdout[-600:]


def test_the_p02_demo_shows_the_byte_waking_what_the_event_did_not():
    out = cli("demo", "p02")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "stop_requested = True" in out.stdout


def test_book_renders_the_chapter():
    out = cli("book", "p01")
    assert out.returncode == 0 and "Pitfalls" in out.stdout


def test_selftest_help_is_reachable_from_check_sh():
    out = subprocess.run([str(ROOT / "check.sh"), "--help"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0 and "selftest" in out.stdout


@pytest.mark.parametrize("argv,parallel", [
    ([], True), (["-p", "some_plugin", "-q"], True), (["-k", "grade"], True),
    (["-n", "1"], False), (["-n1"], False), (["--numprocesses=3"], False),
    (["-p", "no:xdist"], False), (["-pno:xdist"], False)])
def test_selftest_runs_on_xdist_workers_unless_the_caller_chooses_otherwise(
        monkeypatch, argv, parallel):
    from workbook import cli as cli_module
    ran: list[list[str]] = []
    monkeypatch.setattr(cli_module.subprocess, "call", lambda command, cwd: ran.append(command))
    cli_module.cmd_selftest(argv)
    (command,) = ran
    ours, theirs = command[:len(command) - len(argv)], command[len(command) - len(argv):]
    assert theirs == argv, command  # the caller's arguments come last: theirs win
    assert ("-n" in ours) == parallel, command


def test_concurrent_progress_updates_are_not_lost(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBOOK_PROGRESS", str(tmp_path / "progress.json"))
    code = ("import sys; from workbook import progress\n"
            "for i in range(40): progress.record_hint(sys.argv[1], 1 + i % 3)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, pid], cwd=ROOT,
                              env={**os.environ}) for pid in ("pa", "pb", "pc")]
    assert [p.wait(120) for p in procs] == [0, 0, 0]
    data = json.loads((tmp_path / "progress.json").read_text())
    assert {k: v["hints_seen"] for k, v in data["problems"].items()} == {
        "pa": 3, "pb": 3, "pc": 3}
    assert progress.load()["problems"]["pa"]["hints_seen"] == 3
