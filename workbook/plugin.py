"""The pytest plugin behind every acceptance run.

``--target FILE`` is loaded under the problem's canonical module name and handed to the
tests through the ``impl`` fixture.  Each test carries ``@pytest.mark.checkpoint(ID)``.
One report record (``workbook.records``) per finished test is appended to ``--report`` as a
JSON line as soon as the test ends, so a run that is killed half-way still reports everything
that finished.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Callable, NoReturn

import pytest

from workbook import manifest, records, testkit
from workbook.testkit import honest
from workbook.tuning import GRADED_IMPORT_PATIENCE

_STATE: dict = {}
#: The stuck detector's log of the test being run (its verdicts), kept in the item's stash.
_CHECK = pytest.StashKey[testkit.CheckLog]()

#: Where records go instead of the ``--report`` file, when set (the grader's signed pipe).
_sink: Callable[[records.Record], None] | None = None


def set_report_sink(sink: Callable[[records.Record], None]) -> None:
    """Send every report record to ``sink`` instead of the ``--report`` file.

    Must be called before the learner file is imported (i.e. from a ``tryfirst``
    ``pytest_configure``), so that no record escapes it."""
    global _sink
    _sink = sink


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("workbook")
    group.addoption("--problem", help="problem id (p01 ...)")
    group.addoption("--target", help="the learner file to check")
    group.addoption("--report", help="append JSON lines here, one per finished test")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "checkpoint(id): the manifest checkpoint a test checks")
    problem_id = config.getoption("--problem")
    if not problem_id:
        return
    problem = manifest.get(problem_id)
    target = Path(config.getoption("--target") or problem.learner_file).resolve()
    report = config.getoption("--report")
    _STATE.update(problem=problem, target=target, module=None, import_error=None,
                  report=open(report, "a", encoding="utf-8") if report else None,
                  current=None)
    testkit.set_note_sink(_note)
    testkit.set_learner_file(str(target))
    _STATE["watchdog"] = testkit.Watchdog()
    _emit(records.Start(problem.id, str(target), os.getpid()))
    _load_target(problem, target)


def _emit(record: records.Record) -> None:
    if _sink is not None:
        _sink(record)
        return
    out = _STATE.get("report")
    if out is not None:
        records.write(out, record)


def _note(text: str) -> None:
    _emit(records.Note(_STATE.get("current"), str(text)))


def _load_target(problem: manifest.Problem, target: Path) -> None:
    """Import the learner file under its canonical name; remember (not raise) any failure."""
    spec = importlib.util.spec_from_file_location(problem.module, target)
    module = importlib.util.module_from_spec(spec)
    sys.modules[problem.module] = module
    # What the file prints while it is imported is kept for an import error's report.
    printed = {"stdout": io.StringIO(), "stderr": io.StringIO()}
    # The import is watched like any test: a learner check ends the process on a verdict;
    # a graded run, whose records leave only from this thread, has the import interrupted.
    graded = _sink is not None
    watch, stopped = _import_watch(target, printed, graded=graded)
    try:
        try:
            with contextlib.redirect_stdout(printed["stdout"]), \
                    contextlib.redirect_stderr(printed["stderr"]):
                spec.loader.exec_module(module)
        finally:
            if not watch.finish():  # a verdict came first
                if not graded:
                    _hold()  # the watch reported a hang and is ending the process
                _stopped_here(watch)
    except SyntaxError as exc:
        from workbook.run import syntax_message
        _STATE["import_error"] = syntax_message(exc)
    except BaseException as exc:  # noqa: BLE001 - anything the learner file raises on import
        where = _where(exc.__traceback__, target)
        _STATE["import_error"] = stopped[0] if type(exc) is _ImportStopped and stopped else (
            f"importing the file raised {type(exc).__name__}: {exc}"
            + (f" ({where})" if where else ""))
    else:
        _STATE["module"] = module
        for filename in _code_files(module):  # a file built on another (an old pitfall
            testkit.set_learner_file(filename)  # module) runs that file's code too
        return
    del sys.modules[problem.module]
    _emit(records.ImportFailed(_STATE["import_error"], _printed(printed)))


def _printed(printed: dict) -> str | None:
    """What the file printed while it was imported, labelled like a test's capture (None:
    nothing)."""
    return records.cap_output(
        _labelled([(name, buffer.getvalue()) for name, buffer in printed.items()])) or None


class _ImportStopped(BaseException):
    """Raised in the importing thread of a graded run when the import watch has a verdict."""


def _import_watch(target: Path, printed: dict, *, graded: bool):
    """The watch over the import, and the list its verdict goes into in a graded run.

    A learner check: on a verdict, one import-error record (with what the file printed so
    far), then the end of the process (the import cannot be interrupted, and no test could
    run anyway).  A graded run: the verdict is kept and the import interrupted, for the
    importing thread to report (the judge takes records from that thread alone); it acts
    only on proof (spinning, asleep at one line) after ``GRADED_IMPORT_PATIENCE``, never on
    "still running", which the grader's import limit ends (as it ends an import that ignores
    the interruption)."""
    from workbook.stuck.importing import ImportWatch

    stopped: list[str] = []
    if graded:
        def report(sentence: str) -> None:
            stopped.append(sentence)
            testkit.interrupt_thread(main, _ImportStopped)

        main = threading.current_thread()
        return ImportWatch(str(target), report, patience=GRADED_IMPORT_PATIENCE,
                           give_up=float("inf")).start(), stopped

    def report(sentence: str) -> None:
        _emit(records.ImportFailed(sentence, _printed(printed)))
        out = _STATE.get("report")
        if out is not None:
            out.flush()
        sys.stdout.flush()
        os._exit(1)

    return ImportWatch(str(target), report).start(), stopped


def _stopped_here(watch) -> NoReturn:
    """A graded import the watch has a verdict on: wait until the watch has interrupted this
    thread, take that interruption if it is still pending (the import may have ended on its
    own meanwhile), and leave as stopped, whatever the import did."""
    try:
        watch.thread.join(5.0)  # it ends right after the interruption (a few ms at most)
        for _ in range(1000):  # a pending interruption lands at the next instruction
            pass
    except _ImportStopped:
        pass
    raise _ImportStopped


def _hold() -> None:
    """Wait for the process to end (the import watch calls ``os._exit``)."""
    while True:
        time.sleep(1.0)


def _code_files(module) -> set[str]:
    """Files whose functions the learner module's classes and functions run (an old-style
    pitfall module builds on the reference's classes)."""
    import inspect
    harness = (str(Path(testkit.__file__).resolve().parents[2] / "workbook"),
               str(Path(testkit.__file__).resolve().parents[2] / "tests"))
    files = set()
    for value in list(vars(module).values()):
        members = [value]
        if inspect.isclass(value):
            for klass in inspect.getmro(value):
                members += list(vars(klass).values())
        for member in members:
            func = getattr(member, "fget", member)
            code = getattr(getattr(func, "__func__", func), "__code__", None)
            if code is None:
                continue
            name = code.co_filename
            if "site-packages" in name or name.startswith((sys.prefix, sys.base_prefix)) \
                    or name.startswith(harness) or name.startswith("<"):
                continue
            files.add(name)
    return files


@pytest.fixture
def impl():
    """The learner module under test."""
    if _STATE.get("module") is None:
        pytest.fail(_STATE.get("import_error") or "no --target given", pytrace=False)
    return _STATE["module"]


def pytest_collection_modifyitems(session, config, items) -> None:
    problem = _STATE.get("problem")
    if problem is None:
        return
    by_checkpoint: dict[str, list[str]] = {cp.id: [] for cp in problem.checkpoints}
    for item in items:
        marker = item.get_closest_marker("checkpoint")
        cp_id = marker.args[0] if marker else None
        if cp_id not in by_checkpoint:
            raise pytest.UsageError(f"{item.nodeid}: checkpoint {cp_id!r} is not in the manifest")
        by_checkpoint[cp_id].append(item.nodeid)
    _emit(records.Collected(sum(map(len, by_checkpoint.values())), by_checkpoint))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    marker = item.get_closest_marker("checkpoint")
    _STATE["current"] = marker.args[0] if marker else None
    _STATE["outcome"] = None
    _STATE["captured"] = ""
    _STATE["started"] = time.monotonic()
    check = item.stash[_CHECK] = testkit.begin_check()
    if _STATE.get("module") is not None:  # before each test: a method put back since is
        honest.guard_module(_STATE["module"])  # guarded again
    watchdog = _STATE.get("watchdog")
    if watchdog is not None:
        watchdog.active = True
    try:
        yield
    finally:
        if watchdog is not None:
            watchdog.active = False
        testkit.release_interrupts()
    if _STATE.get("problem") is None:
        return
    outcome = _STATE["outcome"] or {"outcome": "passed"}
    if check.verdicts:
        outcome["stuck"] = len(check.verdicts)
    if outcome["outcome"] == "failed" and _STATE["captured"]:
        outcome["output"] = records.cap_output(_STATE["captured"])
    _emit(records.TestDone(checkpoint=_STATE["current"], nodeid=item.nodeid,
                           seconds=round(time.monotonic() - _STATE["started"], 3), **outcome))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    result = yield
    report = result.get_result()
    # What the test's code printed so far (a phase's report holds every earlier phase's
    # capture too, so the last one holds all): the learner's output, shown with a failure.
    _STATE["captured"] = _captured(report)
    if report.failed and _STATE.get("outcome") is None and call.excinfo is not None:
        _STATE["outcome"] = _classify(call.excinfo, report.when,
                                      item.stash.get(_CHECK, None))
    elif report.skipped and _STATE.get("outcome") is None and report.when != "teardown":
        _STATE["outcome"] = {"outcome": "failed", "message": "skipped: " + str(call.excinfo.value
                             if call.excinfo else ""), "pitfall": None}


def _captured(report) -> str:
    """The stdout, stderr and log records pytest captured during a test, each part labelled
    when there is more than one and each cut to its share of the record's limit (so a long
    stdout cannot push the label and the start of stderr out of sight)."""
    return _labelled([("stdout", report.capstdout), ("stderr", report.capstderr),
                      ("log", report.caplog)])


def _labelled(named: list[tuple[str, str]]) -> str:
    """Captured streams as one text: stdout alone as it is; else each non-empty part under
    its label, each cut to its share of a record's limit."""
    parts = [(name, text) for name, text in named if text]
    if not parts or (len(parts) == 1 and parts[0][0] == "stdout"):
        return parts[0][1] if parts else ""
    share = records.OUTPUT_MAX // len(parts) - 60  # room for the label and the cut line
    return "".join(f"[{name}]\n{records.cap_output(text, share)}"
                   + ("" if text.endswith("\n") else "\n") for name, text in parts)


def _classify(excinfo, when: str, check: testkit.CheckLog | None) -> dict:
    """The record of a failed test: the stuck verdict is the one its exception carries
    (``testkit.Stuck``); a failure the test worded itself after a wait that only answered
    False takes the last verdict in the test's own log."""
    out = _classify_plain(excinfo, when)
    if check is not None and check.lies and out["outcome"] == "failed":
        # The test may have caught the failure and failed later on something else.
        return {"outcome": "failed", "message": check.lies[0], "pitfall": None,
                "cause": "a returned value that lies about what it is"}
    timed = getattr(excinfo.value, "timed_out", None)
    if timed is not None and timed.slow and not timed.spinning and out["outcome"] == "failed":
        # One root cause however many checks it slowed down: the learner's code sleeps.
        out["cause"] = "slow: asleep in time.sleep"
    recorded = check.verdicts if check is not None else []
    verdict = getattr(excinfo.value, "verdict", None) or (recorded[-1] if recorded else None)
    if verdict is not None and not verdict.sites:
        # Nested bounded waits: once the inner one has stopped the learner threads it judged
        # stuck, the outer one may find its threads waiting on each other in the harness
        # alone.  The root cause is the earlier verdict that names learner lines.
        verdict = next((v for v in recorded if v.sites), verdict)
    if verdict is not None and out["outcome"] == "failed":
        if verdict.text not in out["message"]:
            out["message"] += "\n" + verdict.text
        out["cause"] = "stuck at " + ", ".join(verdict.sites) if verdict.sites else "stuck"
    return out


def _classify_plain(excinfo, when: str) -> dict:
    exc = excinfo.value
    target = _STATE["target"]
    if isinstance(exc, NotImplementedError):
        where = _where(excinfo.tb, target, function=True)
        return {"outcome": "not_implemented", "pitfall": None,
                "message": f"{where or 'a method'} is not implemented yet"}
    if isinstance(exc, testkit.Failure):
        out = {"outcome": "failed", "message": str(exc), "pitfall": exc.pitfall}
        timeline = records.cap_timeline(exc.timeline)
        if timeline is not None:
            out["timeline"] = timeline
        return out
    if isinstance(exc, pytest.fail.Exception):
        text = str(exc)
        if text.startswith("Timeout"):
            text = "the check did not finish in time (hung: deadlock or lost wakeup?)"
        return {"outcome": "failed", "message": text, "pitfall": None}
    if isinstance(exc, AssertionError):
        text = str(exc).split("\nassert ")[0] or "an assertion failed"
        return {"outcome": "failed", "message": text, "pitfall": None}
    where = _where(excinfo.tb, target)
    text = f"{type(exc).__name__}: {exc}" + (f" (raised at {where})" if where else "")
    if when != "call":
        text = f"during {when}: {text}"
    # The same exception at the same learner line is one root cause, whatever the check.
    return {"outcome": "failed", "message": text, "pitfall": None,
            "cause": f"{type(exc).__name__}: {exc} @ {where}" if where
            else f"{type(exc).__name__}: {exc}"}


def _where(tb, target: Path, function: bool = False) -> str | None:
    """The innermost frame of ``tb`` inside the learner file, as 'file:line in name'."""
    found = None
    for frame, lineno in traceback.walk_tb(tb):
        if Path(frame.f_code.co_filename).resolve() == target:
            found = (frame, lineno)
    if found is None:
        return None
    frame, lineno = found
    code = frame.f_code
    name = getattr(code, "co_qualname", None)  # Python 3.11+
    if name is None:
        self_obj = frame.f_locals.get("self")
        name = f"{type(self_obj).__name__}.{code.co_name}" if self_obj is not None else code.co_name
    if function:
        return name
    return f"{_display(target)}:{lineno} in {name}"


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def pytest_sessionfinish(session, exitstatus) -> None:
    if _STATE.get("problem") is not None:
        _emit(records.End())
        out = _STATE.pop("report", None)
        if out is not None:
            out.close()
