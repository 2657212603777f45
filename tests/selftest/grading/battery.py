"""Generate a folder of submissions with known right answers, and check a gradebook against it.

Everything is derived from the manifests and the shipped files of the problems that exist:
the reference, the alternates, the pitfalls (made self-contained, since a submission cannot
import ``solutions``) and the skeleton; plus hostile files that try to break the grader.

    python -m tests.selftest.grading.battery OUT_DIR [--count 40] [--problem pNN ...]

writes ``OUT_DIR/submissions/`` and ``OUT_DIR/expected.json``.  ``measure.py`` grades it.

Safety: every hostile file caps itself (at most 400 forks, 3 GiB, 64 MiB of output, sleepers
that exit on their own), so even outside the sandbox it cannot take the machine down.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.selftest.grading import attacks
from workbook import ROOT, manifest, run, variants

# -- sources --------------------------------------------------------------------------------

_EMBED = '''import sys as _wb_sys
import types as _wb_types


def _wb_embed(name, source):
    """Register ``source`` as the module ``name``: this file carries its own copy."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        package = ".".join(parts[:i])
        if package not in _wb_sys.modules:
            module = _wb_types.ModuleType(package)
            module.__path__ = []
            _wb_sys.modules[package] = module
    module = _wb_types.ModuleType(name)
    module.__file__ = "<embedded " + name + ">"
    _wb_sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    setattr(_wb_sys.modules[".".join(parts[:-1])], parts[-1], module)


'''

_IMPORTS = re.compile(r"^\s*(?:from\s+(solutions(?:\.\w+)+)\s+import|import\s+(solutions(?:\.\w+)+))",
                      re.M)


def _split_future(source: str) -> tuple[str, str]:
    lines = source.splitlines()
    future = [ln for ln in lines if ln.startswith("from __future__ import")]
    rest = [ln for ln in lines if not ln.startswith("from __future__ import")]
    return "\n".join(future), "\n".join(rest) + "\n"


def self_contained(path: Path) -> str:
    """``path``'s source with every ``solutions.*`` module it imports embedded in it."""
    source = path.read_text("utf-8")
    needed: list[str] = []

    def collect(text: str) -> None:
        for match in _IMPORTS.finditer(text):
            name = match.group(1) or match.group(2)
            if name not in needed:
                collect((ROOT / (name.replace(".", "/") + ".py")).read_text("utf-8"))
                needed.append(name)  # dependencies first

    collect(source)
    if not needed:
        return source
    future, rest = _split_future(source)
    embeds = "".join(
        f"_wb_embed({name!r}, {(ROOT / (name.replace('.', '/') + '.py')).read_text('utf-8')!r})\n"
        for name in needed)
    return f"{future}\n{_EMBED}{embeds}\n{rest}"


def reference(p: manifest.Problem) -> str:
    return p.solution_file.read_text("utf-8")


def skeleton(p: manifest.Problem) -> str:
    return p.learner_file.read_text("utf-8")


def with_prelude(prelude: str, body: str) -> str:
    """``prelude`` runs first (after the body's ``from __future__`` lines)."""
    future, rest = _split_future(body)
    return f"{future}\n{prelude}\n{rest}"


def with_epilogue(body: str, epilogue: str) -> str:
    return f"{body}\n\n{epilogue}\n"


# The test pytest is in right now, seen from the submission's own methods: every method of
# its classes first calls ``on_call(test)`` with pytest's PYTEST_CURRENT_TEST (no trace
# function: the sandbox refuses those to a submission).
_TEST_WATCH = '''
import functools as _h_functools
import os as _h_os
import threading as _h_threading


def _h_current_test():
    text = _h_os.environ.get("PYTEST_CURRENT_TEST", "")
    return text.rsplit(" ", 1)[0] if text.endswith("(call)") else None


def _h_watch(on_call):
    def wrap(fn):
        @_h_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            on_call(_h_current_test())
            return fn(*args, **kwargs)
        return wrapper
    for _h_obj in list(globals().values()):
        if isinstance(_h_obj, type) and _h_obj.__module__ == __name__:
            for _h_attr, _h_value in list(vars(_h_obj).items()):
                if callable(_h_value) and (not _h_attr.startswith("_") or _h_attr == "__init__"):
                    setattr(_h_obj, _h_attr, wrap(_h_value))
'''

HOSTILE = {
    "syntax_error": lambda p, ctx: skeleton(p) + "\n\ndef broken(:\n    pass\n",

    "import_loop": lambda p, ctx: with_prelude(
        "# Spins forever at import time.\nwhile True:\n    pass\n", skeleton(p)),

    "exit_at_import": lambda p, ctx: with_prelude(
        "import os as _h_os\n_h_os._exit(0)  # leave without a word\n", reference(p)),

    # Exits with the code the sandbox uses for "could not start": must not pass for it.
    "exit_125_at_import": lambda p, ctx: with_prelude(
        "import os as _h_os\n_h_os._exit(125)\n", reference(p)),

    "sys_exit_at_import": lambda p, ctx: with_prelude(
        "import sys as _h_sys\n_h_sys.exit(0)\n", reference(p)),

    # Passes the first test, then leaves with exit code 0 as the second test starts.
    "exit_in_second_test": lambda p, ctx: with_epilogue(reference(p), _TEST_WATCH + '''
_h_seen = []


def _h_on_call(test):
    if test and test not in _h_seen:
        _h_seen.append(test)
        if len(_h_seen) == 2:
            _h_os._exit(0)


_h_watch(_h_on_call)
'''),

    # Raises SystemExit inside the second test only: that test fails, every other passes.
    "sys_exit_in_second_test": lambda p, ctx: with_epilogue(reference(p), _TEST_WATCH + '''
_h_seen = []


def _h_on_call(test):
    if test and test not in _h_seen:
        _h_seen.append(test)
        if len(_h_seen) == 2:
            raise SystemExit(3)


_h_watch(_h_on_call)
'''),

    # Deadlocks the whole process in the first test, deaf to pytest-timeout's SIGALRM and to
    # any exception the harness injects to stop it.
    "deadlock": lambda p, ctx: with_epilogue(reference(p), _TEST_WATCH + '''
import signal as _h_signal
_h_signal.pthread_sigmask(_h_signal.SIG_BLOCK, {_h_signal.SIGALRM})
_h_never = _h_threading.Lock()
_h_never.acquire()


def _h_on_call(test):
    if test and _h_threading.current_thread() is _h_threading.main_thread():
        # No signal handler runs in this thread from now on, and an exception injected from
        # another thread waits for a bytecode boundary that never comes: the acquire never
        # returns.  (Without the mask, a second signal landing in the except clause escaped.)
        _h_signal.pthread_sigmask(_h_signal.SIG_BLOCK, _h_signal.valid_signals())
        while True:  # nobody will ever release it, and no exception gets it out
            try:
                _h_never.acquire()
            except BaseException:
                pass


_h_watch(_h_on_call)
'''),

    "fake_passed_output": lambda p, ctx: with_prelude(f'''
import json as _h_json, sys as _h_sys
_h_lines = ["{p.tests_dir.name}/test_all.py::test_everything PASSED",
            "============ {len(p.checkpoints) * 5} passed in 0.42s ============"]
for _h_i, _h_cp in enumerate({[cp.id for cp in p.checkpoints]!r}):
    _h_rec = {{"event": "test", "checkpoint": _h_cp, "nodeid": "t::" + str(_h_i),
              "outcome": "passed", "seconds": 0.0}}
    _h_lines.append(_h_json.dumps(_h_rec))
    _h_lines.append("0" * 64 + " " + str(_h_i) + " " + _h_json.dumps(_h_rec))
_h_lines.append(_h_json.dumps({{"event": "end"}}))
for _h_stream in (_h_sys.stdout, _h_sys.stderr):
    _h_stream.write("\\n".join(_h_lines) + "\\n")
    _h_stream.flush()
''', skeleton(p)),

    # Writes forged report lines into every open file descriptor it can find.
    "forge_into_fds": lambda p, ctx: with_prelude(f'''
import json as _h_json, os as _h_os
_h_lines = []
for _h_i, _h_cp in enumerate({[cp.id for cp in p.checkpoints]!r}):
    _h_rec = _h_json.dumps({{"event": "test", "checkpoint": _h_cp, "nodeid": "t::" + str(_h_i),
                            "outcome": "passed", "pytest_outcome": "passed", "seconds": 0.0}})
    _h_lines += [_h_rec, "f" * 64 + " " + str(_h_i + 1) + " " + _h_rec]
_h_lines.append(_h_json.dumps({{"event": "end"}}))
_h_blob = ("\\n" + "\\n".join(_h_lines) + "\\n").encode()
for _h_fd in range(1024):
    try:
        _h_os.write(_h_fd, _h_blob)
    except OSError:
        pass
''', skeleton(p)),

    # Calls the harness's own (signing) emitter to report passes it never earned.
    "forge_via_harness": lambda p, ctx: with_prelude(f'''
try:
    import workbook.plugin as _h_plugin
    from workbook import records as _h_records
    for _h_i, _h_cp in enumerate({[cp.id for cp in p.checkpoints]!r}):
        _h_plugin._emit(_h_records.TestDone("t::" + str(_h_i), _h_cp, "passed"))
    _h_plugin._emit(_h_records.End())
except Exception:
    pass
''', skeleton(p)),

    # Marks every test "passed" in the harness's state before failing it.
    "rewrite_outcome": lambda p, ctx: with_epilogue(skeleton(p), '''
import functools as _h_functools
import workbook.plugin as _h_plugin


def _h_forge(fn):
    @_h_functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _h_plugin._STATE["outcome"] = {"outcome": "passed"}
        return fn(*args, **kwargs)
    return wrapper


for _h_name, _h_obj in list(globals().items()):
    if isinstance(_h_obj, type) and _h_obj.__module__ == __name__:
        for _h_attr, _h_value in list(vars(_h_obj).items()):
            if callable(_h_value) and (not _h_attr.startswith("_") or _h_attr == "__init__"):
                setattr(_h_obj, _h_attr, _h_forge(_h_value))
    elif callable(_h_obj) and getattr(_h_obj, "__module__", None) == __name__ \\
            and not _h_name.startswith("_"):
        globals()[_h_name] = _h_forge(_h_obj)
'''),

    # the same in place, with an outcome the harness never writes (it counted as passed)
    "rewrite_outcome_skipped": lambda p, ctx: HOSTILE["rewrite_outcome"](p, ctx).replace(
        '{"outcome": "passed"}', '{"outcome": "skipped"}'),

    "fork_bomb": lambda p, ctx: with_prelude('''
import os as _h_os, time as _h_time
_h_forks = 0
try:
    for _ in range(400):  # a cap: never more than 400 processes, sandbox or not
        if _h_os.fork() == 0:
            try:
                _h_os.setsid()  # try to leave the process group
            except OSError:
                pass
            _h_time.sleep(60)
            _h_os._exit(0)
        _h_forks += 1
except OSError as _h_exc:
    raise RuntimeError(f"fork bomb stopped by the process limit after {_h_forks} forks")
raise RuntimeError("fork bomb was NOT stopped")
''', reference(p)),

    "memory_bomb": lambda p, ctx: with_prelude('''
_h_chunks = []
try:
    for _ in range(12):  # a cap: 3 GiB of address space (calloc'd: no page is touched)
        _h_chunks.append(bytes(256 << 20))
except MemoryError:
    del _h_chunks
    raise RuntimeError("memory bomb stopped by the memory limit")
raise RuntimeError("memory bomb was NOT stopped")
''', reference(p)),

    "huge_output": lambda p, ctx: with_prelude('''
import sys as _h_sys
_h_line = "PASSED " * 9000 + "\\n"
for _ in range(1000):  # about 63 MB on stdout, then 6 MB on stderr
    _h_sys.stdout.write(_h_line)
for _ in range(100):
    _h_sys.stderr.write(_h_line)
_h_sys.stdout.flush()
''', reference(p)),

    # Tries to kill the grader (its parent, the parent's group, anything named workbook).
    "kill_parent": lambda p, ctx: with_prelude('''
import os as _h_os, signal as _h_signal
for _h_attempt in (lambda: _h_os.kill(_h_os.getppid(), _h_signal.SIGKILL),
                   lambda: _h_os.killpg(_h_os.getpgid(_h_os.getppid()), _h_signal.SIGKILL)
                   if _h_os.getpgid(_h_os.getppid()) not in (0, _h_os.getpgrp()) else None):
    try:
        _h_attempt()
    except OSError:
        pass
for _h_pid in _h_os.listdir("/proc"):
    if _h_pid.isdigit() and int(_h_pid) not in (_h_os.getpid(), _h_os.getpgrp()):
        try:
            with open(f"/proc/{_h_pid}/cmdline", "rb") as _h_f:
                if b"workbook" in _h_f.read():
                    _h_os.kill(int(_h_pid), _h_signal.SIGKILL)
        except OSError:
            pass
''', reference(p)),

    # Tries to read or import the reference; if it could, it would score like it.
    "read_solutions": lambda p, ctx: f'''from __future__ import annotations
import importlib as _h_importlib, sys as _h_sys
_h_stolen = None
for _h_path in {[str(p.solution_file), str(ROOT / "solutions" / "__init__.py")]!r}:
    try:
        with open(_h_path) as _h_f:
            _h_text = _h_f.read()
        if "class" in _h_text:
            _h_stolen = _h_text
            break
    except OSError:
        pass
if _h_stolen is None:
    try:
        _h_sys.path.insert(0, {str(ROOT)!r})
        _h_stolen = open(_h_importlib.import_module({"solutions." + p.module!r}).__file__).read()
    except Exception:
        pass
if _h_stolen is not None:
    exec(compile(_h_stolen, "stolen", "exec"), globals())
else:
{_indent(skeleton_body(p))}
''',

    # Leaves a daemonised grandchild behind (a new session, out of the process group).
    "orphan": lambda p, ctx: with_prelude(f'''
import os as _h_os, sys as _h_sys
_h_pid = _h_os.fork()
if _h_pid == 0:
    _h_os.setsid()
    if _h_os.fork() == 0:
        _h_os.execv(_h_sys.executable, [_h_sys.executable, "-c",
                                        "import time; time.sleep(90)", {ctx.marker!r}])
    _h_os._exit(0)
_h_os.waitpid(_h_pid, 0)
''', reference(p)),

    # Replaces every open descriptor with /dev/null: the report goes nowhere.
    "silence_report": lambda p, ctx: with_prelude('''
import os as _h_os
_h_null = _h_os.open(_h_os.devnull, _h_os.O_WRONLY)
for _h_fd in range(3, 1024):
    if _h_fd != _h_null:
        try:
            _h_os.fstat(_h_fd)
            _h_os.dup2(_h_null, _h_fd)
        except OSError:
            pass
''', reference(p)),

    # Correct, but leaves a non-daemon thread behind: the interpreter cannot exit.
    "lingering_thread": lambda p, ctx: with_epilogue(reference(p), '''
import threading as _h_threading
import time as _h_time
_h_threading.Thread(target=_h_time.sleep, args=(120,), daemon=False).start()
'''),

    # Replaces the clocks at import: time seems to pass twice as fast, so a wait that returns
    # early would look as long as the test wants.
    "fake_clock": lambda p, ctx: with_prelude('''
import time as _h_time
for _h_name in ("monotonic", "perf_counter", "time"):
    _h_real = getattr(_h_time, _h_name)
    setattr(_h_time, _h_name, (lambda real: lambda: real() * 2)(_h_real))
    _h_real_ns = getattr(_h_time, _h_name + "_ns")
    setattr(_h_time, _h_name + "_ns", (lambda real: lambda: real() * 2)(_h_real_ns))
''', reference(p)),

    # Rewrites pytest's own reports: every failure becomes a pass before anyone sees it.
    "patch_pytest_reports": lambda p, ctx: with_epilogue(skeleton(p), '''
import _pytest.reports as _h_reports
import _pytest.runner as _h_runner
_h_init = _h_reports.TestReport.__init__


def _h_passing_init(self, *args, **kwargs):
    _h_init(self, *args, **kwargs)
    self.outcome, self.longrepr = "passed", None


_h_reports.TestReport.__init__ = _h_passing_init
_h_call = _h_runner.CallInfo.from_call.__func__


def _h_no_excinfo(cls, func, when, reraise=None):
    info = _h_call(cls, func, when, reraise)
    object.__setattr__(info, "excinfo", None)
    return info


_h_runner.CallInfo.from_call = classmethod(_h_no_excinfo)
'''),

    # Rewrites the serialisation: a record saying "not_implemented" or "failed" leaves as
    # "passed".
    "patch_json": lambda p, ctx: with_epilogue(skeleton(p), '''
import json as _h_json
import json.encoder as _h_encoder
_h_dumps = _h_json.dumps


def _h_rewrite(text):
    return text.replace('"not_implemented"', '"passed"').replace('"failed"', '"passed"')


_h_json.dumps = lambda *a, **k: _h_rewrite(_h_dumps(*a, **k))
_h_encode = _h_encoder.JSONEncoder.encode
_h_encoder.JSONEncoder.encode = lambda self, o: _h_rewrite(_h_encode(self, o))
'''),

    # Rewrites pytest's reports as above, and first blinds the check that would notice:
    # builtins.isinstance says no to the reporter's "is this a result?" question.
    "blind_the_guard": lambda p, ctx: with_prelude('''
import builtins as _h_builtins
_h_isinstance = _h_builtins.isinstance


def _h_blind(obj, kinds):
    if _h_isinstance(kinds, tuple) and any(getattr(k, "__name__", "") == "TestDone"
                                           for k in kinds):
        return False
    return _h_isinstance(obj, kinds)


_h_builtins.isinstance = _h_blind
''', HOSTILE["patch_pytest_reports"](p, ctx)),

    # Replaces nothing: registers a pytest plugin of its own (found through the frames that
    # import it) whose report of every test says "passed".
    "register_plugin": lambda p, ctx: with_epilogue(skeleton(p), '''
import sys as _h_sys
import pytest as _h_pytest
from _pytest.reports import TestReport as _h_TestReport


class _h_AllPass:
    @_h_pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        return _h_TestReport(item.nodeid, item.location, {}, "passed", None, call.when,
                             [], call.duration, call.start, call.stop)


_h_frame = _h_sys._getframe()
while _h_frame is not None and not hasattr(_h_frame.f_locals.get("config"), "pluginmanager"):
    _h_frame = _h_frame.f_back
_h_frame.f_locals["config"].pluginmanager.register(_h_AllPass(), "h-all-pass")
'''),

    # Imports the acceptance set before pytest does and swaps every test for one that does
    # nothing (same name and signature, so fixtures still resolve).
    "replace_tests": lambda p, ctx: with_epilogue(skeleton(p), f'''
import functools as _h_functools
import importlib as _h_importlib
import pkgutil as _h_pkgutil
_h_package = _h_importlib.import_module("tests.{p.id}")
for _h_info in _h_pkgutil.iter_modules(_h_package.__path__):
    if _h_info.name.startswith("test_"):
        _h_module = _h_importlib.import_module("tests.{p.id}." + _h_info.name)
        for _h_name, _h_test in list(vars(_h_module).items()):
            if _h_name.startswith("test_") and callable(_h_test):
                _h_fake = _h_functools.update_wrapper(lambda **kw: None, _h_test)
                del _h_fake.__wrapped__
                setattr(_h_module, _h_name, _h_fake)
'''),

    # Hides every descriptor from the tests that count them: os.listdir of /proc/self/fd
    # answers nothing (a P02 file that leaks cancelled sockets scored 60 instead of 25).
    "hide_descriptors": lambda p, ctx: with_epilogue(skeleton(p), '''
import os as _h_os
_h_listdir = _h_os.listdir


def _h_hide(path="."):
    names = _h_listdir(path)
    return [] if str(path).endswith("/fd") else names


_h_os.listdir = _h_hide
'''),

    # Raises the harness's thresholds: a thread that burns CPU counts as parked (a P03 queue
    # that sleeps instead of waiting scored 85 instead of 55 this way).
    "raise_thresholds": lambda p, ctx: with_epilogue(skeleton(p), '''
import workbook.testkit as _h_testkit
_h_testkit.PARKED_CPU = _h_testkit.STILL_CPU = 1e9
'''),

    # The known limit: code in the judged process reaches the reporter (two attribute hops
    # from the harness plugin), doctors its snapshot, signs a perfect run itself, then
    # silences the real one.
    "forge_with_the_reporter": lambda p, ctx: with_epilogue(skeleton(p), '''
import workbook.plugin as _h_plugin
from workbook.grading import protocol as _h_protocol
_h_sink = _h_plugin._sink
_h_reporter = getattr(_h_sink, "__self__", None)
if _h_reporter is not None:
    import _pytest.main as _h_main
    _h_done = []

    def _h_forge(session):
        if _h_done:
            return
        _h_done.append(1)
        for _h_item in session.items:
            _h_cp = _h_item.get_closest_marker("checkpoint").args[0]
            _h_reporter.send(_h_protocol.Item(_h_item.nodeid, _h_cp))
        for _h_item in session.items:
            _h_cp = _h_item.get_closest_marker("checkpoint").args[0]
            _h_reporter.send(_h_protocol.TestDone(_h_item.nodeid, _h_cp))
        _h_reporter.send(_h_protocol.End())
        import os as _h_os
        _h_os._exit(0)

    class _h_Plugin:
        def pytest_collection_finish(self, session):
            _h_forge(session)

    import gc as _h_gc
    import workbook.grading.sandbox.reporter as _h_guard
    for _h_obj in _h_gc.get_objects():
        if type(_h_obj).__name__ == "PytestPluginManager":
            _h_obj.register(_h_Plugin(), "h-forge")
            _h_reporter.snapshot.hooks.update(_h_guard._hooks(_h_obj))  # doctored
            break
'''),

    # Reaches the reporter through the harness plugin's sink and finds pytest's plugin manager
    # on it (no gc, no frames): signs a perfect run itself, then leaves.  Still the stated
    # limit of an in-process report.
    "forge_via_reporter_fields": lambda p, ctx: with_epilogue(skeleton(p), '''
import os as _h_os
import workbook.plugin as _h_plugin
import workbook.grading.sandbox.reporter as _h_guard
from workbook.grading import protocol as _h_protocol
_h_reporter = getattr(_h_plugin._sink, "__self__", None)
if _h_reporter is not None:
    class _h_Plugin:
        def pytest_collection_finish(self, session):
            for _h_item in session.items:
                _h_cp = _h_item.get_closest_marker("checkpoint").args[0]
                _h_reporter.send(_h_protocol.Item(_h_item.nodeid, _h_cp))
            for _h_item in session.items:
                _h_cp = _h_item.get_closest_marker("checkpoint").args[0]
                _h_reporter.send(_h_protocol.TestDone(_h_item.nodeid, _h_cp))
            _h_reporter.send(_h_protocol.End())
            _h_os._exit(0)

    _h_reporter.plugins.register(_h_Plugin(), "h-forge")
    _h_reporter.snapshot.hooks.update(_h_guard._hooks(_h_reporter.plugins))
'''),

    # Class 1: code that runs before the guard.  A helper package named like an optional
    # module the standard library tries at import time (``copy`` and ``pickle`` try
    # ``org.python.core``, ``subprocess`` and others ``msvcrt``) patches pytest's reports
    # while pytest is still being imported, so a snapshot taken later sees the patch as the
    # baseline.  The learner file is the untouched skeleton.
    "helper_before_guard": lambda p, ctx: skeleton(p),

    # Class 2: a sys.settrace function that makes check()'s condition true in every frame
    # of it (written back into the frame with PyFrame_LocalsToFast; 3.13 writes through).
    "settrace_condition": lambda p, ctx: with_epilogue(skeleton(p), '''
import sys as _h_sys
import threading as _h_threading


def _h_trace(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "check" \\
            and "testkit" in frame.f_code.co_filename:
        frame.f_locals["condition"] = True
        try:
            import ctypes as _h_ctypes
            _h_ctypes.pythonapi.PyFrame_LocalsToFast(_h_ctypes.py_object(frame),
                                                     _h_ctypes.c_int(0))
        except Exception:
            pass
    return None


for _h_install in (_h_sys.settrace, _h_threading.settrace):
    try:
        _h_install(_h_trace)
    except Exception:
        pass
'''),

    # Class 2: the harness's float thresholds rewritten in place through ctypes: the same
    # objects, other values (a thread burning CPU would count as parked).
    "ctypes_constant": lambda p, ctx: with_epilogue(skeleton(p), '''
import ctypes as _h_ctypes
import workbook.testkit as _h_testkit
for _h_name in ("PARKED_CPU", "STILL_CPU"):
    _h_value = getattr(_h_testkit, _h_name, None)
    if type(_h_value) is float:
        _h_ctypes.cast(id(_h_value), _h_ctypes.POINTER(_h_ctypes.c_double))[2] = 1e9
'''),

    # Class 2: every object of the process from the garbage collector, the pytest plugin
    # manager among them.
    "gc_objects": lambda p, ctx: with_epilogue(skeleton(p), '''
import gc as _h_gc
try:
    _h_found = [o for o in _h_gc.get_objects() if type(o).__name__ == "PytestPluginManager"]
except Exception:
    _h_found = []
'''),

    # Class 2: the harness's frames from a traceback and from sys._getframe, and a
    # function's code swapped for another's.
    "frames_and_code": lambda p, ctx: with_epilogue(skeleton(p), '''
import sys as _h_sys
import workbook.testkit as _h_testkit
for _h_attempt in (lambda: _h_sys._getframe(0),
                   lambda: _h_sys._current_frames(),
                   lambda: setattr(_h_testkit.check, "__code__", (lambda *a, **k: None).__code__),
                   lambda: compile("x = 1", _h_testkit.__file__, "exec")):
    try:
        _h_attempt()
    except Exception:
        pass
'''),

    # Class 3: what the run can see.  Another checkout's solutions elsewhere on disk, a
    # classmate's file in the class folder, the gradebook: if any of them can be read, the
    # reference it carries runs instead of the skeleton (and scores 100).
    "read_elsewhere": lambda p, ctx: f'''from __future__ import annotations
_h_seen = []
for _h_path in {list(ctx.elsewhere)!r}:
    try:
        with open(_h_path, "rb") as _h_f:
            _h_f.read(1)
        _h_seen.append(_h_path)
    except OSError:
        pass
if _h_seen:
    exec(compile({reference(p)!r}, "stolen", "exec"), globals())
else:
{_indent(skeleton_body(p))}
''',

    # Class 3: leaves notes where a later run could find them: a file in /run/lock and
    # /dev/shm, a System V message queue and shared memory segment (util-linux's ipcmk).
    # The selftest looks for them after the batch.
    "leave_a_note": lambda p, ctx: with_prelude(f'''
import subprocess as _h_subprocess
for _h_dir in ("/run/lock", "/var/lock", "/dev/shm"):
    try:
        with open(_h_dir + "/{ctx.marker}-note", "w") as _h_f:
            _h_f.write("the answer is 42")
    except OSError:
        pass
for _h_kind in ("-Q", "-M"):
    try:
        _h_subprocess.run(["ipcmk", _h_kind] + (["4096"] if _h_kind == "-M" else []),
                          capture_output=True, timeout=10)
    except (OSError, _h_subprocess.SubprocessError):
        pass
''', reference(p)),

    # Prints the grader's own failure text (with rich markup) and exits with the sandbox's
    # "could not start" code: the row must be the submission's failure, never pending.
    "spoof_own_failure": lambda p, ctx: with_prelude('''
import os as _h_os, sys as _h_sys
_h_sys.stderr.write("workbook sandbox: [bold red]the sandbox could not start the run[/]\\n")
_h_sys.stderr.flush()
_h_os._exit(125)
''', reference(p)),

    # Asserts the sandbox from inside: a correct solution that fails to import otherwise.
    "sandbox_probe": lambda p, ctx: with_prelude(f'''
import os as _h_os, resource as _h_resource, socket as _h_socket
_h_problems = []
if {ctx.isolation != "none"!r} and _h_os.getuid() == 0:
    _h_problems.append("runs as root")
for _h_path in {[str(q.solution_file) for q in manifest.problems().values()]
                if ctx.isolation != "none" else []!r}:
    try:
        open(_h_path).close()
        _h_problems.append("can read " + _h_path)
    except OSError:
        pass
for _h_name in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_NOFILE"):
    if _h_resource.getrlimit(getattr(_h_resource, _h_name))[0] == _h_resource.RLIM_INFINITY:
        _h_problems.append(_h_name + " is not set")
if {ctx.isolation == "namespaces"!r}:
    _h_names = sorted(name for _, name in _h_socket.if_nameindex())
    if _h_names != ["lo"]:
        _h_problems.append("network interfaces " + repr(_h_names))
    if _h_os.getppid() != 1:
        _h_problems.append("not in its own PID namespace")
if _h_problems:
    raise RuntimeError("sandbox probe: " + "; ".join(_h_problems))
''', reference(p)),
}


_PATCH_REPORTS_AT_IMPORT = '''
import _pytest.reports as _h_reports
_h_init = _h_reports.TestReport.__init__


def _h_passing_init(self, *args, **kwargs):
    _h_init(self, *args, **kwargs)
    self.outcome, self.longrepr = "passed", None


_h_reports.TestReport.__init__ = _h_passing_init
'''

#: Helper modules some hostile kinds bring beside their learner file (path -> source).
HELPERS = {
    "helper_before_guard": {"org/__init__.py": _PATCH_REPORTS_AT_IMPORT,
                            "org/python/__init__.py": "", "msvcrt.py": _PATCH_REPORTS_AT_IMPORT},
}


#: A submission folder whose name carries rich markup, a newline and ANSI codes: printed
#: as is, it would fake a finished "ok 100/100" line in the log and restyle the terminal.
FAKE_NAME = "eve\x1b[2K\r[bold green]\n[1] reference·{first.id}: ok 100 of 100 [italic red]"


def decoy_path(marker: str) -> Path:
    """Where ``decoy_checkout`` puts its checkout (remove it after the batch)."""
    if os.geteuid() != 0:
        return Path(tempfile.gettempdir()) / f"workbook-decoy-{marker}"
    return Path("/run") / f"workbook-decoy-{marker}"


def decoy_checkout(marker: str) -> Path:
    """Another checkout of the project elsewhere on disk (outside the repository, home and
    /tmp): its ``solutions/`` holds the references.  Under /run (a tmpfs, gone at reboot)."""
    decoy = decoy_path(marker)
    for p in manifest.problems().values():
        target = decoy / "solutions" / p.solution_file.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(reference(p), "utf-8")
    return decoy


def skeleton_body(p: manifest.Problem) -> str:
    future, rest = _split_future(skeleton(p))
    return rest


def _indent(text: str) -> str:
    return "\n".join(("    " + line) if line.strip() else "" for line in text.splitlines()) \
        or "    pass"


#: Hostile kinds that need the per-slot uid to be graded as expected (not root: skipped).
NEEDS_PRIVILEGE = {"kill_parent", "read_solutions", "read_elsewhere", "read_other_stages",
                   "keyring_note"}

# The second battery (``attacks``): each kind takes the problem and the context like the rest.
HOSTILE.update({kind: (lambda make: lambda p, ctx: make(p))(make)
                for kind, make in attacks.ATTACKS.items()})
HELPERS.update(attacks.HELPERS)


def kinds_for(problems: list[manifest.Problem], isolation: str,
              wanted: list[str] | None = None,
              selftest: bool = False) -> list[tuple[str, manifest.Problem]]:
    """Each hostile kind with the problem it aims at: its own (``attacks.AIM``) if that one is
    in the battery, else the next in turn; kinds that need root are left out without it, and
    the full battery's own (``attacks.MEASURE_ONLY``) from the selftest's."""
    by_id = {p.id: p for p in problems}
    out = []
    for kind in (wanted if wanted is not None else list(HOSTILE)):
        if isolation == "none" and kind in NEEDS_PRIVILEGE \
                or selftest and kind in attacks.MEASURE_ONLY:
            continue
        aim = attacks.AIM.get(kind)
        if aim is not None and aim not in by_id:
            continue
        out.append((kind, by_id[aim] if aim else problems[len(out) % len(problems)]))
    return out


# -- the battery ----------------------------------------------------------------------------

@dataclass
class Context:
    marker: str
    isolation: str
    #: Files a run must not be able to read (another checkout's solutions, a classmate's
    #: file, the gradebook), made by ``build``.
    elsewhere: tuple[str, ...] = ()


@dataclass
class Battery:
    root: Path
    expected: dict[str, dict[str, dict]] = field(default_factory=dict)
    marker: str = ""

    def save(self) -> None:
        (self.root / "expected.json").write_text(json.dumps(
            {"marker": self.marker, "expected": self.expected}, indent=1), "utf-8")

    @classmethod
    def load(cls, root: Path) -> "Battery":
        doc = json.loads((root / "expected.json").read_text("utf-8"))
        return cls(root, doc["expected"], doc["marker"])

    @property
    def submissions(self) -> Path:
        return self.root / "submissions"


def _write(folder: Path, p: manifest.Problem, source: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / p.learner_file.name).write_text(source, "utf-8")


def _full(p: manifest.Problem) -> dict:
    return {"status": "ok", "score": p.points}


def _hostile_expectation(kind: str, p: manifest.Problem) -> dict:
    zero_error = lambda *reasons: {"status": "error", "score": 0, "reason": list(reasons)}  # noqa
    return {
        "syntax_error": zero_error("syntax error"),
        # the same sentence as the learner's check, within seconds, not the import limit
        "import_loop": zero_error("did not finish: it is spinning at"),
        "exit_at_import": zero_error("incomplete"),
        "exit_125_at_import": zero_error("incomplete"),
        "sys_exit_at_import": zero_error("import error", "SystemExit"),
        "exit_in_second_test": {"status": "error", "reason": ["incomplete"],
                                "score_rule": "first_test_only"},
        "sys_exit_in_second_test": {"status": "ok", "score_rule": "all_but_second_test"},
        "deadlock": zero_error("timed out"),
        "fake_passed_output": {"status": "ok", "score": 0},
        "forge_into_fds": zero_error("tampered", "forged"),
        "forge_via_harness": zero_error("tampered"),
        "rewrite_outcome": zero_error("tampered"),
        "rewrite_outcome_skipped": zero_error("tampered"),
        # forking at import: the process limit stops it, or on a loaded box the import watch
        # sees it spinning first (a second of forks); a 0 and the fork line either way
        "fork_bomb": zero_error("stopped by the process limit",
                                "did not finish: it is spinning at"),
        "memory_bomb": zero_error("stopped by the memory limit"),
        "huge_output": {**_full(p), "note": "printed"},
        "kill_parent": _full(p),
        "read_solutions": {"status": "ok", "score": 0},
        "orphan": _full(p),
        "silence_report": zero_error("incomplete", "crashed"),
        "lingering_thread": {**_full(p), "note": "did not exit"},
        "sandbox_probe": _full(p),
        "fake_clock": zero_error("tampered"),
        "patch_pytest_reports": zero_error("tampered"),
        "patch_json": zero_error("tampered"),
        "blind_the_guard": zero_error("tampered"),
        "register_plugin": zero_error("tampered", "import error"),
        "replace_tests": zero_error("tampered"),
        "hide_descriptors": zero_error("tampered"),
        "raise_thresholds": zero_error("tampered"),
        # Once the limit of an in-process report (the key two attribute hops away): now the
        # reporter holds no key, no counter and no snapshot, and a record sent from the
        # submission's code is refused.  The first also needs gc.get_objects (refused).
        "forge_with_the_reporter": zero_error("import error", "tampered"),
        "forge_via_reporter_fields": zero_error("import error", "tampered"),
        "read_elsewhere": {"status": "ok", "score": 0},
        "spoof_own_failure": zero_error("incomplete"),
        "leave_a_note": _full(p),
        "helper_before_guard": {"status": "ok", "score": 0},
        "settrace_condition": zero_error("tampered"),
        "ctypes_constant": zero_error("tampered"),
        "gc_objects": zero_error("tampered"),
        "frames_and_code": zero_error("tampered"),
    }.get(kind) or attacks.expect(kind, p)


def build(root: Path, problems: list[manifest.Problem], *, count: int | None = None,
          hostile: list[str] | None = None, isolation: str = "namespaces",
          selftest: bool = False) -> Battery:
    """Write the submissions under ``root/submissions`` and return their expectations.

    Fixed part: every problem's reference, skeleton, alternates, a nested layout, a lone
    file, an empty folder, and each hostile kind (aimed at the problems in turn).  The rest,
    up to ``count`` submissions, mixes one pitfall or wrong variant per problem."""
    battery = Battery(root, marker=f"workbook-orphan-{uuid.uuid4().hex[:12]}")
    wanted = hostile if hostile is not None else list(HOSTILE)
    decoy = decoy_checkout(battery.marker) if "read_elsewhere" in wanted \
        else Path("/nonexistent")
    ctx = Context(battery.marker, isolation, elsewhere=(
        str(decoy / "solutions" / f"{problems[0].module}.py"),
        str(root / "submissions" / "reference" / problems[0].learner_file.name),
        str(root / "gradebook.json"), str(root / "gradebook.csv")))
    subs = battery.submissions
    subs.mkdir(parents=True)
    exp = battery.expected

    def add(name: str, per_problem: dict[str, dict]) -> None:
        exp[name] = {p.id: per_problem.get(p.id, {"status": "not_submitted", "score": 0})
                     for p in problems}

    for p in problems:
        _write(subs / "reference", p, reference(p))
        _write(subs / "skeleton", p, skeleton(p))
        _write(subs / "nested" / "mine", p, reference(p))
    add("reference", {p.id: _full(p) for p in problems})
    add("skeleton", {p.id: {"status": "ok", "score": 0} for p in problems})
    add("nested", {p.id: _full(p) for p in problems})
    (subs / "empty").mkdir()
    add("empty", {})
    first = problems[0]
    (subs / f"dave_{first.module}.py").write_text(reference(first), "utf-8")
    add("dave", {first.id: _full(first)})
    fake = FAKE_NAME.format(first=first)
    _write(subs / fake, first, skeleton(first))
    add(fake, {first.id: {"status": "ok", "score": 0}})
    link = subs / "mallory-link"
    link.mkdir()
    (link / first.learner_file.name).symlink_to(first.solution_file)
    add("mallory-link", {first.id: {"status": "error", "score": 0,
                                    "reason": ["symbolic link"]}})
    for p in problems:
        for stem, path in variants.alternates(p):
            name = f"alt-{p.id}-{stem}"
            _write(subs / name, p, self_contained(path))
            add(name, {p.id: _full(p)})
    for kind, p in kinds_for(problems, isolation, hostile, selftest):
        name = f"hostile-{kind.replace('_', '-')}"
        _write(subs / name, p, HOSTILE[kind](p, ctx))
        for rel, source in HELPERS.get(kind, {}).items():
            (subs / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (subs / name / rel).write_text(source, "utf-8")
        add(name, {p.id: _hostile_expectation(kind, p)})
    if hostile is None and not selftest:  # names no file system should make trouble of
        for name in attacks.NAMES.values():
            _write(subs / name, first, skeleton(first))
            add(name, {first.id: {"status": "ok", "score": 0}})
    mixed = max(0, (count or 0) - len(exp))
    for k in range(mixed):
        name = f"mixed-{k + 1:02d}"
        per = {}
        for j, p in enumerate(problems):
            pool = [(w, "pitfall") for w in p.pitfalls] + [(w, "wrong") for w in p.wrongs]
            if not pool:
                continue
            pit, sort = pool[(k + j) % len(pool)]
            made = variants.materialize(variants.get(p, sort, pit.name))
            _write(subs / name, p, self_contained(made))
            lost = sum(p.checkpoint(c).points for c in pit.fails)
            per[p.id] = {"status": "ok", "fails": list(pit.fails), "score_max": p.points - lost,
                         sort: pit.name}
        add(name, per)
    battery.save()
    return battery


# -- checking -------------------------------------------------------------------------------

def collection_order(p: manifest.Problem) -> list[tuple[str, str]]:
    """The acceptance set's tests in run order with their checkpoints, collected here
    directly with pytest (independently of the grader and its sandbox)."""
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / f"{p.module}.py"
        empty.write_text("", "utf-8")
        report = Path(tmp) / "report.jsonl"
        out = subprocess.run([sys.executable, "-m", "pytest",
                              *run.pytest_args(p, empty, report), "--collect-only"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        nodeids = [ln.strip() for ln in out.stdout.splitlines() if "::" in ln]
        tests = next(json.loads(ln)["tests"] for ln in report.read_text().splitlines()
                     if json.loads(ln).get("event") == "collected")
    checkpoint_of = {n: cp for cp, ids in tests.items() for n in ids}
    return [(n, checkpoint_of[n]) for n in nodeids]


def _rule_score(rule: str, p: manifest.Problem, order: list[tuple[str, str]]) -> int:
    count = {}
    for _, cp in order:
        count[cp] = count.get(cp, 0) + 1
    if rule == "first_test_only":  # only test 1 reported: its checkpoint if that is all of it
        cp = order[0][1]
        return p.checkpoint(cp).points if count[cp] == 1 else 0
    if rule == "all_but_second_test":
        return p.points - p.checkpoint(order[1][1]).points
    raise ValueError(rule)


def mismatches(doc: dict, battery: Battery, problems: list[manifest.Problem]) -> list[str]:
    """Every way the gradebook ``doc`` differs from the battery's expectations."""
    found = []
    orders: dict[str, list] = {}
    by_id = {p.id: p for p in problems}
    for name, per_problem in sorted(battery.expected.items()):
        row = doc["rows"].get(name)
        if row is None:
            found.append(f"{name}: no row")
            continue
        for pid, want in per_problem.items():
            got = row["problems"].get(pid)
            where = f"{name}/{pid}"
            if got is None:
                found.append(f"{where}: not graded")
                continue
            if got["status"] != want["status"]:
                found.append(f"{where}: status {got['status']} ({got.get('reason')}), "
                             f"expected {want['status']}")
            reasons = want.get("reason")
            if reasons and not any(r in (got.get("reason") or "") for r in reasons):
                found.append(f"{where}: reason {got.get('reason')!r}, expected one of {reasons}")
            score = want.get("score")
            if "score_rule" in want:
                p = by_id[pid]
                if pid not in orders:
                    orders[pid] = collection_order(p)
                score = _rule_score(want["score_rule"], p, orders[pid])
            if score is not None and got["score"] != score:
                found.append(f"{where}: score {got['score']}, expected {score} "
                             f"({got.get('reason')})")
            if "score_max" in want and got["score"] > want["score_max"]:
                found.append(f"{where}: score {got['score']} above {want['score_max']}")
            passed = {c["id"] for c in got["checkpoints"] if c["status"] == "passed"}
            for cp in want.get("fails", []):
                if cp in passed:
                    found.append(f"{where}: {cp} passed ({want.get('pitfall')} must fail it)")
            if want.get("note") and not any(want["note"] in n for n in got.get("notes", [])):
                found.append(f"{where}: no note about {want['note']!r}: {got.get('notes')}")
    return found


#: Run as a uid: how many keys its user and user-session keyrings hold (KEYCTL_READ gives 4
#: bytes a key; the keyrings themselves stay once made, the session one linking the user's).
_KEYS_HELD = """
import ctypes, os, sys
uid = int(sys.argv[1])
os.setgid(uid)
os.setuid(uid)
libc = ctypes.CDLL(None, use_errno=True)
held = [max(0, libc.syscall(250, 11, ring, None, 0)) // 4 for ring in (-4, -5)]
print(held[0] + max(0, held[1] - 1))
"""


def notes_left(marker: str, uids: list[int]) -> list[str]:
    """What ``leave_a_note`` and ``keyring_note`` left where another run could find it:
    files named with the marker in the shared lock and memory folders, System V IPC objects
    the sandbox uids made, keys in the sandbox uids' kernel keyrings."""
    found = [str(path) for folder in ("/run/lock", "/var/lock", "/dev/shm")
             for path in Path(folder).glob(f"{marker}-note")]
    for uid in uids if os.geteuid() == 0 else []:
        keys = subprocess.run(  # as that uid: how many keys its keyrings hold
            [sys.executable, "-I", "-S", "-c", _KEYS_HELD, str(uid)], capture_output=True,
            text=True, timeout=30).stdout.strip()
        if keys not in ("", "0"):
            found.append(f"{keys} key(s) in the kernel keyrings of uid {uid}")
    for kind in ("-q", "-m"):
        try:
            out = subprocess.run(["ipcs", kind, "-c"], capture_output=True, text=True,
                                 timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in out.splitlines():
            words = line.split()
            if words[:1] and words[0].isdigit() and any(str(uid) in words[1:5] for uid in uids):
                found.append(f"ipcs {kind}: {line.strip()}")
    return found


def marker_processes(marker: str) -> list[int]:
    """Processes whose command line carries ``marker`` (the orphan hostile's sleeper)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--problem", nargs="+")
    args = parser.parse_args(argv)
    problems = [manifest.get(p) for p in args.problem] if args.problem \
        else list(manifest.problems().values())
    isolation = "none" if os.geteuid() != 0 else "namespaces"
    battery = build(args.out, problems, count=args.count, isolation=isolation)
    print(f"{len(battery.expected)} submissions in {battery.submissions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
