"""Test helpers for P04: run a learner's IOLoop in a daemon thread, observe it, gate it.

Every wait is bounded; a loop that hangs fails its checkpoint and is interrupted so it does
not keep a CPU busy for the rest of the run.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable

from workbook.testkit import (BOUND, DaemonThread, asleep_in_selector, fail, finished,
                              interrupt_thread, run_hooked, start_daemon, wait_event)

LOCK_TYPE = type(threading.Lock())


class ModuleApi:
    """The scenarios' adapter for a module with this exercise's API (learner or reference)."""

    def __init__(self, module) -> None:
        self.module = module
        self.Future = module.Future
        self.coroutine = module.coroutine
        self.moment = module.moment
        self.Return = module.Return
        self.BadYieldError = module.BadYieldError
        self.InvalidStateError = module.InvalidStateError
        self.IOLoop = module.IOLoop

    def loop(self):
        return self.module.IOLoop.current()

    def done(self, value):
        future = self.module.Future()
        future.set_result(value)
        return future

    def run(self, main: Callable[[], Any], *, what: str, pitfall: str | None = None):
        return run_on_fresh_loop(self.module, main, what=what, pitfall=pitfall)

    def in_thread(self, body: Callable[[], Any], *, what: str, pitfall: str | None = None):
        return run_in_fresh_thread(body, what=what, pitfall=pitfall)


def run_scenario(api, scenario, **kwargs) -> tuple[list, Any]:
    """Run one scenario of ``tests.p04.scenarios``; returns (events, main's result).

    A scenario of ``THREAD_SCENARIOS`` is the body of a fresh thread; any other one returns
    the ``main`` that run_sync drives.  If it raises, the exception is recorded as the last
    event (so a wrong order is shown next to the expected one) and the result is None."""
    from tests.p04.scenarios import THREAD_SCENARIOS

    events: list = []
    what = f"the scenario '{scenario.__name__}'"
    try:
        if scenario in THREAD_SCENARIOS:
            result = api.in_thread(lambda: scenario(api, events.append), what=what, **kwargs)
        else:
            result = api.run(scenario(api, events.append), what=what, **kwargs)
    except (AssertionError, NotImplementedError):
        raise
    except Exception as exc:  # noqa: BLE001 - becomes part of the recorded order
        events.append(f"main raised {type(exc).__name__}: {exc}")
        result = None
    return events, result


def run_on_fresh_loop(impl, main: Callable[[], Any], *, what: str, timeout: float = 2 * BOUND,
                      pitfall: str | None = None) -> Any:
    """``IOLoop.current().run_sync(main)`` in a new daemon thread (so a new loop), closed after.

    run_sync gets no timeout of its own: a loop that will never finish then sleeps in an
    untimed select(), which the stuck detector recognises at once, instead of waiting out a
    timer of the learner's.  Fails (naming ``pitfall``) if it has not returned within
    ``timeout`` seconds or is seen stuck."""

    def body():
        loop = impl.IOLoop.current()
        try:
            return loop.run_sync(main)
        finally:
            try:
                loop.close()
            except Exception:  # noqa: BLE001 - closing is not what this check is about
                pass

    thread = start_daemon(body, name="ioloop")
    if not finished(thread, timeout, what=f"{what}: run_sync"):
        interrupt_thread(thread)
        fail(f"{what}: run_sync(main) had not returned (the loop is stuck, or still running "
             f"after {timeout:g} s)", pitfall=pitfall)
    if thread.error is not None:
        raise thread.error
    return thread.result


def run_in_fresh_thread(body: Callable[[], Any], *, what: str, timeout: float = 3 * BOUND,
                        pitfall: str | None = None) -> Any:
    """``body()`` in a new daemon thread (bounded); its result, or what it raised."""
    thread = start_daemon(body, name="scenario")
    if not finished(thread, timeout, what=what):
        interrupt_thread(thread)
        fail(f"{what}: had not finished (a loop is stuck, or still running after "
             f"{timeout:g} s)", pitfall=pitfall)
    if thread.error is not None:
        raise thread.error
    return thread.result


class ServedLoop:
    """A learner's IOLoop running ``start()`` in a daemon thread; the test thread is free to
    play the other threads, to gate the loop and to look at it."""

    def __init__(self, impl, *, pump: float | None = None) -> None:
        """``pump``: seconds between turns forced by a self-re-arming timeout, so that a
        check that is not about wakeups still runs on a loop that never wakes itself."""
        self.impl = impl
        self.loop = None
        created = threading.Event()
        started = threading.Event()

        def body():
            self.loop = impl.IOLoop.current()
            created.set()
            self.loop.add_callback(started.set)  # from the loop thread: runs once start() runs
            if pump is not None:
                def tick():
                    self.loop.call_later(pump, tick)
                self.loop.add_callback(tick)
            self.loop.start()

        self.thread: DaemonThread = start_daemon(body, name="ioloop")
        if not self._wait(created):
            self._raise_thread_error()
            fail(f"IOLoop.current() did not return within {BOUND:g} s")
        if not self._wait(started):
            self._raise_thread_error()
            fail(f"start() did not run a callback added before it within {BOUND:g} s")

    def _wait(self, event: threading.Event) -> bool:
        """Wait (bounded) for ``event``; give up at once if the loop thread has died."""
        deadline = time.monotonic() + BOUND
        while not event.wait(0.01):
            if not self.thread.is_alive() or time.monotonic() >= deadline:
                return event.is_set()
        return True

    def _raise_thread_error(self) -> None:
        if self.thread.error is not None:
            raise self.thread.error

    @property
    def ident(self) -> int | None:
        return self.thread.ident

    def idle(self) -> bool:
        """True while the loop thread sleeps in a ``selectors`` selector's ``select()``."""
        return asleep_in_selector(self.thread)

    def wait_idle(self, timeout: float = BOUND) -> bool:
        """Wait (bounded) until the loop thread is asleep in select(); False if it never is."""
        deadline = time.monotonic() + timeout
        while not self.idle():
            if time.monotonic() >= deadline or not self.thread.is_alive():
                return False
            time.sleep(0.001)  # polling for a state, bounded
        return True

    def gate(self) -> "Gate":
        """Park the loop thread inside a callback until the gate is opened."""
        gate = Gate()
        self.loop.add_callback(gate.hold)
        if not wait_event(gate.entered, BOUND, what="a gate callback added from another thread"):
            fail(f"a callback added from another thread did not run within {BOUND:g} s "
                 "(the loop was not woken)", pitfall="never_wake")
        return gate

    def call(self, fn: Callable[[], Any], *, what: str) -> Any:
        """Run ``fn()`` on the loop thread and return its result (bounded)."""
        box: dict = {}
        done = threading.Event()

        def run():
            try:
                box["result"] = fn()
            except BaseException as exc:  # handed to the test thread
                box["error"] = exc
            finally:
                done.set()

        self.loop.add_callback(run)
        if not wait_event(done, BOUND, what=what):
            fail(f"{what}: a callback added from the test thread did not run within "
                 f"{BOUND:g} s", pitfall="never_wake" if self.idle() else None)
        if "error" in box:
            raise box["error"]
        return box["result"]

    def close(self) -> None:
        if self.loop is None or not self.thread.is_alive():
            return
        try:
            self.loop.add_callback(self.loop.stop)
        except Exception:  # noqa: BLE001 - a broken loop must not break the teardown
            pass
        # Bounded, and cut short when the loop is seen asleep for good (it was never woken).
        if not finished(self.thread, 1.0, what="stopping the loop", record=False):
            try:
                self.loop.stop()  # from another thread: wakes a loop stuck in select()
            except Exception:  # noqa: BLE001
                pass
            finished(self.thread, 1.0, what="stopping the loop", record=False)
        if self.thread.is_alive():
            interrupt_thread(self.thread)  # a spinning loop (asleep in select: harmless)
            return
        try:
            self.loop.close()
        except Exception:  # noqa: BLE001
            pass


class Gate:
    """A callback that holds the loop thread until ``open()`` (bounded)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._open = threading.Event()

    def hold(self) -> None:
        self.entered.set()
        self._open.wait(BOUND)

    def open(self) -> None:
        self._open.set()


def loop_locks_held(loop) -> bool:
    """True if a lock stored on ``loop`` is held (by the calling thread, in our uses)."""
    for value in list(vars(loop).values()):
        if isinstance(value, LOCK_TYPE):
            if value.locked():
                return True
        elif hasattr(value, "_is_owned"):  # RLock, Condition
            try:
                if value._is_owned():
                    return True
            except Exception:  # noqa: BLE001
                continue
    return False


def traced_call(loop, fn: Callable[[], Any], on_unlocked_line: Callable[[int], None]) -> Any:
    """Call ``fn()`` with a line tracer on the loop's own methods.

    Before each line of a method of ``loop`` that runs while no lock of the loop is held,
    ``on_unlocked_line(n)`` is called with n = 1, 2, ... -- the seams where another thread
    could slip in between two steps of, say, ``add_callback``."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line" and not loop_locks_held(loop):
            count += 1
            on_unlocked_line(count)
        return local

    def tracer(frame, event, arg):
        if event == "call" and frame.f_locals.get("self") is loop:
            return local
        return None

    return run_hooked(fn, trace=tracer)


def resumption_frames() -> tuple[int, int]:
    """Called inside a coroutine: (stack depth, frames named 'run') of whoever resumed it."""
    frame = sys._getframe(1)
    depth = runs = 0
    while frame is not None:
        depth += 1
        runs += frame.f_code.co_name == "run"
        frame = frame.f_back
    return depth, runs
