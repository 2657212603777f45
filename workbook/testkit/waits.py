"""Bounded waits: every wait of the harness ends -- done, timed out (with the threads that
burnt CPU meanwhile), or at once when the stuck detector sees that nothing can move (with
its verdict).  Each wait returns or raises what happened to *it*: two waits that time out
together each carry their own evidence."""
from __future__ import annotations

import concurrent.futures
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Union

from workbook.stuck.detector import DETECTOR, Watch
from workbook.stuck.frames import current_frames, stacks
from workbook.stuck.model import Verdict
from workbook.testkit.checks import Failure, note
from workbook.tuning import BOUND, LOOK_INTERVAL


@dataclass(frozen=True)
class TimedOut:
    """A bounded wait that ran out of time; ``spinning`` names the threads that burnt CPU
    through most of it, with their hottest learner line."""
    timeout: float
    spinning: tuple[str, ...] = ()
    slow: tuple[str, ...] = ()  # threads that slept in time.sleep through most of it
    gil: tuple[str, ...] = ()  # threads kept waiting for the GIL through most of it


#: What a bounded wait found: None (done), a Verdict (stuck) or TimedOut.
Outcome = Union[None, Verdict, TimedOut]


class Stuck(Failure):
    """A check stopped at once because nothing could move; ``verdict`` explains where."""

    def __init__(self, message: str, verdict: Verdict, pitfall: str | None = None) -> None:
        # A lock cycle is a certain diagnosis: a guess made for the timeout ("spins while
        # holding the lock", ...) would only mislead next to it.
        super().__init__(message, None if verdict.cycle else pitfall)
        self.verdict = verdict


class WaitTimedOut(Failure):
    """A bounded wait gave up after its timeout; ``timed_out`` holds the evidence."""

    def __init__(self, message: str, timed_out: TimedOut, pitfall: str | None = None) -> None:
        super().__init__(message, pitfall)
        self.timed_out = timed_out


def _timeout_message(text: str, found: TimedOut) -> str:
    extra = "\n".join(found.spinning + found.gil + found.slow)
    if found.slow:
        extra += f"\nthis check needs it done within {found.timeout:g} s"
    return text + ("\n" + extra if extra else "")


def raise_outcome(found: Outcome, what: str, timed_text: str, pitfall: str | None) -> None:
    """Raise what a wait found, unless it is done; a stuck verdict is recorded first."""
    if isinstance(found, Verdict):
        DETECTOR.record(found)
        raise Stuck(found.text, found, pitfall)
    if isinstance(found, TimedOut):
        if found.slow and not found.spinning:
            pitfall = None  # slowness is the evidence: no pitfall looks like it
        raise WaitTimedOut(_timeout_message(timed_text, found), found, pitfall)


def wait_outcome(ready: Callable[[], bool], block: Callable[[float], object], timeout: float, *,
          what: str) -> Outcome:
    """Wait until ``ready()``; None then.  A Verdict once the check is seen stuck, or
    TimedOut after ``timeout`` seconds."""
    detector = DETECTOR
    start = time.monotonic()
    deadline = start + timeout
    me = threading.get_ident()
    watch = Watch(what, deadline, detector)
    with detector.watchers_lock:
        outer = detector.watchers.get(me)
        detector.watchers[me] = deadline
    last_step = None
    try:
        while True:
            if ready():
                return None
            now = time.monotonic()
            if now >= deadline:
                return TimedOut(timeout, watch.spinning(), watch.sleeping(),
                                watch.waiting_for_gil())
            if last_step is None or now - last_step >= watch.interval:
                last_step = now
                try:
                    found = watch.step()
                except Exception as exc:  # noqa: BLE001 - the detector only ever helps:
                    found = None          # a fault of its own must not fail a check
                    if not detector.faults:
                        note(f"(the stuck detector failed and was skipped: "
                             f"{type(exc).__name__}: {exc})")
                    detector.faults.append(exc)
                if found is not None and not ready():
                    kind, value = found
                    if kind == "stuck":
                        return value
                    guard, verdict = value
                    detector.record(verdict)
                    guard.fire(verdict)
            block(max(0.0, min(watch.interval, deadline - time.monotonic())))
    finally:
        with detector.watchers_lock:
            if outer is None:
                detector.watchers.pop(me, None)
            else:
                detector.watchers[me] = outer


def _sleep(t: float) -> None:
    time.sleep(min(t, 0.001))


def join(thread, timeout: float = BOUND, *, what: str, pitfall: str | None = None) -> Any:
    """Wait for ``thread`` (a ``DaemonThread``); fail if it is still running after
    ``timeout`` seconds, or at once when the stuck detector sees that it never can finish.

    Re-raises what the thread raised (so a ``NotImplementedError`` reaches the harness)."""
    found = wait_outcome(lambda: not thread.is_alive(), thread.join, timeout, what=what)
    raise_outcome(found, what, f"{what} did not finish within {timeout:g} s "
           "(blocked or deadlocked?)", pitfall)
    if thread.error is not None:
        raise thread.error
    return thread.result


def finished(thread: threading.Thread, timeout: float = BOUND, *, what: str,
             record: bool = True) -> bool:
    """True once ``thread`` has ended; False after ``timeout`` seconds or once it is seen
    stuck (the verdict is kept for the report unless ``record`` is false: a teardown)."""
    return watch(lambda: not thread.is_alive(), timeout, what=what, record=record,
                 block=thread.join) is None


def wait_until(predicate: Callable[[], object], timeout: float = BOUND, *, what: str,
               pitfall: str | None = None, rest_is_success: bool = False) -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds, or at once when
    every thread is blocked and nothing can make it true.  With ``rest_is_success`` (the
    predicate asks for threads to come to rest), that stuck state ends the wait instead."""
    found = wait_outcome(lambda: bool(predicate()), _sleep, timeout, what=f"waiting until {what}")
    if isinstance(found, Verdict) and rest_is_success:
        return
    raise_outcome(found, f"waiting until {what}",
           f"gave up after {timeout:g} s waiting until {what}", pitfall)


def watch(predicate: Callable[[], object], timeout: float = BOUND, *, what: str,
          record: bool = True, block: Callable[[float], object] = _sleep) -> Outcome:
    """Wait until ``predicate()`` (None), the check is seen stuck (the Verdict, recorded
    unless ``record`` is false), or ``timeout`` passes (TimedOut): for helpers that word
    their own failures."""
    found = wait_outcome(lambda: bool(predicate()), block, timeout, what=what)
    if isinstance(found, Verdict) and record:
        DETECTOR.record(found)
    return found


def wait_event(event: threading.Event, timeout: float = BOUND, *, what: str,
               record: bool = True) -> bool:
    """``event.wait(timeout)``, but False at once when stuck (the verdict recorded unless
    ``record`` is false: a wait whose stuck end is an expected answer, not a failure)."""
    return watch(event.is_set, timeout, what=what, record=record, block=event.wait) is None


def done_within(future, timeout: float = BOUND, *, what: str = "the future") -> bool:
    """True once a concurrent future is done; False after ``timeout`` or once stuck."""
    return watch(future.done, timeout, what=what,
                 block=lambda t: concurrent.futures.wait([future], t)) is None


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
            raise Stuck(verdict.text, verdict)

    def _run(self) -> None:
        detector = DETECTOR
        detector.excluded.add(threading.get_ident())
        watch = None
        while True:
            time.sleep(LOOK_INTERVAL)
            main = self._main
            with detector.watchers_lock:
                waiting = main.ident in detector.watchers
            stack = stacks({main.ident}).get(main.ident, [])
            inside = any(detector.is_learner(f.f_code.co_filename) for f in stack)
            del stack  # not kept while this thread sleeps: a frame keeps its locals alive
            if not self.active or waiting or not inside:
                watch = None
                continue
            if watch is None:
                watch = Watch("the test", time.monotonic() + 3600.0, detector)
            found = watch.step()
            if found is None:
                continue
            kind, value = found
            if kind == "guard":
                guard, verdict = value
                detector.record(verdict)
                guard.fire(verdict)
                continue
            frame = current_frames().get(main.ident)
            if frame is None:
                continue
            detector.record(value)
            self._verdict = (value, (frame.f_code, frame.f_lineno))
            del frame
            signal.pthread_kill(main.ident, self.SIGNAL)
            watch = None
