"""The in-process reporter: a pytest plugin loaded into every graded run (``-p`` this module).

Before the harness plugin imports the learner file it takes the per-run key from its pipe and
routes every harness record through ``workbook.plugin.set_report_sink`` into signed protocol
lines; with the harness's "start" record (sent just before the import) it takes a snapshot of
everything the verdict depends on (``GUARDED``).  After the import, with every test result
and at the end, the snapshot is compared again: a builtin, a clock, a pytest runner or report
class, a JSON encoder or a harness function that is no longer the object it was makes the run
``tampered`` from that record on.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import threading
from pathlib import Path

import pytest

from workbook.grading import protocol

#: Modules whose functions and classes (and the classes' methods) the verdict relies on:
#: the builtins every module calls, the clocks the tests measure with, pytest's path from a
#: test call to its report, the making, serialisation and signing of records, and the
#: harness itself.
GUARDED = (
    "builtins", "time", "json", "json.encoder", "dataclasses", "hmac",
    "asyncio.base_events", "selectors",
    "_pytest.runner", "_pytest.reports", "_pytest.python", "_pytest.main", "_pytest.outcomes",
    "pluggy._callers", "pluggy._hooks",
    "workbook.plugin", "workbook.testkit", "workbook.grading.protocol", __name__,
)


def _surface(modules=sys.modules, vars=vars, list=list, isinstance=isinstance,  # noqa: A002
             callable=callable) -> dict[str, object]:
    """``name -> object`` for the GUARDED modules' callables and classes, and each class's
    own callables (``module.Class.name``): what replacing would change a verdict.  (The
    objects themselves, not their ids: a replaced one cannot be freed and its id reused.)
    The builtins it uses are bound when this module is imported, before any learner code:
    a submission that replaces ``builtins.vars`` cannot make this look away."""
    found: dict[str, object] = {}
    for module_name in GUARDED:
        module = modules.get(module_name)
        for name, value in list(vars(module).items()) if module else ():
            name = f"{module_name}.{name}"
            if isinstance(value, type):
                found.update({f"{name}.{attr}": member
                              for attr, member in list(vars(value).items())
                              if callable(member)
                              or isinstance(member, (property, staticmethod, classmethod))})
            if callable(value):
                found[name] = value
    return found


#: Where the code of a hook implementation may come from: the staged harness and tests, and
#: Python's own library and installed packages (pytest, pluggy, pytest-timeout).
_STAGE = Path(__file__).resolve().parents[3]
_TRUSTED = tuple(os.path.join(os.path.realpath(d), "") for d in (
    _STAGE / "workbook", _STAGE / "tests", sys.prefix, sys.base_prefix, sys.exec_prefix))


def _hooks(plugins: pytest.PytestPluginManager) -> dict[str, object]:
    """``hook NAME PLUGIN -> function`` for every hook implementation pytest would call."""
    return {f"hook {name} {impl.plugin_name}": impl.function
            for name, caller in list(vars(plugins.hook).items())
            for impl in getattr(caller, "get_hookimpls", list)()}


def _trusted(function: object, realpath=os.path.realpath) -> bool:
    code = getattr(function, "__code__", None)
    return code is not None and realpath(code.co_filename).startswith(_TRUSTED)


def _changed(before: dict[str, object], plugins: pytest.PytestPluginManager,
             tuple=tuple) -> tuple[str, ...]:  # noqa: A002
    """The names in ``before`` that no longer hold the same object, and hook implementations
    added since from code outside the harness and Python's library (a plugin registered by
    the submission can rewrite every report without replacing anything)."""
    now = {**_surface(), **_hooks(plugins)}
    return tuple([name for name, was in before.items() if now.get(name) is not was]
                 + [name for name, function in now.items() if name.startswith("hook ")
                    and name not in before and not _trusted(function)])


class Reporter:
    """Signs and sends records on the report pipe; pytest's own outcomes ride along."""

    def __init__(self, fd: int, key: bytes, plugins: pytest.PytestPluginManager) -> None:
        self.plugins = plugins
        lock = threading.Lock()  # guards the sequence counter and the pipe write
        counter = itertools.count()
        self.before: dict[str, object] = {}  # the guarded surface before the learner import
        self.pytest_failed: set[str] = set()  # node ids pytest itself saw fail

        def send(record: protocol.Record) -> None:
            with lock:
                line = protocol.encode(key, next(counter), record)
                try:
                    os.write(fd, line)  # one write: atomic, never interleaved with another
                except OSError:
                    pass  # the learner closed the pipe: what follows is lost (incomplete)

        self.send = send

    def emit(self, data: dict) -> None:
        """The harness plugin's record sink."""
        if data.get("event") == "collected":  # the grader has its own list: send the count
            record: protocol.Record = protocol.Collected(
                sum(map(len, data.get("tests", {}).values())))
        else:
            record = protocol.from_dict(data)
        # Records are told apart by their event names, not by isinstance: a submission that
        # replaced builtins.isinstance must not be able to skip the comparison below.
        if record.event == "start":  # the last record before the learner import
            self.before = {**_surface(), **_hooks(self.plugins)}
        if record.event == "test":
            verdict = "failed" if record.nodeid in self.pytest_failed else "passed"
            record = dataclasses.replace(record, pytest_outcome=verdict)
        if record.event in ("collected", "test", "end"):
            changed = _changed(self.before, self.plugins)
            if changed:
                self.send(protocol.Tampered(changed))
        self.send(record)


_REPORTER: list[Reporter] = []


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    """Before the harness plugin imports the learner file: take the key, arm the pipe."""
    if "WORKBOOK_REPORT_FD" not in os.environ:
        return
    fd = int(os.environ.pop("WORKBOOK_REPORT_FD"))
    key_fd = int(os.environ.pop("WORKBOOK_KEY_FD"))
    key = os.read(key_fd, 32)  # written whole before this process started
    os.close(key_fd)
    os.set_inheritable(fd, False)
    import workbook.plugin
    import workbook.testkit  # noqa: F401 - in the snapshot before learner code runs
    reporter = Reporter(fd, key, config.pluginmanager)
    del key
    workbook.plugin.set_report_sink(reporter.emit)
    _REPORTER.append(reporter)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session) -> None:
    """The collected tests in run order, one record each (the grader compares them)."""
    if not _REPORTER:
        return
    for item in session.items:
        marker = item.get_closest_marker("checkpoint")
        _REPORTER[0].send(protocol.Item(item.nodeid, marker.args[0] if marker else None))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report) -> None:
    """pytest's own verdict, to compare with the harness's record of the same test."""
    if _REPORTER and (report.failed or (report.skipped and report.when != "teardown")):
        _REPORTER[0].pytest_failed.add(report.nodeid)
