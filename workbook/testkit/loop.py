"""asyncio under the harness: an await bounded so the stuck detector may end it early, and
``LoopThread``, an event loop in a daemon thread that a test drives from outside."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import deque
from typing import Any, Callable

from workbook.stuck.detector import DETECTOR
from workbook.stuck.model import Verdict
from workbook.stuck.procfs import note_tid
from workbook.testkit.checks import Hung
from workbook.testkit.threads import asleep_in_selector, interrupt_thread
from workbook.testkit.waits import raise_outcome, wait_outcome, wait_until
from workbook.tuning import BOUND


class Guard:
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
    guard = Guard(loop, task, time.monotonic() + timeout)
    guard.handle = loop.call_later(timeout, guard.expire)
    with DETECTOR.guards_lock:
        DETECTOR.guards.add(guard)
    try:
        try:
            return await task
        except asyncio.CancelledError:
            if guard.expired:
                raise asyncio.TimeoutError() from None
            raise
    finally:
        guard.handle.cancel()
        with DETECTOR.guards_lock:
            DETECTOR.guards.discard(guard)
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
        note_tid(self.thread)  # before any code under test runs here (``procfs.kernel_tid``)
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
        found = wait_outcome(future.done, lambda t: concurrent.futures.wait([future], t), timeout,
                      what=what)
        if found is None:
            return future.result()
        self.abandon(future)
        raise_outcome(found, what, f"{what} did not finish within {timeout:g} s", pitfall)

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
        return wait_outcome(done.is_set, done.wait, timeout, what="the loop thread") is None

    def idle(self) -> bool:
        """True while the loop thread sleeps in its selector with no callback ready to run."""
        ready = self.loop._ready
        # deque's own length: a look-alike put there by the code under test is never idle
        return asleep_in_selector(self.thread) and type(ready) is deque and \
            deque.__len__(ready) == 0

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
        if wait_outcome(lambda: not thread.is_alive(), thread.join, BOUND,
                 what="the loop thread to stop") is None:
            self.loop.close()

    def __enter__(self) -> "LoopThread":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
