"""Deterministic scenarios exposing the P01 corpus variants (run by ``expose.py``).

``python tests/selftest/unseen/expose_p01.py NAME PATH`` runs scenario NAME against the
OutputSink in PATH and prints ``ok`` (exit 0) or ``BROKEN: ...`` (exit 1).
"""
from __future__ import annotations

import asyncio
import collections
import sys
import threading
import time

from _scenario import expect, in_thread, main

BOUND = 2.0


def _run(coro, bound: float = BOUND):
    """asyncio.run(coro) in a helper thread, bounded: a hang is reported, not waited out."""
    out = in_thread(asyncio.run, coro, name="consumer-loop")
    expect(out.wait(bound), f"the consumer did not finish within {bound} s")
    if out.error is not None:
        raise out.error
    return out.value


def none_item_ends_drain(mod):
    async def go():
        sink = mod.OutputSink()
        sink.bind_loop()
        sink.put(None)
        sink.put("x")
        return await sink.get_batch(timeout=0.2)
    got = _run(go())
    expect(got == [None, "x"], f"put(None); put('x'); get_batch() returned {got!r}, "
                               "expected [None, 'x']: the None item was lost")


def wall_clock_deadline(mod):
    real = time.time
    calls = [0]

    def stepped_back():  # the wall clock is set back an hour right after the first reading
        calls[0] += 1
        return real() if calls[0] == 1 else real() - 3600.0

    async def go():
        sink = mod.OutputSink()
        sink.bind_loop()
        started = time.monotonic()
        got = await asyncio.wait_for(sink.get_batch(timeout=0.1), 1.5)
        return got, time.monotonic() - started

    time.time = stepped_back
    try:
        got, took = _run(go())
    except asyncio.TimeoutError:  # the 1.5 s bound of go() ran out
        got, took = None, None
    finally:
        time.time = real
    expect(took is not None and got == [] and took < 1.0,
           "get_batch(timeout=0.1) with the wall clock set back an hour did not return [] "
           "within 1.5 s (the deadline follows the wall clock)")


class _SlowLoop:
    """A loop wrapper whose call_soon_threadsafe delivers the callback 0.3 s late."""

    def __init__(self, loop):
        self.loop = loop

    def call_soon_threadsafe(self, cb, *args):
        timer = threading.Timer(0.3, self.loop.call_soon_threadsafe, (cb, *args))
        timer.daemon = True
        timer.start()


def timeout_skips_last_drain(mod):
    async def go():
        loop = asyncio.get_running_loop()
        sink = mod.OutputSink()
        sink.bind_loop(_SlowLoop(loop))
        # While the consumer waits (deadline 0.2 s), the loop thread itself puts an item at
        # 0.05 s; its wakeup arrives only at 0.35 s, after the deadline.
        loop.call_later(0.05, sink.put, "x")
        return await sink.get_batch(timeout=0.2)
    got = _run(go())
    expect(got == ["x"], f"an item put at 0.05 s, its wakeup late, get_batch(timeout=0.2) "
                         f"returned {got!r}: at the deadline the item was queued")


def except_builtin_timeout_error(mod):
    async def go():
        sink = mod.OutputSink()
        sink.bind_loop()
        return await sink.get_batch(timeout=0.05)
    try:
        got = _run(go())
    except BaseException as exc:  # noqa: BLE001
        raise AssertionError(f"get_batch(timeout=0.05) raised {type(exc).__module__}."
                             f"{type(exc).__qualname__} on Python "
                             f"{sys.version.split()[0]} instead of returning []") from None
    expect(got == [], f"get_batch(timeout=0.05) returned {got!r}")


class _InjectingDeque(collections.deque):
    """Runs ``inject`` when popleft finds the deque empty for the ``at``-th time, then
    reports it empty: a put that lands just after that look (another thread's, in life)."""

    def __init__(self, at: int):
        super().__init__()
        self.at, self.empties, self.inject = at, 0, None

    def popleft(self):
        try:
            return super().popleft()
        except IndexError:
            self.empties += 1
            if self.empties == self.at and self.inject is not None:
                inject, self.inject = self.inject, None
                inject()
            raise


def flag_reset_after_second_drain(mod):
    async def go():
        sink = mod.OutputSink()
        sink.bind_loop()
        sink.put("a")  # a wakeup is now in flight ...
        first = await sink.get_batch(timeout=0.5)  # ... and this batch does not end its cycle
        await asyncio.sleep(0.01)  # let that wakeup's event.set() run: no stale wakeup later
        items = _InjectingDeque(at=2)  # the second drain of the next call
        sink._items = items
        items.inject = lambda: sink.put("b")
        started = time.monotonic()
        second = await sink.get_batch(timeout=0.5)
        return first, second, time.monotonic() - started
    first, second, took = _run(go())
    expect(second == ["b"] and took < 0.3,
           f"a put landing right after the second drain's look: get_batch(timeout=0.5) "
           f"returned {second!r} after {took:.2f} s, expected ['b'] at once (the put saw the "
           "old 'in flight' flag and scheduled no wakeup: a lost wakeup until the timeout)")


class _PausingLock:
    """Wraps a lock; the first release made by thread ``who`` waits for ``gate``."""

    def __init__(self, real, who, gate):
        self.real, self.who, self.gate, self.paused = real, who, gate, threading.Event()

    def __enter__(self):
        self.real.acquire()
        return self

    def __exit__(self, *exc):
        self.real.release()
        if threading.current_thread() is self.who and not self.paused.is_set():
            self.paused.set()
            self.gate.wait(BOUND)
        return False

    acquire = lambda self, *a, **k: self.real.acquire(*a, **k)  # noqa: E731
    release = lambda self: self.real.release()  # noqa: E731


class _CountingLoop:
    def __init__(self):
        self.calls = 0

    def call_soon_threadsafe(self, cb, *args):
        self.calls += 1


def check_then_set_split(mod):
    sink = mod.OutputSink()
    fake = _CountingLoop()
    sink.bind_loop(fake)
    gate = threading.Event()
    a = threading.Thread(target=lambda: sink.put("a"), daemon=True)
    lock = _PausingLock(sink._lock, a, gate)
    sink._lock = lock
    a.start()
    expect(lock.paused.wait(BOUND), "producer A never released the lock")
    b = in_thread(sink.put, "b")  # B runs its whole put while A is just past the lock
    b.wait(BOUND)
    gate.set()
    a.join(BOUND)
    expect(fake.calls == 1 and sink.wakeups_scheduled == 1,
           f"two puts in one cycle made {fake.calls} call_soon_threadsafe call(s) and counted "
           f"{sink.wakeups_scheduled} wakeup(s): at most one per cycle")


def event_created_in_init(mod):
    sink = mod.OutputSink()

    async def consume():
        sink.bind_loop()  # the consumer (re)binds on its loop, as the contract allows
        return await sink.get_batch(timeout=0.05)

    first = _run(consume())
    try:
        second = _run(consume())  # a new asyncio.run: a new loop
    except RuntimeError as exc:
        raise AssertionError(f"after bind_loop() on a second loop, get_batch raised "
                             f"RuntimeError: {exc}") from None
    expect(first == [] and second == [], f"got {first!r}, {second!r}")


class _PausingAppendDeque(collections.deque):
    """append() by thread ``who`` signals ``paused`` and waits for ``gate`` first."""

    def __init__(self):
        super().__init__()
        self.who, self.paused, self.gate = None, threading.Event(), threading.Event()

    def append(self, item):
        if threading.current_thread() is self.who:
            self.paused.set()
            self.gate.wait(BOUND)
        super().append(item)


class _GateOnAcquire:
    """Wraps a lock: when thread ``who`` acquires it, ``gate`` opens (after the acquire)."""

    def __init__(self, real, gate):
        self.real, self.gate, self.who = real, gate, None

    def __enter__(self):
        self.real.acquire()
        if threading.current_thread() is self.who:
            self.gate.set()
        return self

    def __exit__(self, *exc):
        self.real.release()
        return False


def abba_items_lock(mod):
    sink = mod.OutputSink()
    items = _PausingAppendDeque()

    async def go():
        sink.bind_loop()
        sink._items = items
        lock = _GateOnAcquire(sink._lock, items.gate)
        lock.who = threading.current_thread()  # the consumer (the loop thread)
        sink._lock = lock
        producer = threading.Thread(target=lambda: sink.put("x"), daemon=True)
        items.who = producer

        def hook():  # after the empty drain: start a producer and let it reach its append
            sink.after_empty_drain = None
            producer.start()
            items.paused.wait(BOUND)

        sink.after_empty_drain = hook
        # The consumer now arms (taking the flag lock: the producer's append goes on) and
        # drains again.
        return await sink.get_batch(timeout=1.0)

    got = _run(go(), bound=3.0)
    expect(got == ["x"], f"got {got!r}")


def cancel_swallowed(mod):
    async def go():
        sink = mod.OutputSink()
        sink.bind_loop()
        task = asyncio.ensure_future(sink.get_batch(timeout=1.0))
        asyncio.get_running_loop().call_later(0.05, task.cancel)
        started = time.monotonic()
        try:
            got = await task
        except asyncio.CancelledError:
            return "cancelled", time.monotonic() - started
        return got, time.monotonic() - started
    what, took = _run(go())
    expect(what == "cancelled" and took < 0.5,
           f"a get_batch(timeout=1.0) cancelled after 0.05 s ended with {what!r} after "
           f"{took:.2f} s, not with CancelledError at once")


def remaining_read_at_turn_start(mod):
    async def go():
        sink = mod.OutputSink()
        sink.bind_loop()
        sink.after_empty_drain = lambda: time.sleep(0.3)  # a slow turn (the hook is a test's)
        started = time.monotonic()
        got = await sink.get_batch(timeout=0.2)
        return got, time.monotonic() - started
    got, took = _run(go())
    expect(got == [] and took < 0.45,
           f"get_batch(timeout=0.2) with a 0.3 s hook returned {got!r} after {took:.2f} s: "
           "the deadline had passed when the hook returned (expected about 0.3 s)")


def asyncio_timeout_context(mod):
    except_builtin_timeout_error(mod)


SCENARIOS = {name: fn for name, fn in list(globals().items())
             if callable(fn) and not name.startswith("_") and fn.__module__ == __name__
             and name not in ("main", "expect", "in_thread")}

#: Scenarios that show their mistake only under another interpreter.
PYTHON = {"except_builtin_timeout_error": "3.10", "asyncio_timeout_context": "3.10"}

if __name__ == "__main__":
    sys.exit(main(SCENARIOS, sys.argv))
