"""Helper threads and what they are doing, seen from outside: daemon threads that keep their
target's result, exceptions raised inside a thread that spins, CPU use over a window."""
from __future__ import annotations

import ctypes
import threading
import time
from time import process_time as _process_time, thread_time as _thread_time
from typing import Any, Callable

from workbook.stuck.procfs import (SELECT_CALLS, kernel_state, note_tid, run_delay_seconds,
                                   thread_cpu_seconds, thread_demand_seconds, thread_syscall)
from workbook.testkit.checks import Hung
from workbook.tuning import PARKED_CPU, PARKED_WINDOW


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
        note_tid(self)  # before any code under test runs here (see ``procfs.kernel_tid``)
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
    call = thread_syscall(thread)
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
    """True while ``thread`` is blocked in the kernel waiting for readiness (asleep in
    poll, epoll_wait or select, as the kernel says): the state an event loop sleeps in,
    whichever selector class -- or raw ``select.poll``/``select.select`` -- it uses."""
    call = thread_syscall(thread) if thread.is_alive() else None
    return call is not None and call.name in SELECT_CALLS and kernel_state(thread) == "S"


def _growth(clock: Callable[[threading.Thread], float | None], thread: threading.Thread,
            window: float) -> float | None:
    """How far ``clock`` (one of ``thread``'s clocks) moves during the next ``window`` seconds
    of wall time; None if the thread ended meanwhile."""
    before = clock(thread)
    time.sleep(window)  # an observation window, not a proof of state: the clock is the proof
    after = clock(thread)
    if before is None or after is None:
        return None
    return after - before


def cpu_used(thread: threading.Thread, window: float) -> float | None:
    """CPU seconds ``thread`` uses during the next ``window`` seconds of wall time; None if it
    ended meanwhile."""
    return _growth(thread_cpu_seconds, thread, window)


def others_cpu_seconds() -> float:
    """CPU seconds every thread of this process but the calling one has used so far (those
    that ended included): the kernel's clocks of the process and of the calling thread, read
    through functions bound before any code under test ran -- never through an object that
    code could reach and rewrite (a thread's name or id).  The harness's own watch looks in
    now and then and is counted too: a few milliseconds a second.  Only differences of two
    readings mean anything."""
    return _process_time() - _thread_time()


def quiet(window: float = PARKED_WINDOW) -> bool:
    """True when every thread but the calling one together uses next to no CPU over
    ``window``: nothing of the code under test runs, wherever it would."""
    before = others_cpu_seconds()
    time.sleep(window)  # an observation window, not a proof of state: CPU use is the proof
    return others_cpu_seconds() - before <= PARKED_CPU


def parked(thread: threading.Thread, window: float = PARKED_WINDOW) -> bool:
    """True when ``thread`` is alive and blocked: over ``window`` it neither ran nor waited,
    runnable, for a CPU (a thread preempted on a busy machine uses no CPU, yet it is not
    blocked: its demand, CPU used plus time queued for one, still grows)."""
    wanted = _growth(thread_demand_seconds, thread, window)
    return wanted is not None and wanted <= PARKED_CPU


class Stopwatch:
    """Seconds since it was made, on ``clock``, as measured and less the seconds the calling
    thread sat runnable waiting for a CPU meanwhile (the kernel's run delay): a wait that
    ends late on a busy machine is late by that much through no fault of the code under
    test.  Read it from the thread that made it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock, self.start, self.queued = clock, clock(), run_delay_seconds()

    def read(self) -> tuple[float, float]:
        """``(elapsed, own)``: the seconds since it was made, and those less the CPU queue."""
        elapsed = self.clock() - self.start
        return elapsed, elapsed - (run_delay_seconds() - self.queued)
