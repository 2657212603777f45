"""Test helpers for P03: seeing a parked thread, holding a woken one, interrupting main.

A thread is *parked* when its innermost Python frame is ``threading.Condition.wait``
sitting on one of the ``waiter.acquire(...)`` calls inside its ``try`` block: it has
registered as a waiter and released the lock (Semaphore, Event and ``wait_for`` all wait
there too).  That state, read from ``sys._current_frames()``, is the proof that a thread
is blocked; a sleep never is.

A ``Gate`` holds threads that have just been woken in ``Condition.wait`` (at the
``_acquire_restore`` line, before they take the lock back), so a test can let another
thread run first: the interleavings the chapter describes, forced.
"""
from __future__ import annotations

import inspect
import signal
import sys
import threading
import time
from typing import Any, Callable

from workbook.testkit import (BOUND, DaemonThread, Stuck, Verdict, fail, interrupt_thread, join,
                              start_daemon, watch)


def _wait_lines() -> tuple[frozenset[int], frozenset[int]]:
    """Line numbers in Condition.wait: where a waiter sleeps, and where it retakes the lock."""
    source, first = inspect.getsourcelines(threading.Condition.wait)
    park, restore = set(), set()
    part = "before"
    for number, text in enumerate(source, start=first):
        code = text.strip()
        if part == "before" and code.startswith("try:"):
            part = "try"
        elif part == "try" and code.startswith("finally:"):
            part = "finally"
        elif part == "try" and "waiter.acquire(" in code:
            park.add(number)
        elif part == "finally" and "_acquire_restore(" in code:
            restore.add(number)
    if not park or not restore:  # a Python whose Condition.wait we do not recognise
        raise RuntimeError("tests/p03/support.py: unexpected threading.Condition.wait source")
    return frozenset(park), frozenset(restore)


_WAIT_CODE = threading.Condition.wait.__code__
_PARK_LINES, _RESTORE_LINES = _wait_lines()


def _frame(thread: threading.Thread):
    return sys._current_frames().get(thread.ident) if thread.ident is not None else None


def parked(thread: threading.Thread) -> bool:
    """True while ``thread`` sleeps inside a Condition wait (registered, lock released)."""
    frame = _frame(thread)
    return (frame is not None and frame.f_code is _WAIT_CODE
            and frame.f_lineno in _PARK_LINES)


# Once a check has waited the whole bound for a thread that never parked, the file under test
# is known to spin or sleep instead of waiting in a Condition: later checks give up sooner.
_never_parks = False
QUICK = 1.0  # seconds, for those later checks


def park_bound(timeout: float = BOUND) -> float:
    """How long to wait for a thread to park."""
    return min(timeout, QUICK) if _never_parks else timeout


def wait_parked(thread: threading.Thread, what: str, *, pitfall: str | None = None,
                returned_pitfall: str | None = None, timeout: float = BOUND) -> None:
    """Wait until ``thread`` is parked; fail with a diagnosis if it returns or never parks."""
    global _never_parks
    timeout = park_bound(timeout)
    deadline = time.monotonic() + timeout
    found = watch(lambda: parked(thread) or not thread.is_alive(), timeout,
                  what=f"{what} to wait in a Condition")
    if isinstance(found, Verdict):  # blocked elsewhere for good (a lock taken twice, ...)
        raise Stuck(f"{what} should be waiting in a Condition, but it is stuck\n"
                    + found.text, found)
    while not parked(thread):
        if not thread.is_alive():
            if isinstance(thread, DaemonThread) and thread.error is not None:
                raise thread.error  # NotImplementedError reaches the harness this way
            result = getattr(thread, "result", None)
            fail(f"{what} should have blocked, but it returned {result!r}",
                 pitfall=returned_pitfall)
        if time.monotonic() >= deadline:
            interrupt_thread(thread)  # stop a spinner: it may be holding the lock
            again = " (as in an earlier check)" if _never_parks else ""
            _never_parks = True
            fail(f"{what} should be waiting in a Condition (lock released), but after "
                 f"{timeout:g} s it still was not{again}: it spins or sleeps instead of "
                 "waiting, maybe while holding the lock", pitfall=pitfall)
        time.sleep(0.001)


def settled(thread: threading.Thread) -> bool:
    """Finished, or parked: the thread has nothing left to do until someone notifies it."""
    return not thread.is_alive() or parked(thread)


def conditions(obj: object, threads: list[threading.Thread] = ()) -> list[threading.Condition]:
    """Every Condition found on ``obj`` (also inside its Semaphores and Events) or being
    waited on right now by one of ``threads``."""
    found: list[threading.Condition] = []

    def add(cond: object) -> None:
        if isinstance(cond, threading.Condition) and all(cond is not c for c in found):
            found.append(cond)

    values = list(getattr(obj, "__dict__", {}).values())
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for slot in [slots] if isinstance(slots, str) else slots:
            if hasattr(obj, slot):
                values.append(getattr(obj, slot))
    for value in values:
        add(value)
        if isinstance(value, (threading.Semaphore, threading.Event)):
            add(getattr(value, "_cond", None))
    for thread in threads:
        frame = _frame(thread)
        while frame is not None:
            if frame.f_code is _WAIT_CODE:
                add(frame.f_locals.get("self"))
            frame = frame.f_back
    return found


def notify_all(conds: list[threading.Condition]) -> None:
    """A wakeup that changes nothing: ``notify_all`` on each condition, under its lock."""
    for cond in conds:
        if not cond.acquire(timeout=BOUND):
            fail("could not take the queue's lock within the bound to deliver a wakeup: "
                 "some thread holds it while waiting", pitfall="spin_holding_lock")
        try:
            cond.notify_all()
        finally:
            cond.release()


class Gate:
    """Holds woken threads before they retake the lock, until ``open()`` is called."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards held
        self.held = 0
        self.opened = threading.Event()

    def hold(self) -> None:
        if self.opened.is_set():
            return
        with self._lock:
            self.held += 1
        self.opened.wait(BOUND)

    def open(self) -> None:
        self.opened.set()


class WaitProbe:
    """A per-thread tracer: counts wakeups in Condition.wait and applies a ``Gate``."""

    def __init__(self, gate: Gate | None = None) -> None:
        self.gate = gate
        self.wakeups = 0  # written only by the traced thread

    def _global(self, frame, event: str, arg: Any):
        if event == "call" and frame.f_code is _WAIT_CODE:
            return self._local
        return None

    def _local(self, frame, event: str, arg: Any):
        if event == "line" and frame.f_lineno in _RESTORE_LINES:
            self.wakeups += 1
            if self.gate is not None:
                self.gate.hold()
        return self._local

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        sys.settrace(self._global)
        try:
            return fn(*args)
        finally:
            sys.settrace(None)


def start_probed(probe: WaitProbe, fn: Callable[..., Any], *args: Any,
                 name: str | None = None) -> DaemonThread:
    return start_daemon(probe.run, fn, *args, name=name)


def call(fn: Callable[..., Any], *args: Any, what: str, pitfall: str | None = None,
         timeout: float = BOUND) -> Any:
    """``fn(*args)`` in a daemon thread: its result, or a failure if it does not return."""
    return join(start_daemon(fn, *args), timeout, what=what, pitfall=pitfall)


def abandon(*threads: threading.Thread) -> None:
    """Stop helper threads left running by a failed check (a parked one just stays parked)."""
    for thread in threads:
        if thread.is_alive() and not parked(thread):
            interrupt_thread(thread)


# -- interrupting the main thread with a real signal ---------------------------------------

class Interrupted(Exception):
    """Raised by the SIGUSR1 handler: Python's counterpart of Java's InterruptedException."""


class MainInterrupt:
    """``with MainInterrupt(rescue) as mi: mi.arm(); <blocking call in the main thread>``.

    A helper thread waits until the main thread is parked, then sends it SIGUSR1; the
    handler raises ``Interrupted`` there (once).  A signal that lands just before the main
    thread enters the blocking system call only marks the handler as pending, so the helper
    sends again while the handler has not run.  If the call swallows the exception (the
    main thread parks again) or never parks, the helper runs ``rescue`` in another daemon so
    the run goes on.
    """

    SIGNAL = getattr(signal, "SIGUSR1", None)
    RESEND = 0.02  # seconds between signals while the handler has not run yet

    def __init__(self, rescue: Callable[[], Any]) -> None:
        self._rescue = rescue
        self._lock = threading.Lock()  # guards sending against __exit__ closing
        self._closed = False
        self.armed = threading.Event()  # set by the main thread just before the call
        self.done = threading.Event()  # set by the main thread when the call is over
        self.parked = False  # the main thread was seen parked before the signal
        self.sent = 0
        self.fired = 0  # handler runs (main thread only); only the first one raises
        self.swallowed = False  # the main thread parked again after the handler raised
        self.rescued = False

    def _handler(self, signum: int, frame: Any) -> None:
        self.fired += 1
        if self.fired == 1 and not self.done.is_set():
            raise Interrupted(f"signal {signum} while blocked")

    def __enter__(self) -> "MainInterrupt":
        if self.SIGNAL is None or not hasattr(signal, "pthread_kill"):
            fail("this check needs POSIX signals (signal.pthread_kill and SIGUSR1)")
        if threading.current_thread() is not threading.main_thread():
            fail("the interrupt checks must run in the main thread")
        self._main = threading.main_thread()
        self._old = signal.signal(self.SIGNAL, self._handler)
        self._helper = start_daemon(self._run, name="interrupter")
        return self

    def arm(self) -> None:
        """Called by the main thread right before the blocking call (not earlier: starting
        the helper thread itself waits in a Condition)."""
        self.armed.set()

    def _send(self) -> None:
        with self._lock:
            if not self._closed:
                self.sent += 1
                signal.pthread_kill(self._main.ident, self.SIGNAL)

    def _run(self) -> None:
        global _never_parks
        if not self.armed.wait(BOUND):
            return
        deadline = time.monotonic() + park_bound()
        while not (self.done.is_set() or parked(self._main)):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.001)
        if self.done.is_set():
            return  # the call did not block at all
        self.parked = parked(self._main)
        _never_parks = _never_parks or not self.parked
        self._send()  # sent even if it never parked: the signal also ends a spin or sleep
        last, deadline = time.monotonic(), time.monotonic() + BOUND
        while not self.done.is_set() and time.monotonic() < deadline:
            if parked(self._main):
                if self.fired:
                    self.swallowed = True  # the handler raised, and the call waits again
                    break
                if time.monotonic() - last >= self.RESEND:
                    self._send()
                    last = time.monotonic()
            time.sleep(0.001)
        if not self.done.is_set():
            self.rescued = True
            start_daemon(self._rescue, name="rescue")

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self._helper.join(BOUND)
        with self._lock:
            self._closed = True
        # Every signal sent so far reaches the main thread at its next system call; a few
        # short sleeps let its (no longer raising) handler run before the old one returns.
        for _ in range(3):
            time.sleep(0.001)
        signal.signal(self.SIGNAL, self._old)
