"""Deterministic scenarios exposing the P03 corpus variants (run by ``expose.py``).

``python tests/selftest/unseen/expose_p03.py NAME PATH``: ``ok`` (exit 0) or ``BROKEN: ...``
(exit 1).  Some scenarios place an event at an exact instant by wrapping the queue's own
Conditions (every ``threading.Condition`` found on the instance), as the acceptance set's
spurious-wakeup test does: a stand-in for a scheduler that would reach the same instant.
"""
from __future__ import annotations

import gc
import sys
import threading
import time
import unittest.mock
import weakref

from _scenario import expect, in_thread, main, parked_in

BOUND = 2.0


def _conditions(q) -> list:
    return [v for v in vars(q).values() if isinstance(v, threading.Condition)]


def _wrap_waits(q, after):
    """Every Condition's wait on ``q`` calls ``after(thread, returned)`` once it returns;
    what ``after`` returns (or raises) is what the queue's wait call sees."""
    for cond in _conditions(q):
        real = cond.wait

        def wait(timeout=None, _real=real):
            returned = _real(timeout)
            return after(threading.current_thread(), returned)

        cond.wait = wait


def _parked(q, thread, timeout=BOUND) -> bool:
    """``thread`` is waiting inside one of the queue's Conditions (placement, not a verdict)."""
    return parked_in(thread, ("wait",), timeout)


class Item:
    pass


def passes_wakeup_on_exception_only(mod):
    q = mod.BoundedBlockingQueue(1)
    first = threading.Event()
    a_thread = []

    def after(thread, returned):
        if a_thread and thread is a_thread[0] and not first.is_set():
            first.set()
            raise KeyboardInterrupt  # Ctrl-C lands the instant A was notified
        return returned

    _wrap_waits(q, after)
    a = in_thread(q.take, name="taker-A")
    a_thread.append(a.thread)
    expect(_parked(q, a.thread), "taker A did not park")
    b = in_thread(q.take, name="taker-B")
    expect(_parked(q, b.thread), "taker B did not park")
    q.put("x")  # notify() picks A (the first waiter); A leaves with KeyboardInterrupt
    expect(a.wait(BOUND) and isinstance(a.error, KeyboardInterrupt),
           f"taker A ended with {a.error or a.value!r}")
    expect(b.wait(1.0), "taker A left with a KeyboardInterrupt right after it was notified; "
                        "taker B sleeps on although 'x' is queued (the wake-up was lost)")
    expect(b.value == "x", f"taker B got {b.value!r}")


def wall_clock_deadline(mod):
    q = mod.BoundedBlockingQueue(1)
    real = time.time
    calls = [0]

    def stepped_back():
        calls[0] += 1
        return real() if calls[0] == 1 else real() - 3600.0

    time.time = stepped_back
    try:
        out = in_thread(q.poll, 0.1)
        finished = out.wait(1.5)
    finally:
        time.time = real
    expect(finished, "poll(timeout=0.1) with the wall clock set back an hour did not return "
                     "within 1.5 s")
    expect(out.error is None and out.value is None, f"poll gave {out.error or out.value!r}")


def timed_out_wait_trusted(mod):
    q = mod.BoundedBlockingQueue(1)
    a_thread = []

    def after(thread, returned):  # A's timer expires at the very instant notify() picks it
        if a_thread and thread is a_thread[0]:
            return False
        return returned

    _wrap_waits(q, after)
    a = in_thread(q.poll, 5.0, name="poller-A")
    a_thread.append(a.thread)
    expect(_parked(q, a.thread), "poller A did not park")
    b = in_thread(q.take, name="taker-B")
    expect(_parked(q, b.thread), "taker B did not park")
    q.put("x")
    expect(a.wait(BOUND), "poller A did not return")
    if a.value == "x":
        return  # A took the item: nothing is left for B, which rightly sleeps on
    expect(b.wait(1.0), f"poller A returned {a.value!r} (its wait 'timed out' as notify() "
                        "chose it) and taker B sleeps on with 'x' queued: a lost wake-up")


def immediate_keeps_references(mod):
    q = mod.BoundedBlockingQueue(2)
    item = Item()
    ref = weakref.ref(item)
    q.put(item)
    q.shutdown(immediate=True)
    del item
    gc.collect()
    expect(ref() is None, "shutdown(immediate=True) discarded the item but the queue still "
                          "holds a reference to it")


def second_shutdown_ignored(mod):
    q = mod.BoundedBlockingQueue(2)
    q.put("left")
    q.shutdown()
    q.shutdown(immediate=True)
    try:
        got = q.poll()
    except mod.ShutDown:
        return
    raise AssertionError(f"after shutdown() then shutdown(immediate=True), poll() returned "
                         f"{got!r}: the second call must discard what is left")


def offer_full_fast_path(mod):
    q = mod.BoundedBlockingQueue(1)
    q.put("a")
    q.shutdown()
    try:
        got = q.offer("b")
    except mod.ShutDown:
        return
    raise AssertionError(f"offer() on a full, shut-down queue returned {got!r} instead of "
                         "raising ShutDown")


def none_checked_with_eq(mod):
    q = mod.BoundedBlockingQueue(2)
    try:
        q.put(unittest.mock.ANY)  # equal to everything, None included; not None
    except (TypeError, ValueError) as exc:
        raise AssertionError(f"put(mock.ANY) was refused: {exc!r}") from None
    expect(q.take() is unittest.mock.ANY, "the item came back changed")


def immediate_discard_after_unlock(mod):
    """The shutdown thread is paused at its first line run with the queue's lock free after
    having held it; meanwhile this thread puts (must raise ShutDown) and polls."""
    q = mod.BoundedBlockingQueue(2)
    q.put("x")
    lock = q._lock  # the only lock of this design; used to place the pause, not to judge
    paused, go = threading.Event(), threading.Event()
    held = [False]

    def tracer(frame, event, arg):
        if frame.f_code.co_name != "shutdown":
            return None

        def local(frame, event, arg):
            if lock.locked():
                held[0] = True
            elif held[0] and event == "line" and not paused.is_set():
                paused.set()
                go.wait(BOUND)
            return local
        return local

    def shut():
        sys.settrace(tracer)
        try:
            q.shutdown(immediate=True)
        finally:
            sys.settrace(None)

    t = in_thread(shut, name="shutdown")
    deadline = time.monotonic() + BOUND
    while not (paused.is_set() or t.done.is_set()) and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        try:
            q.put("y")
            put_says = "accepted"
        except mod.ShutDown:
            put_says = "ShutDown"
        try:
            got = q.poll()
        except mod.ShutDown:
            got = "ShutDown"
    finally:
        go.set()
        t.wait(BOUND)
    expect(not (put_says == "ShutDown" and got == "x"),
           "put() raised ShutDown (so shutdown(immediate=True) had taken effect), then poll() "
           "returned 'x', an item that shutdown was discarding: no one-at-a-time order of "
           "these calls gives that")


def offer_gives_up_on_busy_lock(mod):
    q = mod.BoundedBlockingQueue(2)
    lock = q._lock  # held for a moment, as any other thread's put or take holds it
    lock.acquire()
    release = threading.Timer(0.2, lock.release)
    release.start()
    got = q.offer("x")  # timeout=0: the queue has room
    release.join()
    expect(got is True, f"offer('x') on an empty queue of capacity 2 returned {got!r} "
                        "while another thread was inside an operation")


SCENARIOS = {name: fn for name, fn in list(globals().items())
             if callable(fn) and not name.startswith("_") and fn.__module__ == __name__
             and name not in ("main", "expect", "in_thread", "parked_in", "Item")}
PYTHON: dict = {}

if __name__ == "__main__":
    sys.exit(main(SCENARIOS, sys.argv))
