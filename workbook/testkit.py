"""Helpers shared by every acceptance set.

Rules the helpers enforce: every wait is bounded, helper threads are daemons, and a
failure carries a diagnosis (and, where it fits, the name of the pitfall it looks like).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import functools
import gc
import inspect
import os
import signal
import sys
import sysconfig
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn

#: Seconds that separate "hung" from "slow" on a busy 2-core machine.
BOUND = float(os.environ.get("WORKBOOK_BOUND", "5"))


class Failure(AssertionError):
    """A checkpoint failure with a diagnosis; ``pitfall`` names the mistake it looks like."""

    def __init__(self, message: str, pitfall: str | None = None) -> None:
        super().__init__(message)
        self.pitfall = pitfall


class Hung(Exception):
    """Injected into a thread that is still running a learner call after its bound."""


def fail(message: str, *, pitfall: str | None = None) -> NoReturn:
    raise Failure(message, pitfall)


def check(condition: object, message: str, *, pitfall: str | None = None) -> None:
    if not condition:
        raise Failure(message, pitfall)


# -- notes: figures a test wants shown next to its checkpoint (e.g. a measured latency) --

_note_sink: Callable[[str], None] | None = None  # set by the pytest plugin


def note(text: str) -> None:
    """Show ``text`` under the current checkpoint in the report (no effect outside a check)."""
    if _note_sink is not None:
        _note_sink(text)


# -- threads ------------------------------------------------------------------------------

class DaemonThread(threading.Thread):
    """A daemon thread that keeps its target's result or exception for ``join``."""

    def __init__(self, target: Callable[..., Any], *args: Any, name: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(name=name, daemon=True)
        self._call = (target, args, kwargs)
        self.result: Any = None
        self.error: BaseException | None = None
        #: When it began to run: no call it makes can have started earlier (so a select()
        #: with a relative timeout cannot time out before ``began + timeout``).
        self.began: float | None = None

    def run(self) -> None:
        self.began = time.monotonic()
        fn, args, kwargs = self._call
        try:
            self.result = fn(*args, **kwargs)
        except BaseException as exc:  # handed to join()
            self.error = exc


def start_daemon(target: Callable[..., Any], *args: Any, name: str | None = None,
                 **kwargs: Any) -> DaemonThread:
    thread = DaemonThread(target, *args, name=name, **kwargs)
    thread.start()
    return thread


def join(thread: DaemonThread, timeout: float = BOUND, *, what: str,
         pitfall: str | None = None) -> Any:
    """Wait for ``thread``; fail if it is still running after ``timeout`` seconds, or at once
    when the stuck detector sees that it never can finish.

    Re-raises what the thread raised (so a ``NotImplementedError`` reaches the harness)."""
    found = _wait(lambda: not thread.is_alive(), thread.join, timeout, what=what)
    if isinstance(found, Verdict):
        verdicts.append(found)
        raise Stuck(_stuck_message(what, found), found, pitfall)
    if found is TIMED_OUT:
        fail(_timeout_message(f"{what} did not finish within {timeout:g} s "
                              "(blocked or deadlocked?)"), pitfall=pitfall)
    if thread.error is not None:
        raise thread.error
    return thread.result


def finished(thread: threading.Thread, timeout: float = BOUND, *, what: str,
             record: bool = True) -> bool:
    """True once ``thread`` has ended; False after ``timeout`` seconds or once it is seen
    stuck (the verdict is kept for the report unless ``record`` is false: a teardown)."""
    found = _wait(lambda: not thread.is_alive(), thread.join, timeout, what=what)
    if isinstance(found, Verdict) and record:
        verdicts.append(found)
    return found is None


def wait_until(predicate: Callable[[], object], timeout: float = BOUND, *, what: str,
               pitfall: str | None = None, rest_is_success: bool = False) -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds, or at once when
    every thread is blocked and nothing can make it true.  With ``rest_is_success`` (the
    predicate asks for threads to come to rest), that stuck state ends the wait instead."""
    found = _wait(lambda: bool(predicate()), lambda t: time.sleep(min(t, 0.001)), timeout,
                  what=f"waiting until {what}")
    if isinstance(found, Verdict) and rest_is_success:
        return
    if isinstance(found, Verdict):
        verdicts.append(found)
        raise Stuck(_stuck_message(f"waiting until {what}", found), found, pitfall)
    if found is TIMED_OUT:
        fail(_timeout_message(f"gave up after {timeout:g} s waiting until {what}"),
             pitfall=pitfall)


def interrupt_thread(thread: threading.Thread, exc_type: type[BaseException] = Hung) -> None:
    """Raise ``exc_type`` inside ``thread`` at its next Python instruction.

    Used to stop learner code that spins without yielding, so one hung checkpoint does not
    slow down the rest of the run.  A thread asleep in the kernel with no timeout is left
    alone: it runs no Python code, so the exception would stay pending forever -- and on
    3.10 to 3.12 a pending one keeps every other thread checking for it (on 3.11 a traced
    call then never gets past its first instruction).  See ``release_interrupts``."""
    for _ in range(4):  # a spinning thread is seen running Python at once, or nearly
        if thread.ident is None or not thread.is_alive():
            return
        if not _asleep_untimed(thread):
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                       ctypes.py_object(exc_type))
            _interrupted[thread.ident] = thread
            return
        time.sleep(0.005)


def _asleep_untimed(thread: threading.Thread) -> bool:
    """Asleep in the kernel in a call with no timeout: it runs no Python code until someone
    else wakes it."""
    call = _syscall(thread.native_id) if thread.native_id is not None else None
    return call is not None and call[1] is False and kernel_state(thread) == "S"


#: Threads given an exception by ``interrupt_thread``, by ident.
_interrupted: dict[int, threading.Thread] = {}


class _Released(BaseException):
    """Raised in the calling thread only to clear the interpreter's pending-exception flag."""


def release_interrupts() -> None:
    """Withdraw the exceptions still pending in interrupted threads that fell asleep for good
    (called after each test).  Clearing one with NULL leaves the interpreter's flag set until
    some thread takes a pending exception, so this thread takes one of its own at once."""
    stale = False
    for ident, thread in list(_interrupted.items()):
        if not thread.is_alive():
            del _interrupted[ident]
            continue
        if _asleep_untimed(thread):
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
            del _interrupted[ident]
            stale = True
    if stale:
        try:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()),
                                                       ctypes.py_object(_Released))
            for _ in range(100):  # the flag is checked at the next instruction or jump
                pass
        except _Released:
            pass


def asleep_in_selector(thread: threading.Thread) -> bool:
    """True while ``thread``'s innermost Python frame is a ``selectors`` ``select()``: it is
    blocked in the kernel waiting for readiness (the state an event loop sleeps in)."""
    frame = current_frames().get(thread.ident) if thread.ident is not None else None
    return (frame is not None and frame.f_code.co_name == "select"
            and frame.f_code.co_filename.endswith("selectors.py"))


# -- behaviour of a thread, seen from outside: CPU time and kernel state -------------------

def thread_cpu_seconds(thread: threading.Thread) -> float | None:
    """CPU seconds ``thread`` has used so far (its own per-thread CPU clock), or None once it
    has ended.  Read through the kernel thread id, so a finished thread is never touched."""
    tid = getattr(thread, "native_id", None)
    if tid is None or not thread.is_alive():
        return None
    # Linux encodes a thread's CPU clock as ~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED
    # (what glibc's pthread_getcpuclockid returns); an ended tid gives EINVAL, not a crash.
    try:
        return time.clock_gettime((~tid << 3) | 6)
    except (OSError, OverflowError, AttributeError):
        pass
    try:  # other kernels: /proc's scheduler statistics (nanoseconds on the CPU)
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def kernel_state(thread: threading.Thread) -> str | None:
    """The kernel's one-letter state of ``thread`` ('R' running, 'S' sleeping, ...), or None
    where /proc is not available or the thread has ended."""
    tid = getattr(thread, "native_id", None)
    if tid is None:
        return None
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


#: CPU a parked thread may use in one observation window (wakeup bookkeeping, a spurious
#: wakeup or two).  A spinning Python thread uses far more, even sharing two busy cores.
PARKED_CPU = 0.002


def cpu_used(thread: threading.Thread, window: float) -> float | None:
    """CPU seconds ``thread`` uses during the next ``window`` seconds of wall time; None if it
    ended meanwhile."""
    before = thread_cpu_seconds(thread)
    time.sleep(window)  # an observation window, not a proof of state: CPU use is the proof
    after = thread_cpu_seconds(thread)
    if before is None or after is None:
        return None
    return after - before


def parked(thread: threading.Thread, window: float = 0.05) -> bool:
    """True when ``thread`` is alive and blocked: it uses next to no CPU over ``window``."""
    used = cpu_used(thread, window)
    return used is not None and used <= PARKED_CPU


# -- the stuck detector: deciding "nothing can move" from state, not from waiting ----------
#
# Every bounded wait of the harness (join, wait_until, wait_event, LoopThread.wait, ...) runs
# ``_wait``: between short blocks it looks at the other threads of the process.  The check is
# *stuck* when, over several consecutive looks, every thread that could make progress is
# parked -- asleep in the kernel (state S) in a wait with no timeout, its CPU clock standing
# still, the same frame each time -- and nothing pending could wake one: no timed wait, no
# ready callback or learner timer of a sleeping asyncio loop, no readable fd of a sleeping
# selector, no child process, no other harness wait that ends sooner.  Anything not
# understood counts as "could move": the bound then decides, as before.  Frames only explain.

#: Seconds between two looks, and how long (and how many looks) the state must stand still.
WINDOW = 0.05
CONFIRM = 0.1
CONFIRM_LOOKS = 3
#: Seconds between the looks that confirm a lock cycle every thread is in.
CYCLE_LOOK = 0.01
#: Seconds a lock must stay held, by the same learner frame, while parked threads wait to
#: acquire it and nothing else moves, before the check is called stuck (see ``_hogging``).
HOLD_CONFIRM = 1.0
#: CPU seconds a parked thread may show between two looks (none, in practice).
STILL_CPU = 1e-4

_learner_files: set[str] = set()
_harness_dirs: tuple[str, ...] = (os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "tests") + os.sep, os.path.dirname(os.path.abspath(__file__))
    + os.sep)
_watchers: dict[int, float] = {}  # thread ident -> deadline of the bounded wait it is in
_watchers_lock = threading.Lock()  # guards _watchers
_excluded: set[int] = set()  # idents of harness threads that never count (the watchdog)
_background: set[int] = set()  # idents alive when the current check began (not its threads)
_guards: "set[_Guard]" = set()  # pending asyncio bounds set by ``bounded``
_guards_lock = threading.Lock()  # guards _guards
_hooks: list[Callable[["Snapshot"], list[str]]] = []
#: Stuck verdicts of the current check (read by the plugin: diagnosis and grouping).
verdicts: list["Verdict"] = []


def set_learner_file(path: str) -> None:
    """Tell the detector which file is the learner's (frames there are 'learner lines')."""
    _learner_files.add(os.path.realpath(path))


def begin_check() -> None:
    """Called by the plugin as a check starts: threads alive now belong to earlier checks."""
    verdicts.clear()
    main = threading.main_thread().ident
    _background.clear()
    _background.update(t.ident for t in threading.enumerate()
                       if t.ident is not None and t.ident != main)
    with _guards_lock:
        _guards.clear()


def add_stuck_hook(hook: Callable[["Snapshot"], list[str]]) -> None:
    """A problem's tests may add lines to a stuck diagnosis (e.g. "1 item is queued")."""
    if hook not in _hooks:
        _hooks.append(hook)


# x86_64 and aarch64 system call numbers of the blocking calls we understand.
_SYSCALLS = {
    "x86_64": {0: "read", 1: "write", 7: "poll", 23: "select", 34: "pause", 35: "nanosleep",
               43: "accept", 44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg",
               61: "wait4", 130: "rt_sigsuspend", 202: "futex", 230: "clock_nanosleep",
               232: "epoll_wait", 247: "waitid", 270: "pselect6", 271: "ppoll",
               281: "epoll_pwait", 288: "accept4", 441: "epoll_pwait2"},
    "aarch64": {22: "epoll_pwait", 63: "read", 64: "write", 72: "pselect6", 73: "ppoll",
                95: "waitid", 98: "futex", 101: "nanosleep", 115: "clock_nanosleep",
                133: "rt_sigsuspend", 202: "accept", 206: "sendto", 207: "recvfrom",
                211: "sendmsg", 212: "recvmsg", 242: "accept4", 260: "wait4",
                441: "epoll_pwait2"},
}.get(os.uname().machine if hasattr(os, "uname") else "", {})
_INFINITE_MS = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)
_SELECT_CALLS = ("epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select",
                 "pselect6")


def _syscall(tid: int) -> tuple[str, bool | None, float | None] | None:
    """(name, timed, ends) of the system call ``tid`` is blocked in: timed None when unknown;
    ends the ``time.monotonic()`` at which a timed wait gives up, when the kernel was given
    an absolute deadline (None otherwise).  None when the thread is running or nothing can
    be read."""
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return None
    if not fields or not fields[0].isdigit():
        return None  # "running", or "-1 ..." (not in a system call)
    nr = int(fields[0])
    args = [int(a, 16) for a in fields[1:7]]
    name = _SYSCALLS.get(nr)
    if name is None or len(args) < 6:
        return (f"syscall {nr}", None, None)
    if name == "futex":
        cmd = args[1] & 0x7F
        if cmd in (0, 9, 6, 11, 13):  # WAIT, WAIT_BITSET, LOCK_PI, WAIT_REQUEUE_PI, LOCK_PI2
            ends = None
            if args[3] and cmd == 9:  # WAIT_BITSET takes an absolute time (what CPython's
                # timed lock, Condition, Event and queue waits use, 3.10 to 3.13)
                ends = _absolute(args[3], realtime=bool(args[1] & 0x100))
            return (name, args[3] != 0, ends)
        return (name, None, None)
    if name in ("epoll_wait", "epoll_pwait"):
        return (name, args[3] not in _INFINITE_MS, None)
    if name == "poll":
        return (name, args[2] not in _INFINITE_MS, None)
    if name in ("ppoll",):
        return (name, args[2] != 0, None)
    if name in ("epoll_pwait2", "select", "pselect6"):
        return (name, args[3 if name == "epoll_pwait2" else 4] != 0, None)
    if name == "clock_nanosleep":  # time.sleep from 3.11: TIMER_ABSTIME on CLOCK_MONOTONIC
        absolute = args[1] & 1 and args[0] in (0, 1)
        return (name, True, _absolute(args[2], realtime=args[0] == 0) if absolute else None)
    if name == "nanosleep":
        return (name, True, None)
    return (name, False, None)  # read, write, send, recv, accept, wait4, pause: only someone
    #                             else (a reader, a writer, a peer) can end these


def _absolute(address: int, *, realtime: bool) -> float | None:
    """The absolute ``struct timespec`` at ``address`` in this process, as a monotonic time.
    Read through /proc/self/mem, which answers an error (never a crash) for a stale address."""
    try:
        fd = os.open("/proc/self/mem", os.O_RDONLY)
        try:
            raw = os.pread(fd, 16, address)
        finally:
            os.close(fd)
    except (OSError, OverflowError, ValueError):
        return None
    if len(raw) != 16:
        return None
    seconds = int.from_bytes(raw[:8], sys.byteorder, signed=True)
    nanos = int.from_bytes(raw[8:], sys.byteorder, signed=True)
    if not 0 <= nanos < 1_000_000_000:
        return None  # the thread returned and the memory was reused
    at = seconds + nanos / 1e9
    return at - time.time() + time.monotonic() if realtime else at


def _children_alive() -> bool:
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                if f.read().strip():
                    return True
    except OSError:
        return True  # cannot tell: something outside might wake us
    return False


# -- what a thread is doing, read from its frames ------------------------------------------

def _is_learner(filename: str) -> bool:
    return bool(_learner_files) and os.path.realpath(filename) in _learner_files


def _is_harness(filename: str) -> bool:
    return os.path.realpath(filename).startswith(_harness_dirs)


#: Python's own library and the installed packages: never a submission's code.
_LIBRARY = tuple({sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib",
                                                          "platlib")})


@functools.lru_cache(maxsize=None)
def is_submission_code(filename: str) -> bool:
    """Whether code from ``filename`` is the submission's own (its file or helper modules):
    not this harness or its tests, not Python's library or an installed package, not code
    without a file (``<string>``, frozen modules)."""
    return not (filename.startswith("<") or filename.startswith(_LIBRARY)
                or _is_harness(filename))


def _stack(frame) -> list:
    """Frames innermost first."""
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


_stacks_lock = threading.Lock()  # one walk at a time: the switch interval is process-wide


def run_hooked(fn: Callable[..., Any], *args: Any, trace: Any = None,
               profile: Any = None) -> Any:
    """``fn(*args)`` with a ``sys.settrace`` or ``sys.setprofile`` hook installed in the calling
    thread; the hook it had is put back after."""
    install, previous = ((sys.settrace, sys.gettrace()) if trace is not None
                         else (sys.setprofile, sys.getprofile()))
    install(trace if trace is not None else profile)
    try:
        return fn(*args)
    finally:
        install(previous)


class _NoCollection:
    """The garbage collector held off for a block.  On 3.11 an allocation may start a
    collection, and a collection may run finalizers that let go of the GIL (a socket's
    ``close()`` does) or take the runtime's thread-list lock.  Inside ``sys._current_frames``
    (which holds that lock) this deadlocks (CPython gh-106883; 3.11.7 has it); inside a
    frame walk it lets the thread being walked move on and free the frames still to be read
    (a segfault).  Both were seen here, in runs where threads and sockets end by the dozen."""

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()


def current_frames() -> dict[int, Any]:
    """``sys._current_frames()`` with no collection inside it (see ``_NoCollection``)."""
    with _stacks_lock, _NoCollection():  # the lock: no other block turns collection back on
        return sys._current_frames()


def stacks(only: "set[int] | None" = None) -> dict[int, list]:
    """Every live thread's frames, innermost first, walked in one go while no other thread
    can run Python code: the switch interval is raised and nothing in the walk lets go of
    the GIL (no collection, see ``_NoCollection``).  A thread that has left ``threading``'s
    table of active threads is tearing itself down and is left out."""
    with _stacks_lock:
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1.0)
        try:
            with _NoCollection():
                frames = sys._current_frames()
                active = set(threading._active)  # noqa: SLF001 - read with the frames
                return {ident: _stack(frame) for ident, frame in frames.items()
                        if ident in active and (only is None or ident in only)}
        finally:
            sys.setswitchinterval(interval)


def _qualname(frame) -> str:
    code = frame.f_code
    name = getattr(code, "co_qualname", None)
    if name is None:
        self_obj = frame.f_locals.get("self")
        name = f"{type(self_obj).__name__}.{code.co_name}" if self_obj is not None \
            else code.co_name
    return name


def _shown(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def _source_line(filename: str, lineno: int) -> str:
    import linecache
    return linecache.getline(filename, lineno).strip()


def _code_only(filename: str, lineno: int) -> str:
    """A source line without its trailing comment (for quoting)."""
    text = _source_line(filename, lineno)
    if "#" in text and text.count("'") % 2 == 0 and text.count('"') % 2 == 0:
        text = text.split("#", 1)[0].rstrip()
    return text


def _site(frame) -> str:
    return f"{_shown(frame.f_code.co_filename)}:{frame.f_lineno}"


_ast_cache: dict[str, Any] = {}
#: Serialises the detector's own ``ast.parse`` calls.  CPython 3.11 keeps the AST
#: constructor's recursion depth per interpreter, not per thread (gh-106905), so two parses
#: at once can raise ``SystemError: AST constructor recursion depth mismatch``.
_parse_lock = threading.Lock()


def _parse(text: str, mode: str = "exec"):
    """``ast.parse`` that never lets CPython's cross-thread depth bookkeeping (another thread
    parsing at the same moment, e.g. pytest formatting a traceback) fail a check: it retries,
    then reports the text as unreadable (``SyntaxError``), and the detector explains less."""
    import ast
    for _ in range(3):
        with _parse_lock:
            try:
                return ast.parse(text, mode=mode)
            except SystemError:
                continue
    raise SyntaxError("could not be parsed just now")


def _with_blocks(filename: str) -> list:
    """Every ``with`` statement of a file: (first line, last line, [item source], body start)."""
    if filename in _ast_cache:
        return _ast_cache[filename]
    import ast
    blocks = []
    try:
        with open(filename, encoding="utf-8") as f:
            tree = _parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.With, ast.AsyncWith)) and node.body:
                blocks.append((node.lineno, node.end_lineno or node.lineno,
                               [item.context_expr for item in node.items],
                               node.body[0].lineno))
    except (OSError, SyntaxError, ValueError):
        pass
    _ast_cache[filename] = blocks
    return blocks


def _evaluate(node, frame):
    """The object a simple expression (names and attributes only) stands for in ``frame``."""
    import ast
    if isinstance(node, ast.Name):
        if node.id in frame.f_locals:
            return frame.f_locals[node.id]
        return frame.f_globals.get(node.id, _MISSING)
    if isinstance(node, ast.Attribute):
        base = _evaluate(node.value, frame)
        if base is _MISSING:
            return _MISSING
        # Never run learner code from here: a property that takes the learner's lock would
        # block the detector itself (and the bounded wait it runs in) for good.
        try:
            value = inspect.getattr_static(base, node.attr)
        except AttributeError:
            return _MISSING
        if isinstance(value, types.MemberDescriptorType):  # a __slots__ member: read in C
            try:
                return value.__get__(base, type(base))
            except AttributeError:
                return _MISSING
        if hasattr(type(value), "__get__") and not isinstance(value, type):
            return _MISSING  # a property or another descriptor: only running it would tell
        return value
    return _MISSING


_MISSING = object()


def _lock_of(obj):
    """The lock that really is taken when ``obj`` is entered (a Condition's own lock)."""
    inner = getattr(obj, "_lock", None) if isinstance(obj, threading.Condition) else None
    return inner if inner is not None else obj


def _held(frames: list, *, with_only: bool = False) -> list[tuple[Any, str, Any]]:
    """Locks this thread holds through ``with`` blocks of learner code (and, unless
    ``with_only``, through ``X.acquire()`` calls not yet released): (lock, text, frame)."""
    import ast
    out = []
    released = [_lock_of(f.f_locals.get("self")) for f in frames
                if f.f_code is threading.Condition.wait.__code__]  # wait() let go of these
    for frame in frames:
        if not _is_learner(frame.f_code.co_filename):
            continue
        line = frame.f_lineno
        for first, last, items, body in _with_blocks(frame.f_code.co_filename):
            if body <= line <= last:  # inside the block, past the with line itself
                for expr in items:
                    obj = _evaluate(expr, frame)
                    if obj is not _MISSING and not any(_lock_of(obj) is r for r in released):
                        out.append((_lock_of(obj), ast.unparse(expr), frame, first))
        if not with_only:
            out += _acquired(frame, released)
    return out


def _acquired(frame, released: list) -> list:
    """Locks taken with ``X.acquire()`` earlier in this frame's function and not yet
    released by ``X.release()`` (read from the source lines above the current one)."""
    import ast
    import linecache
    import re
    net: dict[str, tuple[int, int]] = {}
    filename = frame.f_code.co_filename
    for lineno in range(frame.f_code.co_firstlineno, frame.f_lineno):
        text = linecache.getline(filename, lineno)
        for expr, verb in re.findall(r"([A-Za-z_][\w.]*)\.(acquire|release)\(\)", text):
            count, at = net.get(expr, (0, 0))
            net[expr] = (count + 1, lineno) if verb == "acquire" else (count - 1, at)
    out = []
    for expr, (count, at) in net.items():
        if count <= 0:
            continue
        try:
            obj = _evaluate(_parse(expr, mode="eval").body, frame)
        except SyntaxError:
            continue
        if obj is not _MISSING and not any(_lock_of(obj) is r for r in released):
            out.append((_lock_of(obj), expr, frame, at))
    return out


def _waited_object(frames: list):
    """(object, its source text) the innermost learner line waits on, when it can be read."""
    import ast
    inner = next((f for f in frames if _is_learner(f.f_code.co_filename)), None)
    if inner is None:
        return _MISSING, None
    # Innermost non-learner frame that is a method of a sync primitive: its ``self``.
    for frame in frames:
        if frame is inner:
            break
        obj = frame.f_locals.get("self")
        if isinstance(obj, (threading.Condition, threading.Semaphore, threading.Event,
                            threading.Barrier, threading.Thread)):
            text = _expr_on_line(inner)
            return obj, text
    for first, last, items, body in _with_blocks(inner.f_code.co_filename):
        if first == inner.f_lineno:
            for expr in items:
                obj = _evaluate(expr, inner)
                if obj is not _MISSING:
                    return obj, ast.unparse(expr)
    text = _expr_on_line(inner)
    if text:
        try:
            obj = _evaluate(_parse(text, mode="eval").body, inner)
        except SyntaxError:
            obj = _MISSING
        return obj, text
    return _MISSING, None


def _expr_on_line(frame) -> str | None:
    """``self._lock`` in ``self._lock.acquire()`` / ``self._cond.wait()`` on a frame's line."""
    import re
    text = _source_line(frame.f_code.co_filename, frame.f_lineno)
    match = re.search(r"([A-Za-z_][\w.]*)\.(acquire|wait|wait_for|join|get|put|select)\(", text)
    if match:
        return match.group(1)
    match = re.match(r"(?:async\s+)?with\s+([A-Za-z_][\w.]*)", text)
    return match.group(1) if match else None


def _kind(obj) -> str:
    if isinstance(obj, threading.Condition):
        return "a Condition"
    if isinstance(obj, threading.Semaphore):
        return "a Semaphore"
    if isinstance(obj, threading.Event):
        return "an Event"
    if isinstance(obj, threading.Thread):
        return f"thread '{obj.name}' to end"
    name = type(obj).__name__
    return {"lock": "a Lock", "RLock": "an RLock", "_RLock": "an RLock"}.get(name, f"a {name}")


# -- one look at one thread ----------------------------------------------------------------

@dataclass
class ThreadLook:
    """What one thread was doing at one look."""
    thread: threading.Thread
    cpu: float | None
    kstate: str | None
    syscall: tuple[str, bool | None, float | None] | None
    frames: list
    state: str  # "parked" | "moving" | "timed" | "bound" | "asleep" (a loop with nothing due)
    detail: str = ""  # why not parked, or what a sleeping loop has pending
    loop: Any = None
    guard_only: bool = False  # a sleeping asyncio loop whose only timers are harness bounds

    @property
    def key(self) -> tuple:
        inner = self.frames[0] if self.frames else None
        return (self.thread.ident, self.state, self.syscall and self.syscall[0],
                id(inner.f_code) if inner else None, inner.f_lineno if inner else None)

    @property
    def learner(self):
        return next((f for f in self.frames if _is_learner(f.f_code.co_filename)), None)


def _selector_frame(frames: list):
    if frames and frames[0].f_code.co_name == "select" and \
            frames[0].f_code.co_filename.endswith("selectors.py"):
        return frames[0]
    return None


def _asyncio_loop(frames: list):
    for frame in frames:
        if frame.f_code.co_name == "_run_once" and \
                frame.f_code.co_filename.endswith(os.path.join("asyncio", "base_events.py")):
            return frame.f_locals.get("self")
    return None


def _fds_ready(selector) -> bool:
    """True if an fd registered with ``selector`` is ready now (a wakeup is on its way)."""
    import select as _select
    try:
        keys = list(selector.get_map().values())
    except Exception:  # noqa: BLE001 - a closed or foreign selector: cannot tell
        return True
    if not hasattr(_select, "poll"):
        return True
    poller = _select.poll()
    for key in keys:
        mask = (_select.POLLIN if key.events & 1 else 0) | (_select.POLLOUT if key.events & 2
                                                            else 0)
        try:
            poller.register(key.fd, mask)
        except (OSError, ValueError):
            continue
    try:
        return any(not ev & _select.POLLNVAL for _, ev in poller.poll(0))
    except OSError:
        return True


def _look(thread: threading.Thread, frames: list, deadline: float) -> ThreadLook:
    tid = getattr(thread, "native_id", None)
    cpu = thread_cpu_seconds(thread)
    kstate = kernel_state(thread)
    call = _syscall(tid) if tid is not None else None
    look = ThreadLook(thread, cpu, kstate, call, frames, "moving")
    if kstate != "S" or call is None:
        look.detail = f"kernel state {kstate}"
        return look
    selector = _selector_frame(frames)
    loop = _asyncio_loop(frames)
    if selector is not None and call[0] not in _SELECT_CALLS:
        # The frames say select() but the kernel says otherwise: it has returned and waits
        # for the GIL (or is about to call it), so it is not asleep.
        look.state, look.detail = "timed", f"leaving select() ({call[0]})"
        return look
    if selector is not None:
        sel = selector.f_locals.get("self")
        if _fds_ready(sel):
            look.state, look.detail = "timed", "a registered fd is ready"
            return look
        if loop is not None and not getattr(loop, "_stopping", False):
            return _look_asyncio(look, loop, deadline)
        timeout = selector.f_locals.get("timeout")
        began = getattr(thread, "began", None)
        if isinstance(timeout, (int, float)) and timeout >= 0 and (
                began is None or began + timeout < deadline):
            look.state, look.detail = "timed", f"select(timeout={timeout:g})"
            return look
        # Untimed, or (in a thread of ours that began after the call could have) timing
        # out only after the check's bound: nothing this thread waits for can come in time.
        look.state = "asleep"
        return look
    name, timed, ends = call
    if timed is None:
        look.detail = f"in {name}"
        return look
    if timed and ends is not None and ends >= deadline:
        # It gives up only after the check's own bound: nothing it does can come in time.
        look.state, look.detail = "parked", f"a timed {name} that ends after the bound"
        return look
    if timed:
        look.state, look.detail = "timed", f"a timed {name}"
        # A test's own bound (``event.wait(BOUND)`` in a producer of the test) is a
        # deadline, not progress -- unless learner code called it (a hook, a spy): then it
        # returns into learner code that goes on, so it may well be progress.
        if _harness_bound(frames) and not any(_is_learner(f.f_code.co_filename)
                                               for f in frames):
            look.state = "bound"
        return look
    look.state = "parked"
    return look


def _look_asyncio(look: ThreadLook, loop, deadline: float) -> ThreadLook:
    look.loop = loop
    try:
        ready = len(loop._ready)
        timers = [h for h in list(loop._scheduled) if not h.cancelled()]
        now_loop, now = loop.time(), time.monotonic()
    except Exception:  # noqa: BLE001 - not the asyncio we know
        look.detail = "an event loop we cannot read"
        return look
    with _guards_lock:
        guard_handles = {id(g.handle) for g in _guards if g.loop is loop}
    due = [h for h in timers if id(h) not in guard_handles
           and h.when() - now_loop + now < deadline]
    if ready:
        # asyncio never sleeps with callbacks ready (it selects with timeout 0 then): these
        # were queued from another thread without waking it.  Only an unrelated timer could
        # run them -- a lost wakeup, whatever timer may come.
        look.state = "asleep"
        look.guard_only = False
        look.detail = (f"{ready} callback(s) ready but the loop was not woken (queued from "
                       "another thread without call_soon_threadsafe?)")
        return look
    if due:
        look.state = "timed"
        look.detail = f"a timer due in {max(0.0, due[0].when() - now_loop):.2f} s"
        return look
    look.state = "asleep"
    look.guard_only = any(id(h) in guard_handles for h in timers)
    look.detail = (f"{ready} callback(s) ready but the loop was not woken" if ready else "")
    return look


_STDLIB = os.path.dirname(os.path.abspath(threading.__file__)) + os.sep


def _is_stdlib(filename: str) -> bool:
    return filename.startswith(_STDLIB) and "site-packages" not in filename


def _harness_bound(frames: list) -> bool:
    """A timed wait in a threading primitive, called from harness code (a test's own bound
    such as ``event.wait(BOUND)``): its end is a deadline, not progress."""
    if not frames or not frames[0].f_code.co_filename.endswith("threading.py"):
        return False
    for frame in frames:
        filename = frame.f_code.co_filename
        if _is_stdlib(filename):
            continue
        return _is_harness(filename) and not _is_learner(filename)
    return False


# -- a snapshot of the process, and the verdict ---------------------------------------------

@dataclass
class Snapshot:
    looks: list[ThreadLook]
    at: float
    cycle: set = field(default_factory=set)  # idents of threads in a lock cycle

    def learner_threads(self) -> list[ThreadLook]:
        return [look for look in self.looks if look.learner is not None or look.loop is not None]


@dataclass
class Verdict:
    """A stuck check: ``lines`` explain it; ``sites`` (learner file:line) identify the cause."""
    what: str
    lines: list[str]
    sites: tuple[str, ...]
    cycle: bool = False  # threads wait for locks held inside their own cycle: certain

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _take_snapshot(me: int, deadline: float) -> tuple[Snapshot, str, bool]:
    """A look at every thread that could move, why the check could still move ("" when
    nothing can), and whether another bounded wait ends sooner (its own detector decides)."""
    frames = stacks()
    with _watchers_lock:
        watchers = dict(_watchers)
    sooner = any(ident != me and their_deadline < deadline and ident in frames
                 for ident, their_deadline in watchers.items())
    why = "another bounded wait ends sooner" if sooner else ""
    looks = []
    for thread in threading.enumerate():
        ident = thread.ident
        if ident is None or ident == me or ident in _excluded or ident in watchers:
            continue
        if ident in _background and thread is not threading.main_thread():
            continue
        look = _look(thread, frames.get(ident, []), deadline)
        if look.state in ("moving", "timed") and not why:
            why = f"thread '{thread.name}': {look.detail or look.state}"
        looks.append(look)
    if not why and _children_alive():
        why = "a child process is alive"
    return Snapshot(looks, time.monotonic()), why, sooner


def _lock_waited(look: ThreadLook):
    """The lock a parked learner line waits to acquire (``with lock:`` or ``lock.acquire()``
    on that line), or None: a Condition.wait, an Event or a join is not a lock wait."""
    obj, _text = _waited_object(look.frames)
    if obj is _MISSING or isinstance(obj, (threading.Event, threading.Semaphore,
                                           threading.Barrier, threading.Thread)):
        return None
    inner = look.learner
    if inner is None or not any(first == inner.f_lineno for first, *_ in
                                _with_blocks(inner.f_code.co_filename)) and \
            ".acquire(" not in _source_line(inner.f_code.co_filename, inner.f_lineno):
        return None
    return _lock_of(obj)


def _hogging(snap: Snapshot) -> tuple[tuple, Snapshot, str] | None:
    """When every thread that could still move is a learner thread inside a ``with`` block of
    a lock that parked threads wait to acquire: (what identifies that state, its threads, a
    header line).  Held on, this is a lock nobody else can get: its holder sleeps or spins on
    a state only the threads it shuts out could change."""
    busy = [look for look in snap.looks if look.state in ("moving", "timed")]
    held = {look.thread.ident: _held(look.frames, with_only=True) for look in busy}
    if not busy or not all(held.values()):
        return None
    waiting: dict[int, list[ThreadLook]] = {}
    for look in snap.looks:
        lock = _lock_waited(look) if look.state == "parked" else None
        if lock is not None:
            waiting.setdefault(id(lock), []).append(look)
    key, involved, header = [], list(busy), []
    for look in busy:
        mine = [(lock, text, frame, first) for lock, text, frame, first
                in held[look.thread.ident] if id(lock) in waiting]
        if not mine:
            return None
        lock, text, frame, first = mine[0]
        waiters = waiting[id(lock)]
        involved += [w for w in waiters if w not in involved]
        key.append((look.thread.ident, frame, first, lock,
                    tuple(sorted((w.thread.ident, w.cpu or 0.0) for w in waiters))))
        header.append(f"thread '{look.thread.name}' keeps `{text}` (taken at line {first} in "
                      f"{_qualname(frame)}()) and never lets go, while {len(waiters)} "
                      f"thread(s) wait for it")
    return tuple(key), Snapshot(involved, snap.at), "; ".join(header)


def _deadlocked(snap: Snapshot, *, with_only: bool = True) -> Snapshot | None:
    """The threads caught in a lock cycle (each waits for a Lock that a thread of the cycle
    holds in a ``with`` block, a thread waiting for itself included), if any: no timer, fd
    or callback can free them.  None when there is no such cycle."""
    parked = [look for look in snap.looks if look.state == "parked"]
    # Only ``with`` blocks: a Lock taken by a bare acquire() may be meant to be released by
    # another thread (a hand-made wait queue parks a waiter on its own lock that way).
    held = {look.thread.ident: _held(look.frames, with_only=with_only) for look in parked}
    waits: dict[int, list[int]] = {}
    for look in parked:
        lock = _lock_waited(look)
        if lock is None:
            continue
        reentrant = "RLock" in type(lock).__name__
        holders = [ident for ident, locks in held.items()
                   if any(h is lock for h, *_ in locks)
                   and not (reentrant and ident == look.thread.ident)]
        if holders:
            waits[look.thread.ident] = holders
    dead: set[int] = set()
    for start in waits:
        path, node = [], start
        while node in waits and node not in path:
            path.append(node)
            node = waits[node][0]
        if node in path:
            dead.update(path[path.index(node):])
    if not dead:
        return None
    cycle = set(dead)
    changed = True
    while changed:  # threads waiting for a dead thread's lock are dead too
        changed = False
        for ident, holders in waits.items():
            if ident not in dead and any(h in dead for h in holders):
                dead.add(ident)
                changed = True
    found = Snapshot([look for look in snap.looks if look.thread.ident in dead], snap.at)
    found.cycle = cycle
    return found


#: Thread states already judged stuck in this process: key -> CPU clock then.  The same
#: thread seen again in the same state with the same clock needs no new confirmation.
_known: dict[tuple, float] = {}


class _Watch:
    """The stuck detector of one bounded wait."""

    def __init__(self, what: str, deadline: float) -> None:
        self.what = what
        self.deadline = deadline
        self.me = threading.get_ident()
        self.started = time.monotonic()
        self.streak: list[Snapshot] = []
        self.cpu_start: dict[int, float] = {}
        self.hot: dict[int, dict[str, int]] = {}
        self.last_cpu: dict[int, float] = {}
        self.names: dict[int, str] = {}
        self.looks_at: dict[int, int] = {}  # looks at each thread
        self.moved: dict[int, int] = {}  # looks at which its CPU clock had moved
        self.hog: tuple | None = None  # the _hogging state seen at every look since hog_at
        self.hog_at = 0.0
        self.interval = WINDOW  # until the next look: shorter while a lock cycle is confirmed

    def step(self) -> tuple[str, Any] | None:
        """One look.  ("stuck", Verdict) or ("guard", (_Guard, Verdict)) once confirmed."""
        self.interval = WINDOW
        self._sample_cpu()
        snap, why, sooner = _take_snapshot(self.me, self.deadline)
        dead = _deadlocked(snap)
        hog = _hogging(snap) if why and not sooner else None
        if hog is None or hog[0] != self.hog:
            self.hog, self.hog_at = (hog[0] if hog else None), snap.at
        elif snap.at - self.hog_at >= HOLD_CONFIRM and not _children_alive():
            # Not one of the threads shut out ran for a whole second while the same frames
            # kept the lock: a correct holder lets go within microseconds, even on a busy box.
            self.hog = None
            return "stuck", diagnose(hog[1], self.what, header=hog[2])
        if why:
            snap = dead
            if snap is None:
                self.streak.clear()
                return None
        if self.streak and not self._same(self.streak[-1], snap):
            self.streak.clear()
        self.streak.append(snap)
        known = bool(snap.looks) and all(
            look.cpu is not None and _known.get(look.key) == look.cpu for look in snap.looks)
        # A lock cycle that every thread is in (each waits for a lock a thread of the cycle
        # holds) cannot undo itself: two looks with every clock still are proof enough, and
        # the second need not wait a whole window.
        certain = dead is not None and len(dead.looks) == len(snap.looks)
        self.interval = CYCLE_LOOK if certain else WINDOW
        looks, span = (2, CYCLE_LOOK * 0.9) if certain else (CONFIRM_LOOKS, CONFIRM)
        if not known and (len(self.streak) < looks or snap.at - self.streak[0].at < span):
            return None
        for look in snap.looks:
            if look.cpu is not None:
                _known[look.key] = look.cpu
        pending = []
        # A sleeping loop with callbacks ready (queued from another thread without waking
        # it) would run them on any wakeup, the bound's own included: firing a bound early
        # would hide the lost wakeup, so the check itself is stuck.
        rescued = any(look.loop is not None and getattr(look.loop, "_ready", None)
                      for look in snap.looks)
        if not why and not rescued:
            with _guards_lock:
                pending = sorted((g for g in _guards
                                  if not g.fired and g.deadline < self.deadline),
                                 key=lambda g: g.deadline)
        verdict = diagnose(snap, self.what)
        self.streak.clear()
        if pending:
            return "guard", (pending[0], verdict)
        return "stuck", verdict

    @staticmethod
    def _same(a: Snapshot, b: Snapshot) -> bool:
        if [x.key for x in a.looks] != [y.key for y in b.looks]:
            return False
        for x, y in zip(a.looks, b.looks):
            if x.cpu is None or y.cpu is None or y.cpu - x.cpu > STILL_CPU:
                return False
        return True

    def _sample_cpu(self) -> None:
        """Where CPU goes while we wait: per thread, its learner line at each look.  Only the
        threads whose clock moved are walked: the others add nothing to where CPU goes."""
        hot: list[tuple[int, threading.Thread]] = []
        for thread in threading.enumerate():
            ident = thread.ident
            if ident is None or ident == self.me:
                continue
            cpu = thread_cpu_seconds(thread)
            if cpu is None:
                continue
            self.names[ident] = thread.name
            self.cpu_start.setdefault(ident, cpu)
            before = self.last_cpu.get(ident)
            self.last_cpu[ident] = cpu
            self.looks_at[ident] = self.looks_at.get(ident, 0) + 1
            if before is None or cpu - before <= STILL_CPU:
                continue
            self.moved[ident] = self.moved.get(ident, 0) + 1
            hot.append((ident, thread))
        if not hot:
            return
        frames = stacks({ident for ident, _ in hot})
        for ident, _thread in hot:
            learner = next((f for f in frames.get(ident, [])
                            if _is_learner(f.f_code.co_filename)), None)
            if learner is not None:
                site = _site(learner)
                counts = self.hot.setdefault(ident, {})
                counts[site] = counts.get(site, 0) + 1

    def spinning(self) -> list[str]:
        """Threads that burnt CPU through most of the wait, with their hottest learner line."""
        elapsed = time.monotonic() - self.started
        out = []
        for ident, counts in self.hot.items():
            used = self.last_cpu.get(ident, 0.0) - self.cpu_start.get(ident, 0.0)
            # Spinning: its CPU clock moved at nearly every look (a parked thread's stands
            # still), and it used a fair share of a CPU even on a crowded machine.
            steady = self.moved.get(ident, 0) >= 0.6 * max(1, self.looks_at.get(ident, 0) - 1)
            if elapsed <= 0 or not steady or used < max(0.05 * elapsed, 0.2) or not counts:
                continue
            site = max(counts, key=counts.get)
            filename, _, line = site.rpartition(":")
            out.append(f"thread '{self.names.get(ident, ident)}' was spinning: {used:.1f} s of "
                       f"CPU in {elapsed:.1f} s, mostly at {site}: "
                       f"`{_source_line(_real(filename), int(line))}`")
        return out


def _real(shown: str) -> str:
    return os.path.abspath(shown)


def diagnose(snap: Snapshot, what: str, *, header: str = "") -> Verdict:
    """The panel text of a stuck check: per learner thread where it is blocked, on what,
    who holds it, and where it entered learner code."""
    looks = snap.learner_threads()
    certain = _deadlocked(snap) is not None
    # Locks taken by a bare acquire() count for naming the root cause, not for certainty.
    dead = _deadlocked(snap, with_only=False)
    held = {id(look.thread): _held(look.frames) for look in looks}
    lines = [f"{what}: stuck -- " + (f"{header}:" if header else
                                     "every thread is blocked and nothing can wake one:")]
    sites = []
    for look in looks:
        lines += _describe(look, looks, held)
        if look.learner is not None:
            sites.append(_site(look.learner))
    for hook in _hooks:
        try:
            lines += [str(x) for x in hook(snap)]
        except Exception:  # noqa: BLE001 - an explanation must not break the verdict
            continue
    if len(lines) == 1:
        lines.append("  (no thread is inside the learner file: the threads wait for each other "
                     "in the harness)")
    if dead is not None:  # the root cause is the lock cycle, whoever else waits on it
        sites = [_site(look.learner) for look in dead.looks
                 if look.learner is not None and look.thread.ident in dead.cycle]
    return Verdict(what, lines, tuple(sorted(set(sites))), cycle=certain)


def _describe(look: ThreadLook, looks: list[ThreadLook], held: dict) -> list[str]:
    name = look.thread.name
    inner = look.learner
    if look.loop is not None and inner is None:
        text = f"  thread '{name}': the event loop is asleep in select()"
        extra = [look.detail] if look.detail else []
        extra.append("no timer is due and no fd is ready: nothing will wake it")
        return [text + "; " + "; ".join(extra)]
    if inner is None:
        return []
    src = _code_only(inner.f_code.co_filename, inner.f_lineno)
    verb = "is in" if look.state in ("moving", "timed") else "is blocked in"
    out = [f"  thread '{name}' {verb} {_qualname(inner)}() at {_site(inner)}: `{src}`"]
    if look.state == "asleep":
        out.append("    asleep in select(): no timer is due and no fd is ready"
                   + (f"; {look.detail}" if look.detail else ""))
    obj, text = _waited_object(look.frames)
    if obj is not _MISSING and text:
        lock = _lock_of(obj)
        holders = []
        for other in looks:
            for held_lock, held_text, frame, first in held.get(id(other.thread), []):
                if held_lock is lock:
                    who = "this same thread" if other is look else f"thread '{other.thread.name}'"
                    holders.append(f"{who} took at line {first} in {_qualname(frame)}()"
                                   f" (`{_code_only(frame.f_code.co_filename, first)}`)")
        notified = any(f.f_code is threading.Condition.wait.__code__ for f in look.frames)
        if notified:
            line = f"    waits for a notify on `{text}` ({_kind(obj)})"
            line += (": its lock is held by " + "; and ".join(holders)
                     if holders else ", which no running thread will send")
        else:
            line = f"    waits for `{text}` ({_kind(obj)})"
            if holders:
                line += ", which " + "; and which ".join(holders)
        out.append(line)
    learner = [i for i, f in enumerate(look.frames) if _is_learner(f.f_code.co_filename)]
    entry = look.frames[learner[-1]]
    caller = next((f for f in look.frames[learner[-1] + 1:]  # the list, never f_back again
                   if not _is_stdlib(f.f_code.co_filename) and f.f_code.co_filename != __file__),
                  None)
    came = (f", called from {_site(caller)}" if caller is not None
            else ", in a thread the test started")
    out.append(f"    entered learner code in {_qualname(entry)}() (line "
               f"{entry.f_code.co_firstlineno}){came}")
    return out


# -- the one bounded wait every helper uses ------------------------------------------------

class Watchdog:
    """Watches the main thread while it runs learner code outside any bounded wait (a test
    that calls ``put()`` itself): if every thread is stuck, the main thread is interrupted
    with a signal whose handler raises ``Stuck`` there.  One per test process."""

    SIGNAL = getattr(signal, "SIGUSR2", None)

    def __init__(self) -> None:
        self.active = False
        self._verdict: tuple[Verdict, Any] | None = None
        self._main = threading.main_thread()
        if self.SIGNAL is None or not hasattr(signal, "pthread_kill"):
            return
        signal.signal(self.SIGNAL, self._handler)
        self.thread = threading.Thread(target=self._run, name="workbook-watchdog", daemon=True)
        self.thread.start()

    def _handler(self, signum: int, frame: Any) -> None:
        found, self._verdict = self._verdict, None
        if found is None:
            return
        verdict, key = found
        if frame is not None and (frame.f_code, frame.f_lineno) == key:
            raise Stuck(_stuck_message("the test", verdict), verdict)

    def _run(self) -> None:
        _excluded.add(threading.get_ident())
        watch = None
        while True:
            time.sleep(WINDOW)
            main = self._main
            with _watchers_lock:
                waiting = main.ident in _watchers
            stack = stacks({main.ident}).get(main.ident, [])
            inside = any(_is_learner(f.f_code.co_filename) for f in stack)
            if not self.active or waiting or not inside:
                watch = None
                continue
            if watch is None:
                watch = _Watch("the test", time.monotonic() + 3600.0)
            found = watch.step()
            if found is None:
                continue
            kind, value = found
            if kind == "guard":
                guard, verdict = value
                verdicts.append(verdict)
                guard.fire(verdict)
                continue
            frame = current_frames().get(main.ident)
            if frame is None:
                continue
            verdicts.append(value)
            self._verdict = (value, (frame.f_code, frame.f_lineno))
            signal.pthread_kill(main.ident, self.SIGNAL)
            watch = None


class _Timeout:
    pass


TIMED_OUT = _Timeout()


def _wait(ready: Callable[[], bool], block: Callable[[float], object], timeout: float, *,
          what: str) -> "Verdict | _Timeout | None":
    """Wait until ``ready()``; None then.  A Verdict once the check is seen stuck, or
    TIMED_OUT after ``timeout`` seconds (then ``last_spinning`` says who burnt CPU)."""
    global last_spinning
    start = time.monotonic()
    deadline = start + timeout
    me = threading.get_ident()
    watch = _Watch(what, deadline)
    with _watchers_lock:
        outer = _watchers.get(me)
        _watchers[me] = deadline
    last_step = None
    try:
        while True:
            if ready():
                return None
            now = time.monotonic()
            if now >= deadline:
                last_spinning = watch.spinning()
                return TIMED_OUT
            if last_step is None or now - last_step >= watch.interval:
                last_step = now
                try:
                    found = watch.step()
                except Exception as exc:  # noqa: BLE001 - the detector only ever helps:
                    found = None          # a fault of its own must not fail a check
                    if not detector_faults:
                        note(f"(the stuck detector failed and was skipped: "
                             f"{type(exc).__name__}: {exc})")
                    detector_faults.append(exc)
                if found is not None and not ready():
                    kind, value = found
                    if kind == "stuck":
                        return value
                    guard, verdict = value
                    verdicts.append(verdict)
                    guard.fire(verdict)
            block(max(0.0, min(watch.interval, deadline - time.monotonic())))
    finally:
        with _watchers_lock:
            if outer is None:
                _watchers.pop(me, None)
            else:
                _watchers[me] = outer


last_spinning: list[str] = []
#: Exceptions the detector raised while looking (each one made it skip that look).
detector_faults: list[BaseException] = []


def _stuck_message(what: str, verdict: Verdict) -> str:
    return verdict.text


def _timeout_message(text: str) -> str:
    extra = "\n".join(last_spinning)
    return text + ("\n" + extra if extra else "")


class Stuck(Failure):
    """A check stopped at once because nothing could move; ``verdict`` explains where."""

    def __init__(self, message: str, verdict: Verdict, pitfall: str | None = None) -> None:
        # A lock cycle is a certain diagnosis: a guess made for the timeout ("spins while
        # holding the lock", ...) would only mislead next to it.
        super().__init__(message, None if verdict.cycle else pitfall)
        self.verdict = verdict


def watch(predicate: Callable[[], object], timeout: float = BOUND, *,
          what: str, record: bool = True) -> "Verdict | _Timeout | None":
    """Wait until ``predicate()`` (None), the check is seen stuck (the Verdict, recorded
    unless ``record`` is false), or ``timeout`` passes (TIMED_OUT): for helpers that word
    their own failures."""
    found = _wait(lambda: bool(predicate()), lambda t: time.sleep(min(t, 0.001)), timeout,
                  what=what)
    if isinstance(found, Verdict) and record:
        verdicts.append(found)
    return found


def wait_event(event: threading.Event, timeout: float = BOUND, *, what: str,
               record: bool = True) -> bool:
    """``event.wait(timeout)``, but False at once when stuck (the verdict recorded unless
    ``record`` is false: a wait whose stuck end is an expected answer, not a failure)."""
    found = _wait(event.is_set, event.wait, timeout, what=what)
    if isinstance(found, Verdict) and record:
        verdicts.append(found)
    return found is None


def done_within(future, timeout: float = BOUND, *, what: str = "the future") -> bool:
    """True once a concurrent future is done; False after ``timeout`` or once stuck."""
    def block(t: float) -> None:
        concurrent.futures.wait([future], t)
    found = _wait(future.done, block, timeout, what=what)
    if isinstance(found, Verdict):
        verdicts.append(found)
    return found is None


class _Guard:
    """A bound on an await, set by ``bounded``: its timer is a deadline, not progress."""

    def __init__(self, loop, task, deadline: float) -> None:
        self.loop = loop
        self.task = task
        self.deadline = deadline
        self.fired = False
        self.expired = False
        self.verdict: Verdict | None = None
        self.handle = None

    def expire(self) -> None:
        self.expired = True
        if not self.task.done():
            self.task.cancel()

    def fire(self, verdict: Verdict) -> None:
        """End the bound now: the state is stuck, so waiting the rest of it changes nothing."""
        self.fired = True
        self.verdict = verdict

        def now() -> None:
            if self.handle is not None:
                self.handle.cancel()
            self.expire()
        try:
            self.loop.call_soon_threadsafe(now)
        except RuntimeError:
            pass


async def bounded(aw, timeout: float):
    """``await aw``, raising ``asyncio.TimeoutError`` after ``timeout`` seconds -- like
    ``asyncio.wait_for``, but the stuck detector may end the bound early when nothing else
    can happen before it (so a test's own timeout handling runs at once)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(aw)
    guard = _Guard(loop, task, time.monotonic() + timeout)
    guard.handle = loop.call_later(timeout, guard.expire)
    with _guards_lock:
        _guards.add(guard)
    try:
        try:
            return await task
        except asyncio.CancelledError:
            if guard.expired:
                raise asyncio.TimeoutError() from None
            raise
    finally:
        guard.handle.cancel()
        with _guards_lock:
            _guards.discard(guard)
        if not task.done():
            task.cancel()


# -- an asyncio loop in a daemon thread ---------------------------------------------------

class LoopThread:
    """An asyncio event loop running in its own daemon thread.

    The test thread stays free to play the producer, to time things and to give up after a
    bound.  ``run`` executes a coroutine on the loop; if it does not finish in time the
    coroutine is cancelled (and the thread interrupted if it spins) and the check fails.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name="loop-thread", daemon=True)
        self.thread.start()
        self._ready.wait(BOUND)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        while True:
            try:
                self.loop.run_forever()
                return
            except Hung:  # a spinning callback was interrupted; keep serving the test
                continue

    def submit(self, coro) -> "asyncio.Future[Any]":
        """Start ``coro`` on the loop; returns a concurrent future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def wait(self, future, timeout: float = BOUND, *, what: str,
             pitfall: str | None = None) -> Any:
        """The result of a submitted coroutine; a failure after ``timeout`` seconds, or at
        once when the stuck detector sees that it never can finish."""
        found = _wait(future.done, lambda t: concurrent.futures.wait([future], t), timeout,
                      what=what)
        if found is None:
            return future.result()
        self.abandon(future)
        if isinstance(found, Verdict):
            verdicts.append(found)
            raise Stuck(_stuck_message(what, found), found, pitfall)
        fail(_timeout_message(f"{what} did not finish within {timeout:g} s"), pitfall=pitfall)

    def run(self, coro, timeout: float = BOUND, *, what: str,
            pitfall: str | None = None) -> Any:
        return self.wait(self.submit(coro), timeout, what=what, pitfall=pitfall)

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = BOUND) -> Any:
        """Run a plain function on the loop thread (e.g. ``bind_loop``) and return its result."""
        async def _call():
            return fn(*args)
        return self.run(_call(), timeout, what=f"{getattr(fn, '__qualname__', fn)}() on the loop")

    def sync(self, timeout: float = BOUND) -> bool:
        """Let the loop finish what it is running now: True once a callback queued now has run.

        A coroutine that has reached an ``await`` with nothing left to do is then suspended.
        False after ``timeout``, or at once if the loop thread is seen stuck."""
        done = threading.Event()
        try:
            self.loop.call_soon_threadsafe(done.set)
        except RuntimeError:  # the loop is closed
            return False
        return _wait(done.is_set, done.wait, timeout, what="the loop thread") is None

    def idle(self) -> bool:
        """True while the loop thread sleeps in its selector with no callback ready to run."""
        return asleep_in_selector(self.thread) and not self.loop._ready

    def wait_idle(self, timeout: float = BOUND, *, what: str = "the loop is asleep") -> None:
        """Wait until the loop is asleep in ``select()`` with nothing to run: every coroutine
        on it has reached a real suspension point.  State, not a sleep, is the proof."""
        wait_until(self.idle, timeout, what=what)

    def abandon(self, future) -> None:
        """Give up on a submitted coroutine: cancel it, and interrupt the loop thread if it is
        stuck inside learner code, so the loop serves the next check."""
        future.cancel()
        if not self.sync(1.0):  # the loop thread is stuck inside learner code
            interrupt_thread(self.thread)
            self.sync(1.0)

    def close(self) -> None:
        if not self.sync(1.0):
            interrupt_thread(self.thread)
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            return
        thread = self.thread
        if _wait(lambda: not thread.is_alive(), thread.join, BOUND,
                 what="the loop thread to stop") is None:
            self.loop.close()

    def __enter__(self) -> "LoopThread":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

