"""Deterministic scenarios exposing the P04 corpus variants (run by ``expose.py``).

``python tests/selftest/unseen/expose_p04.py NAME PATH``: ``ok`` (exit 0) or ``BROKEN: ...``
(exit 1).  Each scenario runs its loop in a fresh daemon thread, so nothing is current
before it starts.
"""
from __future__ import annotations

import sys
import threading
import time

from _scenario import expect, in_thread, main, parked_in

BOUND = 2.0


def _fresh(fn, bound=BOUND):
    """Run ``fn()`` in a new thread (no current loop there yet), bounded."""
    out = in_thread(fn, name="loop-thread")
    expect(out.wait(bound), f"the scenario's loop thread did not finish within {bound} s")
    if out.error is not None:
        raise out.error
    return out.value


def wake_outside_lock(mod):
    """A thread's add_callback is paused at its first line run with the loop's lock free
    after having held it; the loop is closed meanwhile."""
    def go():
        loop = mod.IOLoop()
        lock = loop._lock  # placement only: where "after the lock" is
        paused, resume = threading.Event(), threading.Event()
        held = [False]

        def tracer(frame, event, arg):
            if frame.f_code.co_name != "add_callback":
                return None

            def local(frame, event, arg):
                if lock.locked():
                    held[0] = True
                elif held[0] and event == "line" and not paused.is_set():
                    paused.set()
                    resume.wait(BOUND)
                return local
            return local

        def other():
            sys.settrace(tracer)
            try:
                loop.add_callback(lambda: None)
            finally:
                sys.settrace(None)

        out = in_thread(other, name="other-thread")
        deadline = time.monotonic() + BOUND
        while not (paused.is_set() or out.done.is_set()) and time.monotonic() < deadline:
            time.sleep(0.001)
        loop.close()
        resume.set()
        expect(out.wait(BOUND), "add_callback did not return")
        expect(out.error is None, f"add_callback from another thread, racing close(), raised "
                                  f"{out.error!r}: on a closed loop it drops the callback")
    _fresh(go)


class _Waker:
    """Proxy of the loop's waker write end; close() lets another thread add a callback."""

    def __init__(self, loop, real):
        self.loop, self.real, self.other = loop, real, None

    def send(self, data):
        return self.real.send(data)

    def fileno(self):
        return self.real.fileno()

    def setblocking(self, flag):
        return self.real.setblocking(flag)

    def close(self):
        self.real.close()
        self.other = in_thread(self.loop.add_callback, lambda: None, name="other-thread")
        self.other.wait(0.5)


def close_marks_closed_last(mod):
    def go():
        loop = mod.IOLoop()
        proxy = _Waker(loop, loop._waker_w)
        loop._waker_w = proxy
        loop.close()
        other = proxy.other
        expect(other is not None and other.wait(BOUND), "add_callback did not return")
        expect(other.error is None, f"add_callback from another thread while close() was "
                                    f"half done raised {other.error!r}")
    _fresh(go)


def current_shared_across_threads(mod):
    def go():
        mine = mod.IOLoop()
        theirs = _fresh(mod.IOLoop.current)
        expect(theirs is not mine, "IOLoop.current() in another thread returned this thread's "
                                   "loop")
        expect(mod.IOLoop.current() is mine, "this thread's current loop changed when another "
                                             "thread asked for its own")
    _fresh(go)


def wait_from_turn_start_clock(mod):
    def go():
        loop = mod.IOLoop()
        times = {}

        def slow():
            times["set"] = time.monotonic()
            loop.call_later(0.3, fire)
            time.sleep(0.6)  # a long callback: the timeout is due before it ends

        def fire():
            times["fired"] = time.monotonic()
            loop.stop()

        loop.add_callback(slow)
        loop.call_later(3.0, loop.stop)
        loop.start()
        loop.close()
        return times
    times = _fresh(go, bound=5.0)
    late = times.get("fired", float("inf")) - times["set"]
    expect(late < 0.8, f"call_later(0.3) made at the start of a 0.6 s callback fired after "
                       f"{late:.2f} s: it was due when the callback ended (about 0.6 s)")


def later_failure_note(mod):
    def go():
        loop = mod.IOLoop()

        def failing(msg):
            f = mod.Future()
            loop.call_later(0.01, f.set_exception, ValueError(msg))
            return f

        @mod.coroutine
        def both():
            yield [failing("first"), failing("second")]

        try:
            loop.run_sync(both, timeout=1.0)
        except ValueError as exc:
            return str(exc)
        except BaseException as exc:  # noqa: BLE001
            return exc
        finally:
            loop.close()
        return None
    got = _fresh(go, bound=4.0)
    expect(got == "first", f"a multi whose two children fail: run_sync gave {got!r} on Python "
                           f"{sys.version.split()[0]}, expected ValueError('first')")


def zero_timeout_means_none(mod):
    def go():
        loop = mod.IOLoop()

        @mod.coroutine
        def never():
            yield mod.Future()  # nobody completes it

        try:
            loop.run_sync(never, timeout=0)
        except TimeoutError:
            return "TimeoutError"
        return "returned"
    out = in_thread(go, name="loop-thread")
    expect(out.wait(1.0), "run_sync(func, timeout=0) on a coroutine that never finishes did "
                          "not raise TimeoutError within 1 s (timeout=0 read as 'no timeout')")
    expect(out.value == "TimeoutError", f"run_sync gave {out.error or out.value!r}")


def wall_clock_time(mod):
    real = time.time

    def go():
        loop = mod.IOLoop()
        loop.call_later(0.1, loop.stop)
        time.time = lambda: real() - 3600.0  # the wall clock is set back an hour
        try:
            loop.start()
        finally:
            time.time = real
        loop.close()
    out = in_thread(go, name="loop-thread")
    finished = out.wait(1.5)
    time.time = real
    expect(finished, "call_later(0.1) did not fire within 1.5 s after the wall clock was "
                     "set back an hour (IOLoop.time() follows the wall clock)")


def loop_thread_fixed_at_creation(mod):
    loop = mod.IOLoop()  # made here ...
    started, done = threading.Event(), threading.Event()
    loop.add_callback(started.set)
    runner = in_thread(loop.start, name="loop-thread")  # ... run there
    expect(started.wait(BOUND), "the loop never ran its first callback")
    expect(parked_in(runner.thread, ("select", "poll")), "the loop did not go to sleep")
    loop.add_callback(done.set)  # from this thread, which is not the loop thread
    woke = done.wait(1.0)
    loop.add_callback(loop.stop)
    if not woke:  # let the sleeping loop see the stop: write its waker by hand
        loop._waker_w.send(b"x")
    runner.wait(BOUND)
    expect(woke, "a loop made in one thread and started in another: add_callback from the "
                 "first thread did not wake it (lost wakeup)")


def duplicate_callback_dropped(mod):
    f = mod.Future()
    calls = []
    f.add_done_callback(calls.append)
    f.add_done_callback(calls.append)  # registered twice: runs twice
    f.set_result(1)
    expect(len(calls) == 2, f"a callback registered twice ran {len(calls)} time(s)")


def close_resets_current_unconditionally(mod):
    def go():
        a = mod.IOLoop()
        b = mod.IOLoop()  # b is current now
        a.close()
        expect(mod.IOLoop.current() is b, "closing loop A (not current) changed the thread's "
                                          "current loop B")
        b.close()
    _fresh(go)


class _PausingList(list):
    """The loop's callback list; the first append by thread ``who`` waits (bounded) until
    the loop has taken this list, as a preempted thread would."""

    def __init__(self, loop):
        super().__init__()
        self.loop, self.who, self.paused = loop, None, threading.Event()

    def append(self, item):
        if threading.current_thread() is self.who and not self.paused.is_set():
            self.paused.set()
            self.loop._waker_w.send(b"x")  # the loop wakes while this append is held
            deadline = time.monotonic() + 0.5
            while self.loop._callbacks is self and time.monotonic() < deadline:
                time.sleep(0.001)  # placement: until the loop has swapped the list out
        super().append(item)


def take_without_lock(mod):
    loop = mod.IOLoop()
    started, ran = threading.Event(), threading.Event()
    loop.add_callback(started.set)
    runner = in_thread(loop.start, name="loop-thread")
    expect(started.wait(BOUND), "the loop never ran its first callback")
    expect(parked_in(runner.thread, ("select", "poll")), "the loop did not go to sleep")
    pausing = _PausingList(loop)
    loop._callbacks = pausing  # the (empty) list the next add_callback appends to
    pausing.who = threading.current_thread()
    loop.add_callback(ran.set)  # from a thread that is not the loop thread
    woke = ran.wait(1.0)
    loop.add_callback(loop.stop)
    loop._waker_w.send(b"x")
    runner.wait(BOUND)
    loop.close()
    expect(woke, "a callback added from another thread while the loop took its list never "
                 "ran: it went into the list the loop had already taken")


def second_remove_raises(mod):
    def go():
        loop = mod.IOLoop()
        handle = loop.call_later(1.0, lambda: None)
        loop.remove_timeout(handle)
        try:
            loop.remove_timeout(handle)
        except Exception as exc:  # noqa: BLE001
            raise AssertionError(f"a second remove_timeout of one handle raised {exc!r}; "
                                 "tornado ignores it") from None
        finally:
            loop.close()
    _fresh(go)


SCENARIOS = {name: fn for name, fn in list(globals().items())
             if callable(fn) and not name.startswith("_") and fn.__module__ == __name__
             and name not in ("main", "expect", "in_thread", "parked_in")}
PYTHON = {"later_failure_note": "3.10"}

if __name__ == "__main__":
    sys.exit(main(SCENARIOS, sys.argv))
