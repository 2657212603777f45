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
import functools
import importlib
import itertools
import marshal
import os
import sys
import threading
from pathlib import Path
from types import CodeType, FunctionType

import pytest

from workbook.grading import protocol
from workbook.testkit import is_submission_code

#: Modules whose functions and classes (and the classes' methods) the verdict relies on:
#: the builtins every module calls, the clocks and the operating system's views the tests
#: measure with (threads, descriptors, sockets, signals), pytest's path from a test call to
#: its report, the making, serialisation and signing of records, and the harness itself.
GUARDED = (
    "builtins", "time", "os", "threading", "socket", "signal", "gc",
    "json", "json.encoder", "dataclasses", "hmac", "asyncio.base_events", "selectors",
    "_pytest.runner", "_pytest.reports", "_pytest.python", "_pytest.main", "_pytest.outcomes",
    "pluggy._callers", "pluggy._hooks",
    "workbook.plugin", "workbook.testkit", "workbook.records", "workbook.grading.protocol",
    "workbook.grading.sandbox.guard", __name__,
)
#: Names in them that pytest itself rebinds during a run (its thread-exception plugin).
REBOUND = frozenset({"threading.excepthook"})
#: The kinds of constants guarded in the harness's and the acceptance set's modules.
CONSTANTS = (int, float, str, bytes, tuple, frozenset)


#: The staged copy: ``workbook/`` and the problem's ``tests/`` beside each other.
_STAGE = Path(__file__).resolve().parents[3]
#: The submission's folder in the stage (the learner file and its helper modules).
_SUBMISSION = str(_STAGE / "submission")
#: Most names a ``Tampered`` record lists: a record must fit one pipe write.
_NAMES_SHOWN = 8


def _places(guarded: tuple[str, ...], modules=sys.modules, vars=vars, list=list,
            isinstance=isinstance, callable=callable, getattr=getattr):
    """Where each guarded object lives, as ``(label, lookup, key, object)`` with
    ``lookup(key) is object`` until something replaces it: each guarded module in
    ``sys.modules``, its callables and classes, each class's own callables, the code and
    defaults of every function among them, and in the harness's and the acceptance set's
    modules their constants too (a threshold raised is a test weakened).  (The objects
    themselves, not their ids: a replaced one cannot be freed and its id reused.)  The
    builtins used here are bound when this module is imported, before any learner code, and
    so are the lookups: a submission that replaces ``builtins.vars`` cannot make the check
    look away."""
    def place(label: str, lookup, key: str, value: object):
        yield label, lookup, key, value
        if isinstance(value, FunctionType):
            attribute = functools.partial(getattr, value)
            yield f"{label}.__code__", attribute, "__code__", value.__code__
            yield f"{label}.__defaults__", attribute, "__defaults__", value.__defaults__

    def kept(value: object, harness: bool) -> bool:
        return callable(value) or isinstance(value, (property, staticmethod, classmethod)) \
            or harness and isinstance(value, CONSTANTS)

    for module_name in guarded:
        module = modules.get(module_name)
        if module is None:
            continue
        yield module_name, modules.get, module_name, module
        harness = module_name.startswith(("workbook.", "tests."))
        namespace = vars(module)
        for name, value in list(namespace.items()):
            label = f"{module_name}.{name}"
            if label in REBOUND or not kept(value, harness):
                continue
            yield from place(label, namespace.get, name, value)
            if isinstance(value, type):
                members = vars(value)
                for attr, member in list(members.items()):
                    if kept(member, harness):
                        yield from place(f"{label}.{attr}", members.get, attr, member)


def _kit_modules(modules=sys.modules) -> tuple[str, ...]:
    """The bounded waits', the stuck detector's and the tuning constants' modules, as
    imported now (the package ``workbook.testkit`` is one of ``GUARDED``; what it is made of
    is guarded the same way: a threshold raised in ``workbook.tuning`` or a decision replaced
    in ``workbook.stuck.decide`` is a test weakened)."""
    return tuple(sorted(name for name in list(modules) if name == "workbook.tuning"
                        or name.startswith(("workbook.testkit.", "workbook.stuck"))))


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


def _hooks(plugins: pytest.PytestPluginManager) -> dict[str, object]:
    """``hook NAME PLUGIN -> function`` for every hook implementation pytest would call."""
    return {f"hook {name} {impl.plugin_name}": impl.function
            for name, caller in list(vars(plugins.hook).items())
            for impl in getattr(caller, "get_hookimpls", list)()}


def _trusted(function: object) -> bool:
    """Code from a file of the harness, its tests, Python's library or an installed package
    (pytest, pluggy, pytest-timeout): neither the submission's nor file-less (``<string>``)."""
    code = getattr(function, "__code__", None)
    return code is not None and not code.co_filename.startswith("<") \
        and not is_submission_code(code.co_filename)


def _dumped(dumps, value: object) -> bytes | None:
    """``value`` marshalled without back-references (version 2: the bytes do not depend on
    reference counts)."""
    try:
        return dumps(value, 2)
    except ValueError:  # replaced by something marshal cannot write (also noticed by identity)
        return None


class Snapshot:
    """Everything the verdict depends on, as it was before the learner file was imported."""

    def __init__(self, guarded: tuple[str, ...], plugins: pytest.PytestPluginManager,
                 refusals=tuple) -> None:
        self.plugins = plugins
        self.places = list(_places(guarded))
        self.hooks = _hooks(plugins)
        self.refusals = refusals  # what the audit hook refused so far (``guard``)
        # The harness's constants and code by value too: an object rewritten in place
        # (through raw memory) is still the same object.
        self.values = []
        for label, lookup, key, value in self.places:
            if label.startswith(("workbook.", "tests.")) and isinstance(value, (*CONSTANTS,
                                                                                CodeType)):
                try:
                    self.values.append((label, lookup, key, marshal.dumps(value, 2)))
                except ValueError:  # holds something marshal cannot write: identity only
                    pass

    def changed(self, tuple=tuple, dumps=marshal.dumps) -> tuple[str, ...]:  # noqa: A002
        """What no longer holds the same object, and the hook implementations added since
        from code outside the harness and Python's library (a plugin the submission
        registers can rewrite every report without replacing anything).  Runs after every
        test: it walks the places, building nothing."""
        hooks = _hooks(self.plugins)
        return tuple(list(self.refusals())
                     + [label for label, lookup, key, was in self.places if lookup(key) is not was]
                     + [f"{label} (in place)" for label, lookup, key, data in self.values
                        if _dumped(dumps, lookup(key)) != data]
                     + [name for name, was in self.hooks.items() if hooks.get(name) is not was]
                     + [name for name, function in hooks.items()
                        if name not in self.hooks and not _trusted(function)])


class Reporter:
    """Signs and sends records on the report pipe; pytest's own outcomes ride along."""

    def __init__(self, fd: int, key: bytes, plugins: pytest.PytestPluginManager,
                 guarded: tuple[str, ...], refusals=tuple) -> None:
        self.plugins, self.guarded, self.refusals = plugins, guarded, refusals
        self.snapshot: Snapshot | None = None  # taken just before the learner import
        lock = threading.Lock()  # guards the sequence counter and the pipe write
        counter = itertools.count()
        self.pytest_failed: set[str] = set()  # node ids pytest itself saw fail

        def send(record: protocol.Record) -> None:
            with lock:
                line = protocol.encode(key, next(counter), record)
                try:
                    os.write(fd, line)  # one write: atomic, never interleaved with another
                except OSError:
                    pass  # the learner closed the pipe: what follows is lost (incomplete)

        self.send = send

    def emit(self, record: protocol.Record) -> None:
        """The harness plugin's record sink."""
        # Records are told apart by their event names, not by isinstance: a submission that
        # replaced builtins.isinstance must not be able to skip the comparison below.
        if record.event == "collected":  # the grader has its own list: send the count
            record = protocol.Collected(record.count)
        if record.event == "start":  # the last record before the learner import
            self.snapshot = Snapshot(self.guarded, self.plugins, self.refusals)
            # The submission's folder, for its helper modules: on sys.path (last) from the
            # learner import on, never before: nothing of the submission can run before
            # the guard and this snapshot.  (It stays: a helper imported lazily, inside a
            # function, is the submission's own code running anyway.)
            sys.path.append(_SUBMISSION)
        if record.event == "test":
            verdict = "failed" if record.nodeid in self.pytest_failed else "passed"
            record = dataclasses.replace(record, pytest_outcome=verdict)
        if record.event in ("collected", "test", "end") and self.snapshot is not None:
            changed = self.snapshot.changed()
            if changed:
                more = len(changed) - _NAMES_SHOWN
                self.send(protocol.Tampered(
                    changed[:_NAMES_SHOWN] + ((f"and {more} more",) if more > 0 else ())))
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
    import workbook.records  # noqa: F401 - in the snapshot before learner code runs
    import workbook.testkit  # noqa: F401
    from workbook.grading.sandbox import guard
    refusals = getattr(guard, "refusals", None) or tuple  # installed by launch.py
    if hasattr(guard, "refusals"):
        del guard.refusals  # the reporter's alone from now on
    reporter = Reporter(fd, key, config.pluginmanager,
                        GUARDED + _kit_modules() + _harness_modules(), refusals)
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
