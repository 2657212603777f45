"""Instructor grading: the sandbox, the report's integrity, scoring, the gradebook, exports.

The battery here is P01's share of ``tests/selftest/grading/battery.py`` (every hostile kind,
the reference, alternates, skeleton, odd layouts) graded once with ``--jobs 2`` and a short
wall-clock limit; the full 40-submission battery across all problems is
``python -m tests.selftest.grading.measure`` (slower, reports throughput).
"""
from __future__ import annotations

import csv
import fcntl
import io
import json
import platform
import re
import shutil
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import types
import zipfile
from pathlib import Path

import pytest

from tests.selftest.conftest import cli
from tests.selftest.grading import battery
from workbook import ROOT, manifest
from workbook.explore.driver import seed_for
from workbook.grading import discovery, exports, gradebook, judging, protocol, similarity
from workbook.grading.sandbox import IsolationError, runner, uids
from workbook.grading.sandbox.channels import ReportReader
from workbook.grading.sandbox.isolation import detect
from workbook.grading.sandbox.limits import Limits
from workbook.grading.sandbox.procs import processes_of
from workbook.grading.sandbox.stage import STAGE_PREFIX, Harness, Stage, staged_files

P01 = manifest.get("p01")
# seconds: the wall clock of one run in these tests.  The reference needs ~3 s of tests plus
# p01.explore's ~3 s of CPU, which a loaded 2-core box stretches several-fold (18-42 s seen
# at load 14 with 20 s: the exploration was cut short and the run timed out).
LIMIT = "40"


def _forbidden() -> list[Path]:
    return [p.solution_file for p in manifest.problems().values()]


ISOLATION = detect(_forbidden())


#: The grader's own Python alone, as ``WORKBOOK_PYTHONS`` names it (see ``one_python``).
ONE_PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.fixture(scope="module", autouse=True)
def one_python():
    """Every batch here is judged under the grader's own Python alone, as on a machine with
    one Python: these tests are about the sandbox, the judge and the gradebook, and judging
    under each Python found (``grade``'s default) would multiply their runs by four.
    Judging under several is ``test_grade_pythons.py``'s."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WORKBOOK_PYTHONS", ONE_PYTHON)
        yield


def _imports_from(stage_dir: Path, module: str) -> str:
    """What ``python -v`` says about loading ``module`` from the staged copy."""
    out = subprocess.run([sys.executable, "-I", "-B", "-v", "-c",
                          f"import sys; sys.path.insert(0, {str(stage_dir)!r}); import {module}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stderr


def test_the_harness_is_compiled_once_and_a_run_loads_it_only_while_the_bytes_match():
    harness = Harness.snapshot(P01)
    compiled = dict(harness.bytecode)
    assert "workbook/testkit/__pycache__/waits." + sys.implementation.cache_tag + ".pyc" \
        in compiled
    assert not [rel for rel in compiled if "/test_" in rel or "conftest" in rel]
    with Stage(harness, P01.module, b"", None) as stage:
        pyc = (stage.dir / "workbook" / "testkit" / "__pycache__"
               / f"waits.{sys.implementation.cache_tag}.pyc")
        assert f"{pyc} matches" in _imports_from(stage.dir, "workbook.testkit.waits")
        source = stage.dir / "workbook" / "testkit" / "waits.py"
        changed = source.read_bytes() + b"\nCHANGED = True\n"
        source.unlink()  # a link to the harness's shared copy: replaced, not written through
        source.write_bytes(changed)
        assert f"{pyc} matches" not in _imports_from(stage.dir, "workbook.testkit.waits")
    assert harness.fingerprint == Harness.snapshot(P01).fingerprint


def test_by_default_a_batch_runs_four_runs_per_core_at_once():
    from workbook.grading import batch
    cores = len(os.sched_getaffinity(0))
    assert batch.default_jobs() == min(4 * cores, uids.UID_POOL)
    assert batch._parser().parse_args(["x"]).jobs == batch.default_jobs()

def _grade(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    # one_python's setting, given outright: the battery is graded in a thread that may
    # outlive the module's fixtures.
    return cli("grade", *args, "--time-limit", LIMIT, timeout=timeout,
               env={"WORKBOOK_PYTHONS": ONE_PYTHON})


def _sandbox_processes(uids: list[int], *, started_by: float | None = None) -> list[int]:
    """Processes running as ``uids``; with ``started_by`` (seconds since boot), only those
    started by then -- a uid the killed grader let go may be taken at once by a batch of
    another test running beside this one, whose processes are not the killed grader's."""
    return [pid for uid in uids for pid in processes_of(uid)
            if started_by is None or _started(pid) <= started_by]


def _started(pid: int) -> float:
    """When process ``pid`` started, in seconds since boot (0.0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return 0.0
    return ticks / os.sysconf("SC_CLK_TCK")


def _uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def _flat(text: str) -> str:
    """The text with every run of whitespace as one space (tables wrap their captions)."""
    return " ".join(text.split())


def _wait_for_no_sandbox_process(uids: list[int], seconds: float = 10, *,
                                  started_by: float | None = None) -> list[int]:
    deadline = time.monotonic() + seconds
    while _sandbox_processes(uids, started_by=started_by) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _sandbox_processes(uids, started_by=started_by)


# -- the report's integrity, without running anything ---------------------------------------

KEY = b"k" * 32


def _line(seq: int, record: dict, key: bytes = KEY) -> bytes:
    return protocol.encode(key, seq, protocol.from_dict(record)).strip()


def _reader() -> ReportReader:
    return ReportReader(-1, KEY)  # fed by hand: its thread never starts


def test_a_test_record_keeps_its_cause_and_stuck_count_through_the_pipe():
    reader = _reader()
    reader.feed(_line(0, {"event": "test", "outcome": "failed", "cause": "stuck at f.py:3",
                          "stuck": 2}))
    assert reader.records[0].cause == "stuck at f.py:3" and reader.records[0].stuck == 2
    trusted = [(n, c) for n, c in battery.collection_order(P01) if c == "p01.fifo"][:1]
    records = [protocol.Start(), protocol.Collected(1), protocol.Item(*trusted[0]),
               protocol.TestDone(*trusted[0], outcome="failed", cause="E @ f.py:3", stuck=1),
               protocol.End()]
    entry = judging.judge(P01, runner.Outcome(records=records), trusted,
                          Limits.for_wall(90), "a.py", Path("/x"), Path("/x/t.py"))
    fifo = next(cp for cp in entry.checkpoints if cp.id == "p01.fifo")
    assert (fifo.cause, fifo.stuck) == ("E @ f.py:3", 1)


def test_a_report_line_without_the_key_is_counted_as_forged_and_ignored():
    reader = _reader()
    reader.feed(_line(0, {"event": "start"}))
    reader.feed(_line(1, {"event": "test", "outcome": "passed"}, key=b"x" * 32))
    reader.feed(b'{"event": "test", "outcome": "passed"}')
    reader.feed(b"0" * 64 + b' 1 {"event": "end"}')
    assert reader.records == [protocol.Start()]
    assert reader.forged == 3 and reader.violation is None


def test_the_snapshot_names_what_was_replaced_or_swapped_and_hooks_from_elsewhere(monkeypatch):
    from _pytest.config import PytestPluginManager

    from workbook.grading.sandbox import judge
    probe = types.ModuleType("guard_probe")
    code = "def f():\n    return 1\n\n\ndef g():\n    return 2\n"
    exec(compile(code, str(ROOT / "tests" / "guard_probe.py"), "exec"), vars(probe))
    monkeypatch.setitem(sys.modules, "guard_probe", probe)
    plugins = PytestPluginManager()
    changed = judge.snapshot(("guard_probe",), plugins)
    assert changed() == ()
    probe.f.__code__ = probe.g.__code__  # the same function object, other code
    assert changed() == ("guard_probe.f.__code__",)
    probe.g = lambda: 3
    assert "guard_probe.g" in changed()
    probe.g = probe.f.__globals__["g"] = probe.f  # back to a function, then a name added:
    vars(probe)["getattr"] = lambda *a: None  # it would shadow the builtin in the module
    assert "guard_probe.getattr (added)" in changed()
    vars(probe)[("not", "a name")] = 1  # a key whose own __eq__ could run: nothing else
    assert changed() == ("guard_probe (a key that is not a name)",)  # is looked up
    del vars(probe)[("not", "a name")], vars(probe)["getattr"]

    def hook_from(filename: str) -> types.SimpleNamespace:
        namespace: dict = {}
        exec(compile("def pytest_runtest_logreport(report):\n    pass\n", filename, "exec"),
             namespace)
        return types.SimpleNamespace(pytest_runtest_logreport=namespace["pytest_runtest_logreport"])

    plugins.register(hook_from(str(ROOT / "workbook" / "plugin.py")), "harness-like")
    plugins.register(hook_from("/elsewhere/cheat.py"), "foreign")
    hooks = [name for name in changed() if name.startswith("hook ")]
    assert hooks == ["hook pytest_runtest_logreport foreign"]


def test_the_kits_modules_and_the_tuning_constants_are_guarded(monkeypatch):
    """The package workbook.testkit is made of modules (and the stuck detector and the
    tuning constants of more): a threshold raised or a decision replaced in any of them is
    a test weakened, so the snapshot covers them all."""
    from _pytest.config import PytestPluginManager

    import workbook.testkit  # noqa: F401 - imports every layer
    from workbook import tuning
    from workbook.grading.sandbox import judge, reporter
    from workbook.stuck import decide
    kit = reporter._kit_modules()
    assert {"workbook.tuning", "workbook.stuck.decide", "workbook.stuck.procfs",
            "workbook.testkit.waits"} <= set(kit)
    changed = judge.snapshot(reporter.GUARDED + kit, PytestPluginManager())
    assert changed() == ()
    monkeypatch.setattr(tuning, "PARKED_CPU", 1e9)
    monkeypatch.setattr(decide, "decide", lambda *a, **k: None)
    monkeypatch.setattr(workbook.testkit, "STILL_CPU", 1e9)
    assert {"workbook.tuning.PARKED_CPU", "workbook.stuck.decide.decide",
            "workbook.testkit.STILL_CPU"} <= set(changed())


def test_a_gap_or_a_replay_in_the_sequence_stops_the_report_there():
    reader = _reader()
    reader.feed(_line(0, {"event": "start"}))
    reader.feed(_line(0, {"event": "start"}))  # a replayed record
    reader.feed(_line(1, {"event": "end"}))
    assert reader.records == [protocol.Start()]
    assert "record 0 arrived where 1 was due" in reader.violation


TRUSTED = [("t.py::test_a", "p01.fifo"), ("t.py::test_b", "p01.fifo"), ("t.py::test_c", "p01.stop")]


def _honest_run(**changes) -> list[protocol.Record]:
    records = [{"event": "start"}, {"event": "collected", "count": 3}]
    records += [{"event": "item", "nodeid": n, "checkpoint": c} for n, c in TRUSTED]
    records += [{"event": "test", "nodeid": n, "checkpoint": c, "outcome": "passed",
                 "pytest_outcome": "passed"} for n, c in TRUSTED]
    records.append({"event": "end"})
    for index, record in changes.items():
        records[int(index[1:])] = record
    return [protocol.from_dict(r) for r in records]


def test_an_honest_run_passes_the_crosscheck_whole():
    verdict = protocol.honest_order(_honest_run(), TRUSTED)
    assert verdict.ended and verdict.violation is None
    assert [r.event for r in verdict.accepted] == ["test", "test", "test", "end"]


def test_a_note_from_the_first_test_is_part_of_an_honest_run():
    records = _honest_run()
    records.insert(5, protocol.from_dict({"event": "note", "text": "latency 1 ms"}))
    verdict = protocol.honest_order(records, TRUSTED)
    assert verdict.ended and verdict.violation is None, verdict.violation


def test_a_record_after_the_end_is_a_departure_and_is_not_kept():
    records = _honest_run() + [protocol.from_dict({"event": "note", "text": "late"})]
    verdict = protocol.honest_order(records, TRUSTED)
    assert "a 'note' record after the run ended" in verdict.violation
    assert [r.event for r in verdict.accepted] == ["test", "test", "test", "end"]


@pytest.mark.parametrize("index,record,why", [
    ("i5", {"event": "test", "nodeid": "t.py::test_b", "checkpoint": "p01.fifo",
            "outcome": "passed"}, "where 't.py::test_a' was due"),
    ("i1", {"event": "test", "nodeid": "t.py::test_a", "checkpoint": "p01.fifo",
            "outcome": "passed"}, "before the tests were collected"),
    ("i6", {"event": "test", "nodeid": "t.py::test_b", "checkpoint": "p01.fifo",
            "outcome": "passed", "pytest_outcome": "failed"}, "failed but was reported as passed"),
    ("i2", {"event": "item", "nodeid": "t.py::test_x", "checkpoint": "p01.fifo"},
     "differ from the acceptance set"),
    ("i1", {"event": "collected", "count": 9}, "9 tests collected"),
    ("i7", {"event": "integrity", "changed": ["workbook.testkit.check"]},
     "machinery was changed: workbook.testkit.check"),
], ids=["out_of_order", "before_collection", "failed_as_passed", "other_tests", "wrong_count",
        "harness_replaced"])
def test_the_crosscheck_keeps_only_what_came_before_a_departure(index, record, why):
    records = _honest_run(**{index: record})
    verdict = protocol.honest_order(records, TRUSTED)
    assert why in verdict.violation
    assert not verdict.ended
    kept = [r for r in verdict.accepted if r.event == "test"]
    assert len(kept) < 3 and all(r in records[:int(index[1:])] for r in kept)


def test_sandbox_uids_claimed_by_one_grader_are_never_handed_to_another():
    with uids.UidClaim(2) as first, uids.UidClaim(2) as second:
        assert len(first.uids) == len(second.uids) == 2
        assert not set(first.uids) & set(second.uids)
        first.release()  # free again: the lowest of them is the next one handed out
        with uids.UidClaim(1) as again:
            assert again.uids[0] not in second.uids
            assert again.uids[0] <= min(first.uids)


def test_a_run_that_starts_while_the_grader_is_interrupted_is_killed_at_once(monkeypatch):
    monkeypatch.setattr(runner, "_STOPPING", threading.Event())
    runner.kill_all()  # the interrupt comes between a worker's last check and its run
    with uids.UidClaim(0 if ISOLATION == "none" else 1) as claim:
        uid = (claim.uids or [None])[0]
        with Stage(Harness(()), "x", b"", uid) as stage:
            out = runner.run(stage, [sys.executable, "-c", "import time; time.sleep(60)"],
                              Limits.for_wall(60), iso=ISOLATION, uid=uid)
    assert out.signal == signal.SIGKILL and out.timed_out is None and out.seconds < 20


def test_a_run_is_staged_with_its_problem_and_the_harness_package_only():
    staged = {str(rel) for rel in staged_files([P01])}
    assert {"workbook/__init__.py", "workbook/manifest.py", "workbook/plugin.py",
            "workbook/testkit/__init__.py", "workbook/stuck/decide.py", "workbook/tuning.py",
            "workbook/grading/protocol.py",
            "workbook/grading/sandbox/reporter.py", "workbook/problems/p01.toml",
            "tests/__init__.py", "tests/p01/__init__.py"} <= staged
    assert any(name.startswith("tests/p01/test_") for name in staged)
    assert not [name for name in staged if name.startswith(("solutions", "mine", "hints",
                                                             "book", "tests/p02",
                                                             "tests/selftest"))
                or name == "workbook/problems/p02.toml"]


def test_every_module_the_acceptance_sets_import_is_staged():
    """Behaviour, not a list: the tests are collected in a directory holding only the staged
    files (the grader's trusted collection does the same inside the sandbox)."""
    import shutil
    for p in manifest.problems().values():
        with tempfile.TemporaryDirectory() as tmp:
            for rel in staged_files([p]):
                (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / rel, Path(tmp) / rel)
            target = Path(tmp) / "learner.py"
            target.write_text("")
            out = subprocess.run([sys.executable, "-m", "pytest", "-p", "workbook.plugin",
                                  "--collect-only", "-q", str(Path(tmp) / "tests" / p.id),
                                  "--problem", p.id, "--target", str(target),
                                  "--rootdir", tmp, "-p", "no:cacheprovider"],
                                 cwd=tmp, capture_output=True, text=True, timeout=120,
                                 env={**os.environ, "PYTHONPATH": tmp})
            assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


def test_the_gradebook_file_is_replaced_whole_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "gradebook.json"
    target.write_text("old")
    gradebook.atomic_write(target, b"new contents")
    assert target.read_bytes() == b"new contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gradebook.json"]


# -- finding submissions --------------------------------------------------------------------

def test_discovery_finds_folders_nested_files_and_lone_files_and_refuses_links(tmp_path):
    p02 = manifest.get("p02")
    (tmp_path / "ann" / "mine").mkdir(parents=True)
    (tmp_path / "ann" / "mine" / P01.learner_file.name).write_text("x = 1\n")
    (tmp_path / "ann" / "old" / "deeper").mkdir(parents=True)
    (tmp_path / "ann" / "old" / "deeper" / P01.learner_file.name).write_text("x = 2\n")
    (tmp_path / f"bob_{p02.module}.py").write_text("x = 3\n")
    (tmp_path / "eve").mkdir()
    (tmp_path / "eve" / P01.learner_file.name).symlink_to(P01.solution_file)
    (tmp_path / "zed").mkdir()
    (tmp_path / "zed" / P01.learner_file.name).write_bytes(b"#" * (discovery.MAX_FILE + 1))
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "notes.txt").write_text("not a submission")
    found = {s.name: s for s in discovery.discover(tmp_path, [P01, p02])}
    assert sorted(found) == ["ann", "bob", "eve", "zed"]
    assert found["ann"].files == {"p01": tmp_path / "ann" / "mine" / P01.learner_file.name}
    assert found["bob"].files == {"p02": tmp_path / f"bob_{p02.module}.py"}
    assert "symbolic link" in found["eve"].refused["p01"] and not found["eve"].files
    assert "too large" in found["zed"].refused["p01"]


# -- the battery: every kind of submission, graded once -------------------------------------

def _battery_names() -> list[str]:
    names = ["reference", "skeleton", "nested", "empty", "dave", "mallory-link",
             battery.FAKE_NAME.format(first=P01)]
    names += [f"alt-p01-{p.stem}" for p in sorted(P01.alternates_dir.glob("*.py"))]
    kinds = [k for k, _ in battery.kinds_for([P01], ISOLATION, selftest=True)]
    return names + [f"hostile-{k.replace('_', '-')}" for k in kinds]


def _grade_the_battery(root: Path) -> dict:
    """Build P01's battery in ``root`` and grade it with --jobs 2; what the tests look at
    right after the batch."""
    bat = battery.build(root, [P01], isolation=ISOLATION, selftest=True)
    started = time.monotonic()
    out = _grade(str(bat.submissions), "--problem", "p01", "--jobs", "2", "--format", "json",
                 "--out", str(root / "gradebook.json"))
    seconds = time.monotonic() - started
    uids = json.loads((root / "gradebook.json").read_text()).get("sandbox_uids", [])
    made = {"returncode": out.returncode, "stdout": out.stdout, "stderr": out.stderr,
            "seconds": seconds, "orphans": battery.marker_processes(bat.marker),
            "sandbox_processes": _wait_for_no_sandbox_process(uids, 2),
            "notes_left": battery.notes_left(bat.marker, uids)}
    shutil.rmtree(battery.decoy_path(bat.marker), ignore_errors=True)
    return made


def _shared(tmp_path_factory) -> Path:
    """The folder every xdist worker of this session sees (its own base, alone)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _battery_once(shared: Path, *, wait: bool) -> bool:
    """Grade the battery into ``shared`` unless some worker did or is doing it.  The grader
    holds the lock from start to end.  ``wait=False``: give up at once if another holds it;
    ``wait=True``: wait for it (600 s at most), then grade only if nobody did.  True when
    the result is there."""
    with open(shared / "p01-battery.lock", "w") as lock:
        deadline = time.monotonic() + 600
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not wait:
                    return False
                assert time.monotonic() < deadline, "waited 600 s for another worker's battery"
                time.sleep(0.5)
        done = shared / "p01-battery.json"
        if not done.exists():
            done.write_text(json.dumps(_grade_the_battery(shared / "p01-battery")))
        return True


@pytest.fixture(scope="session", autouse=True)
def battery_in_the_background(tmp_path_factory):
    """The first worker to run a test of this module starts grading the battery in a thread
    while it goes on with other tests (a batch is mostly waiting for sandboxed runs).  The
    battery's own tests come last (conftest's ordering), by when it is done; before, every
    other worker sat blocked on its lock for the two minutes it took.  This worker's session
    ends only after the thread: a worker leaving mid-batch would orphan the grader."""
    shared = _shared(tmp_path_factory)
    thread = threading.Thread(target=_battery_once, args=(shared,), kwargs={"wait": False},
                              name="p01-battery", daemon=True)
    thread.start()
    yield
    thread.join(600)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """P01's battery graded once per session: (battery, gradebook, cli output, seconds).

    Graded by one worker (``battery_in_the_background``); each test works on a copy of its
    own (some grade it again)."""
    shared = _shared(tmp_path_factory)
    _battery_once(shared, wait=True)
    made = json.loads((shared / "p01-battery.json").read_text())
    root = tmp_path_factory.mktemp("battery")
    shutil.copytree(shared / "p01-battery", root, symlinks=True, dirs_exist_ok=True)
    doc = json.loads((root / "gradebook.json").read_text())
    return battery.Battery.load(root), doc, types.SimpleNamespace(**made), made["seconds"]


def test_the_battery_grades_to_the_end_with_exit_code_0(graded):
    bat, doc, out, seconds = graded
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert sorted(doc["rows"]) == sorted(bat.expected)
    assert doc["isolation"] == ISOLATION
    # One Python here (``one_python``): said once, and every graded row names it.
    release = platform.python_version()
    assert doc["pythons"] == [{"version": release.rpartition(".")[0], "release": release,
                               "executable": sys.executable}]
    assert out.stderr.count(f"only Python {release} found") == 1
    graded = [r["problems"]["p01"] for r in doc["rows"].values()
              if r["problems"]["p01"]["seconds"]]
    assert graded and all(e["pythons"] == [release] for e in graded)


@pytest.mark.parametrize("name", _battery_names())
def test_each_submission_of_the_battery_is_graded_as_expected(graded, name):
    bat, doc, out, seconds = graded
    single = battery.Battery(bat.root, {name: bat.expected[name]}, bat.marker)
    assert battery.mismatches(doc, single, [P01]) == []


def test_no_process_of_a_submission_outlives_the_batch(graded):
    bat, doc, out, seconds = graded  # looked at right after the batch (other tests grade too)
    assert out.orphans == []  # the orphan hostile's sleeper
    assert len(doc["sandbox_uids"]) == (2 if ISOLATION != "none" else 0)
    assert out.sandbox_processes == []
    if ISOLATION in ("bwrap", "namespaces"):  # the PID namespace took every descendant
        assert all(e.get("leftovers", 0) == 0
                   for r in doc["rows"].values() for e in r["problems"].values())


@pytest.mark.skipif(ISOLATION in ("none", "uid"), reason="needs the namespaces")
def test_no_run_leaves_a_note_where_a_later_run_could_find_it(graded):
    """The leave_a_note hostile wrote into /run/lock, /var/lock and /dev/shm and made System V
    IPC objects: in the run's own view and IPC namespace, nothing of it is left outside."""
    bat, doc, out, seconds = graded
    assert out.notes_left == []


def test_the_summary_table_shows_each_problem_with_submitted_passed_and_mean(graded):
    bat, doc, out, seconds = graded
    text = _flat(out.stdout)
    for word in ("submitted", "passed", "errors", "mean score", "p01 · OutputSink",
                 "runs/min", f"isolation: {ISOLATION}"):
        assert word in text, text[-2000:]
    rows = [r["problems"]["p01"] for r in doc["rows"].values()]
    submitted = [e for e in rows if e["status"] != "not_submitted"]
    mean = sum(e["score"] for e in submitted) / len(submitted)
    assert f"{mean:.1f} / 100" in text


def test_csv_export_from_the_same_gradebook_skips_every_finished_pair(graded):
    bat, doc, out, seconds = graded
    csv_path = bat.root / "gradebook.csv"  # its state file is gradebook.json: all finished
    started = time.monotonic()
    again = _grade(str(bat.submissions), "--problem", "p01", "--out", str(csv_path))
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - started < seconds / 2
    submitted = [n for n, e in bat.expected.items() if e["p01"]["status"] != "not_submitted"]
    assert f"{len(submitted)} already graded" in _flat(again.stdout)  # not the empty folder
    lines = [",".join(row) for row in csv.reader(io.StringIO(csv_path.read_text()))]
    head = lines[0].split(",")
    assert head[:6] == ["submission", "status", "reasons", "total", "max_total", "percent"]
    checkpoints = head.index("p01 status") + 1
    assert [cp.id for cp in P01.checkpoints] == head[checkpoints:][:len(P01.checkpoints)]
    assert head[checkpoints + len(P01.checkpoints):] == ["pythons", "p01 lower on Python"]
    assert len(lines) == 1 + len(bat.expected)
    reference = next(line for line in lines if line.startswith("reference,"))
    assert reference.startswith("reference,ok,,100,100,100.0,100,ok")


def test_the_battery_exports_one_gradescope_results_json_per_submission(graded, tmp_path):
    bat, doc, out, seconds = graded
    copy = tmp_path / "gradebook.json"
    copy.write_text(json.dumps(doc))
    book = gradebook.Gradebook(copy, [P01])
    exports.export(book, "gradescope", tmp_path / "gs", single=False)
    written = {path.parent.name: json.loads(path.read_text())
               for path in (tmp_path / "gs").glob("*/results.json")}
    folders = exports.export_names(list(bat.expected))
    assert sorted(written) == sorted(folders.values())
    for name, folder in folders.items():
        _check_results_json(written[folder], [P01])
        assert written[folder]["score"] == doc["rows"][name]["total"]


# -- resume after a kill; --fresh -----------------------------------------------------------

def _finished(state: Path) -> dict[str, str]:
    try:
        doc = json.loads(state.read_text())
    except (OSError, ValueError):
        return {}
    return {name: entry["graded_at"] for name, row in doc["rows"].items()
            for pid, entry in row["problems"].items()
            if entry["status"] not in ("not_submitted", "pending")}


def test_a_batch_killed_midway_resumes_without_redoing_finished_work(tmp_path):
    # Skeletons: a run of a second instead of the reference's four, and each is still a
    # finished pair ("ok", total 0) that the resumed batch must keep as it was.
    subs = tmp_path / "subs"
    for name in ("a", "b", "c", "d", "e"):
        (subs / name).mkdir(parents=True)
        (subs / name / P01.learner_file.name).write_text(battery.skeleton(P01))
    state = tmp_path / "gradebook.json"
    command = [sys.executable, "-m", "workbook", "grade", str(subs), "--problem", "p01",
               "--format", "json", "--out", str(state), "--time-limit", LIMIT, "--quiet",
               "--jobs", "1"]
    batch = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(_finished(state)) < 2 and batch.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    killed_at = _uptime()
    batch.send_signal(signal.SIGKILL)  # no cleanup handler gets to run
    batch.wait(30)
    before = _finished(state)
    assert 2 <= len(before) < 5, before
    uids = json.loads(state.read_text())["sandbox_uids"]
    # the runs died with the grader (processes of those uids it started, not a later batch's)
    assert _wait_for_no_sandbox_process(uids, started_by=killed_at) == []

    out = _grade(str(subs), "--problem", "p01", "--format", "json", "--out", str(state))
    assert out.returncode == 0, out.stderr
    assert f"{len(before)} already graded" in _flat(out.stdout)
    after = _finished(state)
    assert sorted(after) == ["a", "b", "c", "d", "e"]
    assert {name: after[name] for name in before} == before  # finished work kept as it was
    doc = json.loads(state.read_text())
    assert all(row["total"] == 0 and row["status"] == "ok" for row in doc["rows"].values())
    stale = Path(tempfile.gettempdir()).glob(f"{STAGE_PREFIX}{batch.pid}-*")
    assert list(stale) == []  # the killed grader's staging directories were removed


def test_fresh_grades_again_what_resume_would_skip(tmp_path):
    subs = tmp_path / "subs"
    (subs / "a").mkdir(parents=True)
    (subs / "a" / P01.learner_file.name).write_text(battery.skeleton(P01))
    state = tmp_path / "g.json"
    args = (str(subs), "--problem", "p01", "--out", str(state))
    assert _grade(*args).returncode == 0
    first = _finished(state)
    time.sleep(1.1)  # graded_at has whole seconds
    assert "1 already graded" in _flat(_grade(*args).stdout)
    assert _finished(state) == first
    out = _grade(*args, "--fresh")
    assert "0 already graded" in _flat(out.stdout)
    assert _finished(state)["a"] != first["a"]


def test_a_changed_submission_is_graded_again_on_resume(tmp_path):
    subs = tmp_path / "subs"
    (subs / "a").mkdir(parents=True)
    learner = subs / "a" / P01.learner_file.name
    learner.write_text(battery.skeleton(P01))
    state = tmp_path / "g.json"
    args = (str(subs), "--problem", "p01", "--out", str(state))
    assert _grade(*args).returncode == 0
    assert json.loads(state.read_text())["rows"]["a"]["total"] == 0
    learner.write_text(battery.reference(P01))
    assert "0 already graded" in _flat(_grade(*args).stdout)
    assert json.loads(state.read_text())["rows"]["a"]["total"] == 100


def _graded_with_prelude(tmp_path: Path, prelude: str, time_limit: str) -> dict:
    """P01's skeleton with ``prelude`` at its top, graded alone: its gradebook entry, which
    must be an error worth 0."""
    subs = tmp_path / "subs"
    (subs / "a").mkdir(parents=True)
    (subs / "a" / P01.learner_file.name).write_text(battery.with_prelude(
        prelude, battery.skeleton(P01)))
    state = tmp_path / "g.json"
    out = cli("grade", str(subs), "--problem", "p01", "--format", "json", "--out", str(state),
              "--time-limit", time_limit)
    assert out.returncode == 0, out.stderr[-2000:]
    entry = json.loads(state.read_text())["rows"]["a"]["problems"]["p01"]
    assert (entry["status"], entry["score"]) == ("error", 0)
    return entry


def test_a_refused_call_ends_the_run_at_once_with_tampered_as_its_only_reason(tmp_path):
    """The guard's refusal decides the row: the judge sends the integrity record then and
    there, and the grader stops the run instead of waiting for its limits.  This one asks
    for ``sys.settrace`` at import, swallows the refusal and sleeps: before, the import
    limit ended it."""
    entry = _graded_with_prelude(
        tmp_path, "import sys, time\ntry:\n    sys.settrace(lambda *args: None)\n"
        "except Exception:\n    pass\ntime.sleep(60)\n", time_limit="20")
    assert len(entry["reasons"]) == 1 and entry["reasons"][0].startswith(
        "tampered: the verdict's machinery was changed: sys.settrace refused to "), \
        entry["reasons"]


def test_an_import_that_ignores_its_interruption_is_ended_by_the_import_limit(tmp_path):
    """A spinning import is interrupted with the learner check's sentence (the battery's
    ``import_loop``); one that swallows the interruption and spins on meets the grader's own
    import limit, which ``--time-limit`` caps."""
    entry = _graded_with_prelude(
        tmp_path, "while True:\n    try:\n        while True:\n            pass\n"
        "    except BaseException:\n        pass\n", time_limit="6")
    assert entry["reasons"] == ["timed out while importing (limit 6 s)"], entry["reasons"]


def test_a_grade_records_the_exploration_seed_and_another_seed_grades_again(tmp_path):
    """Graded runs explore from a seed the gradebook keeps, so ``./check.sh p03 FILE --seed
    N`` reproduces a grade; the run itself explored from that seed (its note says so)."""
    p03 = manifest.get("p03")
    subs = tmp_path / "subs"
    (subs / "a").mkdir(parents=True)
    (subs / "a" / p03.learner_file.name).write_text(p03.solution_file.read_text())
    state = tmp_path / "g.json"
    args = (str(subs), "--problem", "p03", "--format", "json", "--out", str(state))

    def grade(*more: str) -> subprocess.CompletedProcess:
        # P03's own limit (120 s), not LIMIT: on a loaded CI box a P03 run passed 20 s
        return cli("grade", *args, *more, timeout=600)

    def graded() -> dict:
        return json.loads(state.read_text())["rows"]["a"]["problems"]["p03"]

    assert grade("--seed", "5").returncode == 0
    entry = graded()
    explored = next(cp for cp in entry["checkpoints"] if cp["id"] == "p03.explore")
    assert entry["explore_seed"] == 5 and entry["status"] == "ok", entry
    assert any("(seed 5)" in note for note in explored["notes"]), explored
    out = grade()  # the default seed is another grading, not "already graded"
    assert "0 already graded" in _flat(out.stdout), out.stdout
    from workbook.explore import p03 as explorer
    assert graded()["explore_seed"] == explorer.DEFAULT_SEED


# -- Gradescope -----------------------------------------------------------------------------

TEST_KEYS = {"name", "number", "score", "max_score", "status", "output", "visibility"}


def _check_results_json(doc: dict, problems: list[manifest.Problem]) -> None:
    assert {"score", "tests", "output", "visibility"} <= set(doc)
    assert len(doc["tests"]) == sum(len(p.checkpoints) for p in problems)
    for test in doc["tests"]:
        assert TEST_KEYS <= set(test)
        assert test["status"] in ("passed", "failed")
        assert 0 <= test["score"] <= test["max_score"]
    assert doc["score"] == sum(t["score"] for t in doc["tests"])


def test_gradescope_format_writes_results_json_for_one_submission(tmp_path):
    p02 = manifest.get("p02")
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / P01.learner_file.name).write_text(battery.reference(P01))
    (sub / p02.learner_file.name).write_text("def broken(:\n")
    results = tmp_path / "results.json"
    out = _grade(str(sub), "--single", "--format", "gradescope", "--problem", "p01", "p02",
                 "--out", str(results))
    assert out.returncode == 0, out.stderr
    doc = json.loads(results.read_text())
    _check_results_json(doc, [P01, p02])
    assert doc["score"] == 100
    p02_tests = [t for t in doc["tests"] if t["number"].startswith("p02.")]
    assert all(t["status"] == "failed" and "syntax error" in t["output"] for t in p02_tests)


def test_gradescope_bundle_holds_the_autograder_scripts_and_no_solutions(tmp_path):
    zip_path = tmp_path / "autograder.zip"
    out = cli("gradescope-bundle", str(zip_path))
    assert out.returncode == 0, out.stderr
    with zipfile.ZipFile(zip_path) as zf:
        names = set(zf.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
    assert {"setup.sh", "run_autograder", "pyproject.toml", "constraints.txt",
            "workbook/grading/sandbox/runner.py", "workbook/grading/batch.py",
            "tests/__init__.py"} <= names
    assert modes["setup.sh"] & stat.S_IXUSR and modes["run_autograder"] & stat.S_IXUSR
    for p in manifest.problems().values():
        assert f"workbook/problems/{p.id}.toml" in names
        assert any(n.startswith(f"tests/{p.id}/test_") for n in names)
    assert not [n for n in names if n.startswith(("solutions/", "mine/", "hints/", "book/",
                                                  "tests/selftest/"))]


def test_the_bundled_run_autograder_grades_the_submission_into_results_json(tmp_path):
    zip_path = tmp_path / "autograder.zip"
    assert cli("gradescope-bundle", str(zip_path), "--problem", "p01").returncode == 0
    base = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(base / "source")
    script = base / "source" / "run_autograder"
    script.chmod(0o755)
    (base / "submission").mkdir()
    (base / "submission" / P01.learner_file.name).write_text(battery.reference(P01))
    env = {**os.environ, "AUTOGRADER_ROOT": str(base), "WORKBOOK_PYTHON": sys.executable}
    env.pop("WORKBOOK_PYTHONS")  # the image's one Python is the script's choice, not ours
    out = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    doc = json.loads((base / "results" / "results.json").read_text())
    _check_results_json(doc, [P01])
    assert doc["score"] == 100
    judged = json.loads((base / "results" / "gradebook.json").read_text())["pythons"]
    assert [p["executable"] for p in judged] == [sys.executable]  # no other looked for
    assert "preparing Python" not in out.stdout + out.stderr


# -- refusing to grade without isolation; usage ---------------------------------------------

def _world_readable(path: Path) -> bool:
    parents = [p for p in path.parents]
    return bool(path.stat().st_mode & stat.S_IROTH) and all(
        p.stat().st_mode & stat.S_IXOTH for p in parents)


@pytest.mark.skipif(os.geteuid() != 0, reason="the per-slot uid needs root")
def test_without_namespaces_the_grader_refuses_when_solutions_would_be_reachable(tmp_path):
    if not _world_readable(P01.solution_file) and os.access(sys.executable, os.X_OK):
        pytest.skip("here the sandbox user could not read solutions/ anyway")
    (tmp_path / "a").mkdir()
    out = cli("grade", str(tmp_path), "--problem", "p01", "--out", str(tmp_path / "g.csv"),
              env={"WORKBOOK_SANDBOX": "uid"})
    assert out.returncode == 2
    assert "cannot isolate learner code" in out.stderr
    assert not (tmp_path / "g.json").exists()


@pytest.mark.parametrize("args,message", [
    (["--problem", "p99"], "unknown problem 'p99'"),
    (["--jobs", "0"], "--jobs needs a whole number"),
], ids=["unknown_problem", "no_jobs"])
def test_usage_errors_exit_2_with_a_one_line_reason(tmp_path, args, message):
    out = cli("grade", str(tmp_path), *args)
    assert out.returncode == 2 and message in out.stderr


def test_a_second_grader_on_the_same_gradebook_is_refused(tmp_path):
    import fcntl
    (tmp_path / "subs" / "a").mkdir(parents=True)
    state = tmp_path / "g.json"
    with open(tmp_path / "g.json.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running grader holds it
        out = cli("grade", str(tmp_path / "subs"), "--problem", "p01", "--out", str(state))
    assert out.returncode == 2 and "another grader is writing" in out.stderr
    assert not state.exists()


def test_a_missing_submissions_folder_is_a_usage_error(tmp_path):
    out = cli("grade", str(tmp_path / "nowhere"))
    assert out.returncode == 2 and "no such folder" in out.stderr


# -- the gradebook never lies ---------------------------------------------------------------

def _outcome(**changes) -> "runner.Outcome":
    return runner.Outcome(records=[protocol.Start()], **changes)


@pytest.mark.parametrize("changes,reason", [
    ({"timed_out": "import"}, "timed out while importing (limit 30 s)"),
    ({"timed_out": "run"}, "timed out (limit 90 s)"),
    ({"signal": 9}, "crashed (SIGKILL)"),
], ids=["import", "run", "crash"])
def test_a_stopped_run_gives_its_checkpoints_the_reason_of_the_entry(changes, reason, tmp_path):
    trusted = battery.collection_order(P01)
    entry = judging.judge(P01, _outcome(**changes), trusted, Limits.for_wall(90),
                          "ann/p01_output_sink.py", tmp_path, tmp_path / "t.py")
    assert entry.status == "error" and entry.reason == reason and entry.score == 0
    assert all(reason in cp.message for cp in entry.checkpoints), \
        [cp.message for cp in entry.checkpoints]


def _book(tmp_path, entries: dict[str, "gradebook.Entry"]) -> "gradebook.Gradebook":
    book = gradebook.Gradebook(tmp_path / "g.json", [P01])
    for name, entry in entries.items():
        book.record(name, "p01", entry)
    return book


def _entry(status="ok", passed=(), message="expected ['a'], got []"):
    entry = gradebook.Entry.placeholder(P01, "pending")
    entry.status = status
    for cp in entry.checkpoints:
        cp.status, cp.message = ("passed", None) if cp.id in passed else ("failed", message)
    entry.points = {cp: P01.checkpoint(cp).points for cp in passed}
    return entry


def test_the_gradebook_is_saved_as_plain_indented_json_whatever_was_recorded(tmp_path):
    """The saved text is made from each entry's text kept since it was recorded; it must be
    exactly what json.dumps of the whole book gives, before and after an entry changes."""
    book = gradebook.Gradebook(tmp_path / "g.json", [P01])
    assert book.text() == json.dumps(book.to_json(), indent=1, ensure_ascii=False)
    for name in ("ann", "bob\n\"ünïcode\"", ""):
        book.record(name, "p01", _entry(passed=("p01.fifo",), message="a\nb \u2028 \x1b[1m"))
    book.save()
    assert json.loads((tmp_path / "g.json").read_text()) == book.to_json()
    book.record("ann", "p01", gradebook.Entry.placeholder(P01, "pending"))
    assert book.text() == json.dumps(book.to_json(), indent=1, ensure_ascii=False)


def test_unfinished_pairs_read_pending_in_every_export_and_count_nowhere(tmp_path):
    book = _book(tmp_path, {"ann": _entry(passed=("p01.fifo",)),
                            "bob": gradebook.Entry.placeholder(P01, "pending")})
    rows = list(csv.reader(io.StringIO(exports.csv_text(book))))
    assert rows[2][:2] == ["bob", "pending"] and rows[2][6:8] == ["", "pending"]
    assert rows[2][3] == rows[2][5] == ""  # no total, no percent: nothing is known yet
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["rows"]["bob"]["status"] == "pending"
    results = exports.gradescope_results(book.rows["bob"], [P01])
    assert all(t["status"] == "failed" and "not graded yet" in t["output"]
               for t in results["tests"])
    insight = exports.insight(book)["p01"]
    assert insight["graded"] == 1 and insight["checkpoints"]["p01.fifo"]["rate"] == 1.0


def test_csv_for_spreadsheets_escapes_formulas_and_can_carry_a_bom_and_messages(tmp_path):
    book = _book(tmp_path, {"=HYPERLINK(\"x\")": _entry(passed=("p01.fifo",),
                                                          message="-1 items: @fault")})
    out = tmp_path / "g.csv"
    exports.export(book, "csv", out, single=False, excel=True, messages=True)
    data = out.read_bytes()
    assert data.startswith("\ufeff".encode())
    rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"))))
    head, row = rows
    assert row[0] == "'=HYPERLINK(\"x\")"
    assert row[head.index("percent")] == "10.0"
    assert row[head.index("p01.timeout message")] == "'-1 items: @fault"
    assert row[head.index("p01.fifo message")] == ""
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_a_sigterm_midway_exits_130_and_the_summary_counts_only_what_finished(tmp_path):
    subs = tmp_path / "subs"
    for name in ("a", "b", "c", "d"):
        (subs / name).mkdir(parents=True)
        (subs / name / P01.learner_file.name).write_text(battery.reference(P01))
    state = tmp_path / "g.json"
    batch = subprocess.Popen([sys.executable, "-m", "workbook", "grade", str(subs), "--problem",
                              "p01", "--format", "json", "--out", str(state), "--time-limit",
                              LIMIT, "--jobs", "1"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "COLUMNS": "200"})
    deadline = time.monotonic() + 120
    while not _finished(state) and batch.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    batch.send_signal(signal.SIGTERM)
    out, _ = batch.communicate(timeout=60)
    assert batch.returncode == 130, out[-2000:]
    finished = len(_finished(state))
    assert 1 <= finished < 4
    text = _flat(out)
    assert "interrupted" in text and "pending" in text
    summary = text[text.index("Grading summary"):]
    assert f"│ {finished} │" in summary.replace("  ", " ").replace("  ", " ") or \
        f" {finished} " in summary.split("p01 · OutputSink", 1)[1].split("│")[1]
    doc = json.loads(state.read_text())
    statuses = sorted(r["problems"]["p01"]["status"] for r in doc["rows"].values())
    assert statuses.count("ok") == finished and statuses.count("pending") == 4 - finished


def test_gradescope_export_reuses_the_gradebook_of_an_earlier_csv_batch(graded, tmp_path):
    bat, doc, out, seconds = graded
    again = _grade(str(bat.submissions), "--problem", "p01", "--format", "gradescope",
                   "--out", str(tmp_path / "gs"), "--gradebook",
                   str(bat.root / "gradebook.json"))
    assert again.returncode == 0, again.stderr
    submitted = [n for n, e in bat.expected.items() if e["p01"]["status"] != "not_submitted"]
    assert f"{len(submitted)} already graded" in _flat(again.stdout)
    assert len(list((tmp_path / "gs").glob("*/results.json"))) == len(bat.expected)


def test_the_gradebook_and_its_exports_are_readable_by_the_instructor_only(graded, tmp_path):
    bat, doc, out, seconds = graded
    assert stat.S_IMODE((bat.root / "gradebook.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((bat.root / "gradebook-report.json").stat().st_mode) == 0o600
    book = gradebook.Gradebook(bat.root / "gradebook.json", [P01])
    exports.export(book, "gradescope", tmp_path / "gs", single=False)
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "gs").glob("*/results.json")} \
        == {0o600}


def test_without_a_terminal_each_finished_pair_prints_one_line(graded):
    bat, doc, out, seconds = graded
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("[")]
    graded_pairs = [n for n, e in bat.expected.items()
                    if e["p01"]["status"] != "not_submitted" and "link" not in n]
    assert len(lines) == len(graded_pairs), out.stdout[:3000]
    assert any(ln.startswith("[1/") and "reference/p01: ok 100/100" in ln for ln in lines) or \
        any("reference/p01: ok 100/100" in ln for ln in lines)


# -- what instructors ask for ---------------------------------------------------------------

def test_class_insight_and_similarity_are_reported_beside_the_gradebook(graded):
    bat, doc, out, seconds = graded
    report = json.loads((bat.root / "gradebook-report.json").read_text())
    cps = report["insight"]["p01"]["checkpoints"]
    assert set(cps) == {cp.id for cp in P01.checkpoints}
    assert all(0 <= c["rate"] <= 1 for c in cps.values())
    identical = report["similarity"]["p01"]["identical"]
    assert any({"reference", "nested", "dave"} <= set(group) for group in identical), identical
    for word in ("Class insight", "pass rate", "Similar submissions"):
        assert word in out.stdout


def test_similarity_sees_through_renamed_names_comments_and_docstrings():
    source = P01.solution_file.read_text()
    renamed = re.sub(r"\b_drain\b", "_take_some", source.replace("self._items", "self._queue"))
    renamed = "# my own work\n" + renamed.replace('"""', "'''")
    canonical = lambda text: similarity.Print.of(text).canonical  # noqa: E731
    assert canonical(source) == canonical(renamed)
    assert canonical(source) != canonical(manifest.get("p03").solution_file.read_text())


def test_a_submission_may_bring_helper_modules_beside_its_file(tmp_path):
    subs = tmp_path / "subs"
    (subs / "ann").mkdir(parents=True)
    (subs / "ann" / "sink_core.py").write_text(battery.reference(P01))
    (subs / "ann" / P01.learner_file.name).write_text("from sink_core import OutputSink\n")
    (subs / "bob").mkdir()
    (subs / "bob" / P01.learner_file.name).write_text("from sink_core import OutputSink\n")
    (subs / "carl").mkdir()  # imports its helper only when a test first makes a sink
    (subs / "carl" / "sink_core.py").write_text(battery.reference(P01))
    (subs / "carl" / P01.learner_file.name).write_text(
        "class OutputSink:\n    def __new__(cls, *args, **kwargs):\n"
        "        from sink_core import OutputSink as Real\n        return Real(*args, **kwargs)\n")
    state = tmp_path / "g.json"
    out = _grade(str(subs), "--problem", "p01", "--format", "json", "--out", str(state))
    assert out.returncode == 0, out.stderr
    rows = json.loads(state.read_text())["rows"]
    assert rows["ann"]["total"] == 100, rows["ann"]["reasons"]
    assert rows["carl"]["total"] == 100, rows["carl"]["reasons"]
    assert rows["bob"]["total"] == 0 and "import error" in rows["bob"]["reasons"][0]


def test_run_autograder_writes_a_valid_zero_results_json_when_the_grader_fails(tmp_path):
    zip_path = tmp_path / "autograder.zip"
    assert cli("gradescope-bundle", str(zip_path), "--problem", "p01").returncode == 0
    base = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(base / "source")
        constraints = zf.read("constraints.txt").decode()
    from importlib import metadata
    assert f"pytest=={metadata.version('pytest')}" in constraints.splitlines()
    script = base / "source" / "run_autograder"
    script.chmod(0o755)
    (base / "submission").mkdir()
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n[ \"$2\" = workbook ] && exit 3\nexec "
                    f"{sys.executable} \"$@\"\n")
    fake.chmod(0o755)
    env = {**os.environ, "AUTOGRADER_ROOT": str(base), "WORKBOOK_PYTHON": str(fake)}
    out = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads((base / "results" / "results.json").read_text())
    assert doc["score"] == 0 and doc["tests"] == [] and "exited with status 3" in doc["output"]
    assert "not this submission" in doc["output"]  # the grader's fault, said so
    assert doc["visibility"] == doc["stdout_visibility"] == "hidden"
    assert "workbook autograder:" in out.stdout


# -- every input handled (issue 22, class 4) ------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="uid locks are taken as root only")
def test_the_uid_locks_live_in_a_folder_of_their_own_and_a_squatted_path_is_skipped(
        tmp_path, monkeypatch):
    open_folder = tmp_path / "open"
    open_folder.mkdir(mode=0o777)
    open_folder.chmod(0o777)
    locks = tmp_path / "locks"
    monkeypatch.setattr(uids, "LOCK_FOLDERS", (str(open_folder), str(locks)))
    assert uids.lock_folder() == str(locks)  # the world-writable one is passed over
    assert stat.S_IMODE(locks.stat().st_mode) == 0o700
    monkeypatch.setattr(uids, "UID_BASE", 63100)  # clear of the uids other graders use
    (locks / "63100.lock").mkdir()  # something squats the first uid's lock path
    with uids.UidClaim(2) as claim:
        assert 63100 not in claim.uids and len(claim.uids) == 2
    monkeypatch.setattr(uids, "LOCK_FOLDERS", (str(open_folder),))
    with pytest.raises(IsolationError, match="not a folder of this user's alone"):
        uids.UidClaim(1)


def test_discovery_walks_1100_nested_folders_without_recursion(tmp_path):
    deep = tmp_path / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    try:
        for _ in range(1100):  # by descriptor: the whole path is longer than PATH_MAX
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open(P01.learner_file.name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    (tmp_path / "ann").mkdir()
    (tmp_path / "ann" / P01.learner_file.name).write_text("x = 1\n")
    try:
        found = {s.name: s for s in discovery.discover(tmp_path, [P01])}
    finally:
        _remove_nested(deep)  # shutil.rmtree (and pytest's cleanup) would recurse too deep
    assert sorted(found) == ["ann", "deep"]
    assert found["deep"].files == {} and "p01" in found["ann"].files


def _remove_nested(top: Path) -> None:
    """Remove a chain of folders ``top/d/d/...`` bottom up, by descriptor, without recursion."""
    fds = [os.open(top, os.O_RDONLY)]
    while True:
        try:
            fds.append(os.open("d", os.O_RDONLY, dir_fd=fds[-1]))
        except FileNotFoundError:
            break
    for name in os.listdir(fds[-1]):
        os.unlink(name, dir_fd=fds[-1])
    while len(fds) > 1:
        os.close(fds.pop())
        os.rmdir("d", dir_fd=fds[-1])
    os.close(fds[0])
    top.rmdir()


def test_a_400_term_expression_is_compared_for_similarity_without_a_crash(tmp_path):
    long_sum = "TOTAL = " + " + ".join(f"v{i}" for i in range(400)) + "\n"
    subs = []
    for name in ("ann", "bob"):
        (tmp_path / name).mkdir()
        (tmp_path / name / P01.learner_file.name).write_text(long_sum)
        subs.append(discovery.discover(tmp_path, [P01])[-1])
    subs = discovery.discover(tmp_path, [P01])
    report = similarity.report(similarity.texts(subs, [P01]), 90)
    assert report["p01"]["identical"] == [["ann", "bob"]]


def test_similar_names_export_to_different_folders(tmp_path):
    book = _book(tmp_path, {"bob": _entry(passed=("p01.fifo", "p01.timeout")),
                            "bob.": _entry(passed=())})
    exports.export(book, "gradescope", tmp_path / "gs", single=False)
    names = exports.export_names(["bob", "bob."])
    assert len(set(names.values())) == 2 and names["bob"] == "bob"
    scores = {folder.name: json.loads((folder / "results.json").read_text())["score"]
              for folder in (tmp_path / "gs").iterdir()}
    assert scores == {"bob": book.rows["bob"].total, names["bob."]: 0}
    assert book.rows["bob"].total > 0


def test_a_run_that_poses_as_the_sandbox_failing_is_not_taken_for_it(tmp_path):
    """The sandbox's own failures come on a channel the run never holds: printing its text
    and exiting 125 is the run's own failure; a real one (an exec that fails) is reported."""
    with uids.UidClaim(0 if ISOLATION == "none" else 1) as claim:
        uid = (claim.uids or [None])[0]
        with Stage(Harness(()), "x", b"", uid) as stage:
            spoof = runner.run(stage, [sys.executable, "-c",
                                        "import sys; print('workbook sandbox: [bold]broken');"
                                        " sys.exit(125)"],
                                Limits.for_wall(60), iso=ISOLATION, uid=uid)
            real = runner.run(stage, [str(tmp_path / "no-such-program")],
                               Limits.for_wall(60), iso=ISOLATION, uid=uid)
    assert spoof.exit_code == 125 and "workbook sandbox:" in spoof.output
    assert spoof.sandbox_error is None
    assert real.sandbox_error and "no-such-program" in real.sandbox_error


def test_names_and_messages_print_as_text_in_the_terminal_the_log_and_the_exports(tmp_path):
    from rich.console import Console

    from workbook.grading import batch
    evil = battery.FAKE_NAME.format(first=P01)
    shown = batch.shown(evil)
    assert "\n" not in shown and "\x1b" not in shown and "\r" not in shown
    console = Console(file=io.StringIO(), highlight=False, color_system=None, width=300)
    console.print(f"[red]{shown}[/red]")  # no markup error, nothing restyled
    printed = console.file.getvalue()
    assert "[bold green]" in printed and printed.count("\n") == 1
    book = _book(tmp_path, {evil: _entry(message="\x1b[31mred\x1b[0m")})
    text = exports.csv_text(book, messages=True)
    assert "\x1b" not in text and "\\x1b[31mred" in text
    results = exports.gradescope_results(book.rows[evil], [P01])
    assert not any("\x1b" in t["output"] for t in results["tests"])


def test_notes_are_capped_per_test():
    trusted = [(n, c) for n, c in battery.collection_order(P01)][:1]
    records = [protocol.Start(), protocol.Collected(1), protocol.Item(*trusted[0])]
    records += [protocol.Note(trusted[0][1], f"note {i}") for i in range(1000)]
    records += [protocol.TestDone(*trusted[0]), protocol.End()]
    kept = judging._capped(protocol.honest_order(records, trusted).accepted)
    notes = [r.text for r in kept if isinstance(r, protocol.Note)]
    assert len(notes) == judging.NOTES_PER_TEST + 1
    assert notes[-1] == f"({1000 - judging.NOTES_PER_TEST} more notes not kept)"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a file of another user")
@pytest.mark.parametrize("kind", list(battery.attacks.NAMES))
def test_a_name_that_is_not_utf8_or_too_long_for_a_folder_is_kept_and_exported(tmp_path, kind):
    """Before: the first stopped the batch before any run (no gradebook: it could not be
    written as UTF-8), the second the Gradescope export (its folder passed 255 bytes)."""
    name = battery.attacks.NAMES[kind]
    book = _book(tmp_path, {name: _entry(passed=("p01.fifo",))})
    book.save()
    again = gradebook.Gradebook(tmp_path / "g.json", [P01])
    assert list(again.rows) == [name]  # the very name back, for --resume
    exports.export(again, "csv", tmp_path / "g.csv", single=False)
    exports.export(again, "gradescope", tmp_path / "gs", single=False)
    folder, = (tmp_path / "gs").iterdir()
    assert len(os.fsencode(folder.name)) <= 255 and (folder / "results.json").exists()
    assert len(list(csv.reader(io.StringIO((tmp_path / "g.csv").read_text())))) == 2


def test_a_learner_file_swapped_for_a_fifo_after_discovery_is_an_error_row_at_once(tmp_path):
    """A class folder others can write to: the file becomes a FIFO between discovery and
    the run.  Opened as it was, it would block the batch for ever."""
    (tmp_path / "ann").mkdir()
    learner = tmp_path / "ann" / P01.learner_file.name
    learner.write_text("x = 1\n")
    sub = discovery.discover(tmp_path, [P01])[0]
    learner.unlink()
    os.mkfifo(learner)
    started = time.monotonic()
    assert sub.fingerprint("p01").startswith("unreadable:")
    entry = judging.grade_pair(P01, sub, [], None, None, "none", None)
    assert entry.status == "error" and "cannot be read any more" in entry.reason
    assert similarity.texts([sub], [P01]) == {}
    assert time.monotonic() - started < 5


def test_a_hard_link_to_a_root_only_file_is_refused(tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("ANSWER = 42\n")
    secret.chmod(0o600)
    ann = tmp_path / "subs" / "ann"
    ann.mkdir(parents=True)
    os.chown(ann, 1000, 1000)  # the student's own folder
    (ann / P01.learner_file.name).write_text("from helper import ANSWER\n")
    os.chown(ann / P01.learner_file.name, 1000, 1000)
    os.link(secret, ann / "helper.py")
    (sub,) = discovery.discover(tmp_path / "subs", [P01])
    assert sub.files and "helper.py" not in sub.helpers("p01")
    os.link(secret, tmp_path / "subs" / f"bob_{P01.module}.py")
    bob = next(s for s in discovery.discover(tmp_path / "subs", [P01]) if s.name == "bob")
    assert "hard link" in bob.refused["p01"]


def test_fresh_keeps_each_earlier_result_until_its_pair_is_redone(tmp_path):
    from workbook.grading import batch
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    (tmp_path / "subs" / "ann" / P01.learner_file.name).write_text("x = 1\n")
    subs = discovery.discover(tmp_path / "subs", [P01])
    harness = {"p01": Harness.snapshot(P01)}
    limits = {"p01": Limits.for_wall(20)}
    book = gradebook.Gradebook(tmp_path / "g.json", [P01])
    done = _entry(passed=("p01.fifo",))
    fp = (f"{subs[0].fingerprint('p01')}:{harness['p01'].fingerprint}:20:{seed_for('p01')}"
          f":{platform.python_version()}")  # judged under the grader's Python alone
    book.record("ann", "p01", done, fp)
    assert batch._plan(subs, [P01], book, limits, harness).todo == []  # resume: skipped
    plan = batch._plan(subs, [P01], book, limits, harness, fresh=True)
    assert [(s.name, p.id) for s, p, _ in plan.todo] == [("ann", "p01")]
    saved = json.loads((tmp_path / "g.json").read_text())["rows"]["ann"]["problems"]["p01"]
    assert saved["status"] == "ok" and saved["score"] == done.score  # not 'pending' meanwhile


def test_the_percent_is_out_of_the_assigned_problems_and_every_named_cause_counts(tmp_path):
    p02 = manifest.get("p02")
    book = gradebook.Gradebook(tmp_path / "g.json", [P01, p02])
    entry = _entry(passed=("p01.fifo",))
    fifo = next(cp for cp in entry.checkpoints if cp.id == "p01.timeout")
    fifo.pitfall = "a_cause_of_a_wrong_variant"  # named by the checker, not a listed pitfall
    book.record("ann", "p01", entry)
    book.record("ann", "p02", gradebook.Entry.placeholder(p02, "not_submitted"))
    rows = list(csv.reader(io.StringIO(exports.csv_text(book))))
    head, row = rows
    assert row[head.index("max_total")] == str(P01.points)  # nobody was given p02
    assert json.loads((tmp_path / "g.json").read_text())["assigned"] == ["p01"]
    causes = exports.insight(book)["p01"]["pitfalls"]
    assert causes["a_cause_of_a_wrong_variant"]["checkpoints"] == ["p01.timeout"]
    from workbook.grading import batch
    batch.insight_view(exports.insight(book))  # an unlisted cause is shown, not a KeyError


def test_lms_flat_files_make_one_row_per_student_and_a_file_of_another_problem_is_left_out(
        tmp_path):
    p03 = manifest.get("p03")
    for name in (f"doe_jane_12345_{P01.module}.py", f"doe_jane_12345_{p03.module}.py",
                 f"roe_rick_67890_{p03.module}.py"):
        (tmp_path / name).write_text("x = 1\n")
    found = {s.name: s for s in discovery.discover(tmp_path, [P01, p03])}
    assert sorted(found) == ["doe_jane_12345", "roe_rick_67890"]
    assert sorted(found["doe_jane_12345"].files) == ["p01", "p03"]
    only_p01 = {s.name: s for s in discovery.discover(tmp_path, [P01])}
    assert sorted(only_p01) == ["doe_jane_12345"]  # roe's p03 file is not graded as p01


def test_gradescope_test_visibility_is_configurable(tmp_path):
    book = _book(tmp_path, {"ann": _entry(passed=("p01.fifo",))})
    doc = exports.gradescope_results(book.rows["ann"], [P01], visibility="after_published")
    assert {t["visibility"] for t in doc["tests"]} == {"after_published"}
    zip_path = tmp_path / "autograder.zip"
    assert cli("gradescope-bundle", str(zip_path), "--problem", "p01",
               "--visibility", "hidden").returncode == 0
    with zipfile.ZipFile(zip_path) as zf:
        assert "--visibility hidden" in zf.read("run_autograder").decode()


def test_a_zip_in_the_class_folder_is_one_submission_unpacked_safely(tmp_path):
    import zipfile as zf_module
    with zf_module.ZipFile(tmp_path / "ann.zip", "w") as zf:
        zf.writestr(f"ann/work/{P01.learner_file.name}", "x = 1\n")
        zf.writestr(f"__MACOSX/ann/._{P01.learner_file.name}", "junk")
        zf.writestr("../escape.py", "x = 2\n")
    (tmp_path / "broken.zip").write_bytes(b"not a zip")
    unpacked = tmp_path / ".unpacked"  # hidden: not a submission itself
    unpacked.mkdir()
    found = {s.name: s for s in discovery.discover(tmp_path, [P01], unpack_to=unpacked)}
    assert sorted(found) == ["ann", "broken"]
    assert found["ann"].files["p01"].read_text() == "x = 1\n"
    assert found["ann"].files["p01"].is_relative_to(unpacked)
    assert not (tmp_path / "escape.py").exists() and not list(unpacked.rglob("escape.py"))
    assert "cannot be unpacked" in found["broken"].refused["p01"]


def test_a_roster_names_who_is_absent_unknown_or_unmatched(tmp_path):
    from workbook.grading import batch
    subs = tmp_path / "subs"
    for name in ("ann", "zoe"):
        (subs / name).mkdir(parents=True)
        (subs / name / P01.learner_file.name).write_text("x = 1\n")
    (subs / "notes.txt").write_text("not a submission")
    roster = tmp_path / "roster.csv"
    roster.write_text("id,email\nann,a@x\nbob,b@x\n")
    found = discovery.discover(subs, [P01])
    report = batch.roster_report(roster, found, subs)
    assert report == {"absent": ["bob"], "unknown": ["zoe"], "unmatched": ["notes.txt"],
                      "roster": 2}


def test_similarity_sees_a_renamed_reordered_copy_and_one_with_a_syntax_error(tmp_path):
    import ast
    source = P01.solution_file.read_text()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            node.body = list(reversed(node.body))  # every method in the opposite order
    copy = re.sub(r"\bself\._(\w+)", r"self._my_\1", ast.unparse(tree))
    files = {"ref": source, "copy": copy, "broken": "def broken(:\n    pass\n" + copy}
    files.update({f"alt-{p.stem}": p.read_text() for p in sorted(P01.alternates_dir.glob("*.py"))})
    for name, text in files.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / P01.learner_file.name).write_text(text)
    subs = discovery.discover(tmp_path, [P01])
    report = similarity.report(similarity.texts(subs, [P01]), 0)
    alike = {frozenset((d["a"], d["b"])): d["percent"] for d in report["p01"]["similar"]}
    assert alike[frozenset(("ref", "copy"))] >= 90
    assert alike[frozenset(("ref", "broken"))] >= 90
    honest = [v for k, v in alike.items() if any(n.startswith("alt-") for n in k)
              and not {"copy", "broken"} & k]
    assert honest and max(honest) < 90  # different solutions to the same problem
    # The percent is copydetect's own compare_files figure, computed without its arrays.
    from copydetect import CodeFingerprint, compare_files
    texts = {name: similarity.prepared(files)[0]  # what is fingerprinted: normalised
             for name, files in similarity.texts(subs, [P01])["p01"].items()}
    for a, b in [("ref", "copy"), ("ref", "broken")] + [("ref", n) for n in texts
                                                        if n.startswith("alt-")]:
        prints = [CodeFingerprint(f"{n}.py", similarity.K, similarity.WINDOW,
                                  language="python", fp=io.StringIO(texts[n])) for n in (a, b)]
        expected = 100 * float(max(compare_files(*prints)[1]))
        got = 100 * similarity.share(similarity.Print.of(texts[a]), similarity.Print.of(texts[b]))
        assert abs(got - expected) < 1e-9, (a, b, got, expected)


_GUARD_CHECK = r'''
import sys, threading
stage = sys.argv[1]
sys.path.insert(0, stage)
from workbook.grading.sandbox import guard
classify, refusals, _ = guard.install(stage)
sys.path[1:1] = [stage + "/tests"]
sys.path.append(stage + "/submission")
import harness_side, learner
results = {}
for name in ("getframe", "current_frames", "gc_objects", "settrace", "set_code", "tb_frame",
             "proc_mem", "link_to_mem", "typevar", "namedtuple", "logging",
             "harness_profile_raises", "open_a_file", "thread_trace", "name_of_its_own"):
    try:
        getattr(learner, name)()
        results[name] = "allowed"
    except RuntimeError as exc:
        results[name] = "refused" if "workbook sandbox" in str(exc) else repr(exc)
print(results)
print(len(refusals()))
'''

_HARNESS_SIDE = '''
import sys


def run_profiled(fn):
    """As the P03 acceptance set's probes do: a profile hook that raises inside the
    submission's call (CPython then drops the hook itself)."""
    def profile(frame, event, arg):
        if event == "c_call":
            raise KeyError("from the harness")
    sys.setprofile(profile)
    try:
        fn()
    except KeyError:
        pass
    finally:
        sys.setprofile(None)
'''

_LEARNER = '''
import gc, sys, threading


def getframe(): sys._getframe()
def current_frames(): sys._current_frames()
def gc_objects(): gc.get_objects()
def settrace(): sys.settrace(lambda *a: None)
def set_code(): getframe.__code__ = settrace.__code__
def tb_frame():
    try:
        raise ValueError
    except ValueError as exc:
        exc.__traceback__.tb_frame
def typevar():
    from typing import TypeVar
    TypeVar("T")
def namedtuple():
    import collections
    collections.namedtuple("Pair", "a b")
def logging():
    import logging as log
    log.getLogger("x").warning("a warning from a submission")
def harness_profile_raises():
    import harness_side
    harness_side.run_profiled(lambda: len([1, 2]))
def proc_mem(): open("/proc/self/mem", "rb").close()
def link_to_mem():
    import os, tempfile
    os.symlink("/proc/self/mem", tempfile.mktemp())
def open_a_file():
    import tempfile
    with tempfile.TemporaryFile() as f:
        f.write(b"memo")
def name_of_its_own():
    class Name(str):  # its hash would run its own code inside the hook
        def __hash__(self):
            raise SystemExit("ran inside the hook")
    sys.audit("object.__getattr__", None, Name("tb_frame"))
def thread_trace():
    threading.settrace(lambda *a: None)
    worker = threading.Thread(target=lambda: None)
    worker.start()
    worker.join()
    threading.settrace(None)
'''


def _guard_run(tmp_path: Path, script: str, harness_side: str, learner: str,
               python: str = sys.executable) -> subprocess.CompletedProcess:
    """``script`` run (by ``python``) with a stage of the guard alone:
    ``tests/harness_side.py`` (harness code) and ``submission/learner.py`` beside it; the
    stage is its first argument."""
    stage = tmp_path / "stage"
    (stage / "workbook" / "grading" / "sandbox").mkdir(parents=True)
    (stage / "tests").mkdir()
    (stage / "submission").mkdir()
    for rel in ("workbook/__init__.py", "workbook/grading/__init__.py",
                "workbook/grading/sandbox/__init__.py", "workbook/grading/sandbox/guard.py"):
        shutil.copy(ROOT / rel, stage / rel)
    (stage / "tests" / "harness_side.py").write_text(harness_side)
    (stage / "submission" / "learner.py").write_text(learner)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run([python, "-I", "-c", script, str(stage)],
                          capture_output=True, text=True, timeout=60, env=env)


def test_the_audit_hook_refuses_the_escape_hatches_and_lets_correct_code_run(tmp_path):
    out = _guard_run(tmp_path, _GUARD_CHECK, _HARNESS_SIDE, _LEARNER)
    assert out.returncode == 0, out.stderr[-2000:]
    results = eval(out.stdout.splitlines()[0])  # noqa: S307 - our own script's dict
    refused = {"getframe", "current_frames", "gc_objects", "settrace", "set_code", "tb_frame",
               "proc_mem", "link_to_mem"}
    assert {k for k, v in results.items() if v == "refused"} == refused, results
    assert all(results[k] == "allowed" for k in ("typevar", "namedtuple", "logging",
                                                 "harness_profile_raises", "open_a_file",
                                                 "name_of_its_own")), results
    # threading.settrace's function is refused where it would be installed: in the new
    # thread, which dies before running anything (the caller's own call returns).
    assert "thread_trace" in out.stderr or "workbook sandbox" in out.stderr
    assert int(out.stdout.splitlines()[1]) == len(refused) + 1


_MONITORING_CHECK = r'''
import sys
stage = sys.argv[1]
sys.path.insert(0, stage)
from workbook.grading.sandbox import guard
classify, refusals, _ = guard.install(stage)
sys.path[1:1] = [stage + "/tests", stage + "/submission"]
import harness_side, learner
harness_side.register()  # the explorer's own use (explore/midline.py): allowed
try:
    learner.register()
    print("allowed")
except RuntimeError as exc:
    print("refused" if "workbook sandbox" in str(exc) else repr(exc))
'''


def test_a_sys_monitoring_callback_is_refused_to_the_submission_on_3_12_and_later(tmp_path):
    # sys.settrace's twin since 3.12: a callback at every line or instruction of the judge.
    from workbook import pythons
    with pytest.MonkeyPatch.context() as patch:  # (this module keeps to one Python otherwise)
        patch.delenv("WORKBOOK_PYTHONS", raising=False)
        found = [i for i in pythons.find() if i.version not in ("3.10", "3.11")]
    if not found:
        pytest.skip("no Python 3.12 or later on this machine")
    register = ("import sys\n\ndef register(tool=3):\n"
                "    sys.monitoring.register_callback(tool, sys.monitoring.events.LINE, "
                "lambda *a: None)\n")
    for interp in found:
        out = _guard_run(tmp_path / interp.version, _MONITORING_CHECK, register,
                         register.replace("tool=3", "tool=2"), python=str(interp.path))
        assert out.returncode == 0, (interp.version, out.stderr[-2000:])
        assert out.stdout.split() == ["refused"], (interp.version, out.stdout, out.stderr)


_IGNORED_CHECK = r'''
import sys
stage = sys.argv[1]
sys.path.insert(0, stage)
from workbook.grading.sandbox import guard
classify, refusals, _ = guard.install(stage)
sys.path[1:1] = [stage + "/tests", stage + "/submission"]
import harness_side, learner
sys.audit("workbook.snapshot")  # the learner file is imported: the run has started
learner.drops_a_harness_object()
print(list(refusals()))
'''

_DROPPED = '''
class Dropped:
    def __del__(self):
        table = {}
        return table["missing"] + 1  # raises: CPython prints "Exception ignored in"
'''


def test_an_exception_ignored_in_harness_code_is_printed_and_nothing_is_refused(tmp_path):
    """On 3.11 and 3.12 CPython's own printer of an ignored exception parses the failing
    segment (``table["missing"]``) under the harness file's name, from the submission's
    frame: the guard must not take that for the submission compiling code under a harness
    name (a fork-bomb file was graded tampered that way when the import watch's
    interruption landed in an at-fork handler)."""
    out = _guard_run(tmp_path, _IGNORED_CHECK, _DROPPED,
                     "import harness_side\n\n\ndef drops_a_harness_object():\n"
                     "    harness_side.Dropped()\n")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout
    assert "Exception ignored in: <function Dropped.__del__" in out.stderr, out.stderr
    assert 'table["missing"] + 1' in out.stderr and "KeyError: 'missing'" in out.stderr


def test_a_file_that_only_exploration_rejects_is_graded_with_its_counterexample_not_tampered(
        tmp_path):
    """Shrinking a counterexample runs harness code a correct file never reaches; it must
    leave the harness's classes as they were.  (P02's shrink deep-copied a scenario: copying
    an instance has copyreg cache ``__slotnames__`` on its class, and every P02 file that
    exploration rejected was graded 0 as tampered.)  One such file per problem, in one
    batch."""
    from workbook import variants
    subs = tmp_path / "subs"
    (subs / "ann").mkdir(parents=True)
    for problem in manifest.problems().values():
        wrong = next(w for w in problem.wrongs if list(w.fails) == [f"{problem.id}.explore"])
        shutil.copy(variants.wrong_file(problem, wrong.name),
                    subs / "ann" / problem.learner_file.name)
    state = tmp_path / "g.json"
    out = cli("grade", str(subs), "--format", "json", "--out", str(state), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    entries = json.loads(state.read_text())["rows"]["ann"]["problems"]
    assert sorted(entries) == sorted(manifest.problems())
    for pid, entry in entries.items():
        assert entry["status"] == "ok", (pid, entry["reasons"])
        failed = [cp["id"] for cp in entry["checkpoints"] if cp["status"] != "passed"]
        assert failed == [f"{pid}.explore"], (pid, failed)
