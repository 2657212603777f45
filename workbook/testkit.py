"""Helpers shared by every acceptance set.

Rules the helpers enforce: every wait is bounded, helper threads are daemons, and a
failure carries a diagnosis (and, where it fits, the name of the pitfall it looks like).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import os
import sys
import threading
import time
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

    def run(self) -> None:
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
    """Wait for ``thread``; fail if it is still running after ``timeout`` seconds.

    Re-raises what the thread raised (so a ``NotImplementedError`` reaches the harness)."""
    thread.join(timeout)
    if thread.is_alive():
        fail(f"{what} did not finish within {timeout:g} s (blocked or deadlocked?)",
             pitfall=pitfall)
    if thread.error is not None:
        raise thread.error
    return thread.result


def wait_until(predicate: Callable[[], object], timeout: float = BOUND, *, what: str,
               pitfall: str | None = None) -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            fail(f"gave up after {timeout:g} s waiting until {what}", pitfall=pitfall)
        time.sleep(0.001)


def interrupt_thread(thread: threading.Thread, exc_type: type[BaseException] = Hung) -> None:
    """Raise ``exc_type`` inside ``thread`` at its next Python instruction.

    Used to stop learner code that spins without yielding, so one hung checkpoint does not
    slow down the rest of the run."""
    if thread.ident is None or not thread.is_alive():
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                               ctypes.py_object(exc_type))


def asleep_in_selector(thread: threading.Thread) -> bool:
    """True while ``thread``'s innermost Python frame is a ``selectors`` ``select()``: it is
    blocked in the kernel waiting for readiness (the state an event loop sleeps in)."""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
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
        """The result of a submitted coroutine, or a failure after ``timeout`` seconds."""
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:  # (not the builtin one on Python 3.10)
            if future.done():
                raise  # the coroutine itself raised a TimeoutError
        self._abandon(future)
        fail(f"{what} did not finish within {timeout:g} s", pitfall=pitfall)

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

        A coroutine that has reached an ``await`` with nothing left to do is then suspended."""
        done = threading.Event()
        self.loop.call_soon_threadsafe(done.set)
        return done.wait(timeout)

    def idle(self) -> bool:
        """True while the loop thread sleeps in its selector with no callback ready to run."""
        return asleep_in_selector(self.thread) and not self.loop._ready

    def wait_idle(self, timeout: float = BOUND, *, what: str = "the loop is asleep") -> None:
        """Wait until the loop is asleep in ``select()`` with nothing to run: every coroutine
        on it has reached a real suspension point.  State, not a sleep, is the proof."""
        wait_until(self.idle, timeout, what=what)

    def _abandon(self, future) -> None:
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
        self.thread.join(BOUND)
        if not self.thread.is_alive():
            self.loop.close()

    def __enter__(self) -> "LoopThread":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

