"""Test doubles for P01: a stand-in for the loop handed to ``bind_loop``."""
from __future__ import annotations

import collections
import inspect
import queue
import threading
from typing import Any, Callable

from workbook.testkit import (BOUND, is_submission_code, join, kernel_state, parked,
                              run_hooked, start_daemon, wait_until)


class LoopWrapper:
    """Passed to ``bind_loop`` in place of the real loop.

    Counts ``call_soon_threadsafe`` calls, remembers the first callback (so a test can
    deliver spurious wakeups with it), and can pause the producer right after forwarding a
    wakeup (``after_forward``) to force an interleaving.  Everything else goes to the loop.
    """

    def __init__(self, loop) -> None:
        self._loop = loop
        self._lock = threading.Lock()  # guards calls and first_callback
        self.calls = 0
        self.first_callback: tuple[Callable[..., Any], tuple] | None = None
        self.after_forward: Callable[[], None] | None = None

    def call_soon_threadsafe(self, callback, *args, **kwargs):
        with self._lock:
            self.calls += 1
            if self.first_callback is None:
                self.first_callback = (callback, args)
        handle = self._loop.call_soon_threadsafe(callback, *args, **kwargs)
        if self.after_forward is not None:
            self.after_forward()
        return handle

    def spurious_wakeup(self) -> None:
        """Deliver the remembered wakeup callback once more, with nothing new queued."""
        callback, args = self.first_callback
        self._loop.call_soon_threadsafe(callback, *args)

    def __getattr__(self, name: str):
        return getattr(self._loop, name)


def lost_wakeup_pitfall(sink, wrapper: LoopWrapper, default: str | None) -> tuple[str | None, str]:
    """Name the likely cause when a consumer slept through a put from another thread."""
    if wrapper.calls == 0 and sink.wakeups_scheduled > 0:
        return "set_from_producer", (
            f"wakeups_scheduled is {sink.wakeups_scheduled} but the call_soon_threadsafe of "
            "the object given to bind_loop was never called: setting the event from the "
            "producer thread (or waking some other loop) does not wake the bound loop")
    if wrapper.calls == 0:
        return "asyncio_queue", (
            "put() never called the bound loop's call_soon_threadsafe, so nothing woke the "
            "loop sleeping in select() (asyncio objects are not thread-safe)")
    return default, (f"call_soon_threadsafe was called {wrapper.calls} time(s), "
                     f"wakeups_scheduled is {sink.wakeups_scheduled}")


class PutPartner:
    """A producer thread that does one ``sink.put(n)`` each time it is asked, and records
    what each put raised.  ``step()`` asks for one put and returns once it has finished or
    the partner is parked (blocked, e.g. on a lock the asking thread holds)."""

    def __init__(self, sink) -> None:
        self.sink = sink
        self.put_items: list[int] = []
        self.errors: list[BaseException] = []
        self._requests: "queue.SimpleQueue[int | None]" = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._next = 0
        self.thread = start_daemon(self._serve, name="racing-producer")

    def _serve(self) -> None:
        while True:
            try:
                n = self._requests.get(timeout=4 * BOUND)
            except queue.Empty:
                return
            if n is None:
                return
            try:
                self.sink.put(n)
                self.put_items.append(n)
            except BaseException as exc:  # recorded for the test to report
                self.errors.append(exc)
            finally:
                self._idle.set()

    def step(self) -> None:
        if not self._idle.is_set():
            return  # the previous put has not finished: it is blocked, leave it be
        self._idle.clear()
        self._requests.put(self._next)
        self._next += 1
        wait_until(lambda: self._idle.is_set() or self._blocked(),
                   what="a put() racing bind_loop() finished or blocked")

    def _blocked(self) -> bool:
        return parked(self.thread, 0.02) and not self._idle.is_set() \
            and kernel_state(self.thread) not in ("R", None)

    def finish(self) -> None:
        """Wait for the last put, then stop the thread."""
        wait_until(self._idle.is_set, what="the last racing put() finished",
                   pitfall=None)
        self._requests.put(None)
        join(self.thread, what="the racing producer")


def run_interleaved(fn: Callable[[], Any], partner: PutPartner) -> Any:
    """Call ``fn()`` in this thread and let ``partner`` do one put before every line that
    runs in it in the submission's own code (``is_submission_code``): every interleaving of
    a put with ``fn`` at line granularity is tried once, whatever the code looks like.  A
    library call the code makes (``asyncio.new_event_loop()``, say) is one step: its
    thousands of lines publish nothing of the sink's."""
    def local(frame, event, arg):
        if event == "line":
            partner.step()
        return local

    def global_(frame, event, arg):
        if not is_submission_code(frame.f_code.co_filename):
            return None
        partner.step()  # before the first line of each call, too
        return local

    return run_hooked(fn, trace=global_)


# -- what a stuck diagnosis adds for P01 -----------------------------------------------------

#: The sinks the current test created (cleared by the conftest before each test).
live_sinks: list = []


def _queued(sink) -> int | None:
    """Items waiting in ``sink``, read off its containers: an explanation only, never a
    verdict (a design may keep them anywhere)."""
    try:
        values = list(vars(sink).values())
    except TypeError:
        return None
    found = [len(v) for v in values if isinstance(v, (collections.deque, list))]
    return sum(found) if found else None


def explain_stuck(snap) -> list[str]:
    """Stuck-detector hook: a loop asleep while a sink still holds items is a lost wakeup;
    say how many items wait and which put() should have woken it."""
    asleep = [look for look in snap.looks if look.loop is not None and look.state == "asleep"]
    if not asleep:
        return []
    lines = []
    for sink in live_sinks:
        queued = _queued(sink)
        if not queued:
            continue
        put = inspect.unwrap(getattr(type(sink), "put", None))  # under the honesty guard
        code = getattr(put, "__code__", None)
        where = f" (OutputSink.put, line {code.co_firstlineno})" if code else ""
        count = vars(sink).get("wakeups_scheduled", "?")  # never a property: no learner code
        lines.append(f"  the loop is asleep in select(); {queued} item{'s' * (queued != 1)} "
                     f"{'are' if queued != 1 else 'is'} queued in the sink; no wakeup reached "
                     f"the loop after the last put(){where}: wakeups_scheduled is {count}")
    return lines
