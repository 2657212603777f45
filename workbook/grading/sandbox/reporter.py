"""The in-process reporter: a pytest plugin loaded into every graded run (``-p`` this module).

It holds nothing worth stealing.  Every record the harness plugin makes (through
``workbook.plugin.set_report_sink``) goes, as JSON, to the judge's audit hook (``judge``),
which signs and sends it; so does pytest's own verdict on each failed test.  With the
harness's "start" record (sent just before the learner file is imported) it has the judge
take its snapshot of what the verdict depends on (``GUARDED``, the harness and the
acceptance set, and every module the judging code imports), and from then on the
submission's folder serves the submission's own imports (``SubmissionFinder``).
"""
from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from pathlib import Path

import pytest

from workbook.grading import protocol

#: Modules whose functions and classes (and the classes' methods) the verdict relies on:
#: the builtins every module calls, the clocks and the operating system's views the tests
#: measure with (threads, descriptors, sockets, signals), pytest's path from a test call to
#: its report, the making and serialisation of records, and the harness itself.
GUARDED = (
    "builtins", "time", "os", "threading", "socket", "signal", "gc",
    "json", "json.encoder", "dataclasses", "asyncio.base_events", "selectors",
    "_pytest.runner", "_pytest.reports", "_pytest.python", "_pytest.main", "_pytest.outcomes",
    "pluggy._callers", "pluggy._hooks",
    "workbook.plugin", "workbook.testkit", "workbook.records", "workbook.grading.protocol",
    "workbook.grading.sandbox.guard", "workbook.grading.sandbox.judge", __name__,
)
#: The staged copy: ``workbook/`` and the problem's ``tests/`` beside each other.
_STAGE = Path(__file__).resolve().parents[3]
#: The submission's folder in the stage (the learner file and its helper modules).
_SUBMISSION = str(_STAGE / "submission")
#: The stage's list of the modules the judging code imports (``stage.judging_imports``).
IMPORTS = _STAGE / "judging-imports.txt"


def _kit_modules(modules=sys.modules) -> tuple[str, ...]:
    """The bounded waits', the stuck detector's and the tuning constants' modules, as
    imported now (the package ``workbook.testkit`` is one of ``GUARDED``; what it is made of
    is guarded the same way: a threshold raised in ``workbook.tuning`` or a decision replaced
    in ``workbook.stuck.decide`` is a test weakened; so are the explorers, and the settings
    ``workbook.explore.driver`` pins)."""
    return tuple(sorted(name for name in list(modules) if name == "workbook.tuning"
                        or name.startswith(("workbook.testkit.", "workbook.stuck",
                                            "workbook.explore"))))


def _harness_modules(tests: Path = _STAGE / "tests") -> tuple[str, ...]:
    """Import the staged acceptance set's modules (tests, conftests, support) now, before the
    learner file, so that they are guarded like the harness.  pytest's collection then finds
    them imported (and assertion-rewritten, the hook is already in place): a submission that
    imported one first and replaced its tests would otherwise be graded by its own tests."""
    names = []
    for path in sorted(tests.rglob("*.py")):
        parts = path.relative_to(_STAGE).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    for name in names:
        importlib.import_module(name)
    return tuple(names)


def _library_modules(listing: Path = IMPORTS) -> tuple[str, ...]:
    """The library modules the judging code imports, anywhere in it (also inside a function,
    at test time: ``multiprocessing.queues`` in P03's no-ready-made check), imported now, so
    that a submission cannot import one first and replace what the test will look up."""
    try:
        names = listing.read_text().split()
    except OSError:
        return ()
    found = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not on this system (termios on others): not used
            continue
        found.append(name)
    return tuple(found)


class SubmissionFinder:
    """The submission's helper modules, found for the submission's own imports only.

    Last on ``sys.meta_path`` from the learner import on (so a helper named like a module of
    the standard library or the harness never replaces it), and it answers only when the
    nearest code asking that is not Python's library is the submission's: a module the
    library or the harness looks for and does not find (``_winapi``, ``msvcrt``) stays not
    found, as on any other machine, instead of running the submission's code in their
    place."""

    def __init__(self, folder: str) -> None:
        from workbook.grading.sandbox.guard import library_prefixes
        self.finder = importlib.machinery.FileFinder(
            folder, (importlib.machinery.SourceFileLoader,
                     importlib.machinery.SOURCE_SUFFIXES))
        self.library = library_prefixes() + ("<frozen ",)
        self.harness = (str(_STAGE / "workbook") + "/", str(_STAGE / "tests") + "/")

    def _asked_by_submission(self) -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            if not (type(filename) is str and filename.startswith(self.library)):
                return not (type(filename) is str and filename.startswith(self.harness))
            frame = frame.f_back
        return False

    def find_spec(self, name, path=None, target=None):
        if path is not None or not self._asked_by_submission():
            return None
        return self.finder.find_spec(name, target)

    def invalidate_caches(self) -> None:
        self.finder.invalidate_caches()


class Reporter:
    """Hands each record to the judge; takes the snapshot with the harness's start record."""

    def __init__(self, plugins: pytest.PytestPluginManager, guarded: tuple[str, ...],
                 shallow: tuple[str, ...]) -> None:
        self.plugins, self.guarded, self.shallow = plugins, guarded, shallow

    def emit(self, record: protocol.Record) -> None:
        """The harness plugin's record sink."""
        if record.event == "collected":  # the grader has its own list: send the count
            record = protocol.Collected(record.count)
        if record.event == "start":  # the last record before the learner import
            sys.audit("workbook.snapshot", self.guarded, self.plugins, self.shallow)
            sys.meta_path.append(SubmissionFinder(_SUBMISSION))
        _send(record)


def _send(record: protocol.Record) -> None:
    """One record to the judge, which signs and sends it (a note: its text, which the judge
    makes the record of)."""
    if type(record) is protocol.Note:
        sys.audit("workbook.report", "note", record.text, record.checkpoint)
        return
    nodeid = getattr(record, "nodeid", None)
    sys.audit("workbook.report", record.event, protocol.body(record),
              nodeid if type(nodeid) is str else None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    """Before the harness plugin imports the learner file: arm the record sink."""
    if os.environ.pop("WORKBOOK_JUDGE", None) != "armed":  # launched without a judge
        return
    import workbook.plugin
    import workbook.records  # noqa: F401 - in the snapshot before learner code runs
    import workbook.testkit  # noqa: F401
    from workbook.explore import driver
    driver.pin(os.environ.get("WORKBOOK_EXPLORE_SEED"))  # the grader's, before learner code
    shallow = _library_modules()
    harness = _harness_modules()  # first: the kit's and explorers' modules they import too
    reporter = Reporter(config.pluginmanager, GUARDED + _kit_modules() + harness,
                        tuple(name for name in shallow if name not in GUARDED))
    workbook.plugin.set_report_sink(reporter.emit)
    config.stash[_ARMED] = True


_ARMED = pytest.StashKey[bool]()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session) -> None:
    """The collected tests in run order, one record each (the grader compares them), and
    the function each will call, into the snapshot."""
    if not session.config.stash.get(_ARMED, False):
        return
    sys.audit("workbook.items", tuple((item.nodeid, item) for item in session.items))
    for item in session.items:
        marker = item.get_closest_marker("checkpoint")
        _send(protocol.Item(item.nodeid, marker.args[0] if marker else None))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logstart(nodeid, location) -> None:
    """The test pytest starts now: the only one a test record may be about."""
    sys.audit("workbook.running", nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report) -> None:
    """pytest's own verdict, which the judge signs beside the harness's record."""
    if report.failed or (report.skipped and report.when != "teardown"):
        sys.audit("workbook.verdict", report.nodeid)
