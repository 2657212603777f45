"""Acceptance set for P03 · BoundedBlockingQueue: the follow-up extensions.

offer/poll with a deadline, and shutdown (graceful and immediate).  A method that still
raises NotImplementedError makes its checkpoint "not attempted"; other extensions are only
used where they are implemented.
"""
from __future__ import annotations

import threading
import time

import pytest

from tests.p03.support import (abandon, call, conditions, finish, notify_all, quiet,
                               settle, wait_parked)
from workbook.testkit import (BOUND, check, fail, is_submission_code, kernel_state, note,
                              kernel_tid, parked, run_delay_seconds, run_hooked, start_daemon,
                              thread_cpu_seconds, wait_until)


def _optional(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, or ``NotImplemented`` if that extension is not attempted."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        return NotImplemented


def _raises(exc_type, fn, *args) -> bool:
    try:
        fn(*args)
    except exc_type:
        return True
    return False


# -- offer / poll ---------------------------------------------------------------------------

@pytest.mark.checkpoint("p03.timeouts")
def test_a_zero_timeout_never_blocks(impl):
    def scenario():
        q = impl.BoundedBlockingQueue(1)
        return (q.poll(), q.poll(0), q.offer("a"), q.offer("b", 0), len(q), q.poll(0),
                q.offer("c", 0.0), q.poll(timeout=0), len(q))

    got = call(scenario, what="poll()/offer() with timeout 0 on an empty and a full queue")
    want = (None, None, True, False, 1, "a", True, "c", 0)
    check(got == want, "poll(), poll(0), offer('a'), offer('b', 0), len(), poll(0), "
                       f"offer('c', 0.0), poll(timeout=0), len() on a capacity-1 "
                       f"queue gave {got!r}, expected {want!r}")


def _never_parks(fn, what: str):
    """``fn()`` in a daemon: its result; fails if the call is ever seen parked."""
    worker = start_daemon(fn, name=what)
    try:
        while worker.is_alive():
            if quiet(worker):
                fail(f"{what} blocked: with no timeout argument (default 0) it must "
                     "answer at once")
        if worker.error is not None:
            raise worker.error
        return worker.result
    finally:
        abandon(worker)


@pytest.mark.checkpoint("p03.timeouts")
def test_the_default_timeout_is_zero_and_never_blocks(impl):
    q = call(impl.BoundedBlockingQueue, 1, what="creating a capacity-1 queue")
    check(_never_parks(q.poll, "poll() on an empty queue") is None,
          "poll() on an empty queue should return None")
    check(_never_parks(lambda: q.offer("a"), "offer('a') on an empty queue") is True,
          "offer('a') on an empty queue should return True")
    check(_never_parks(lambda: q.offer("b"), "offer('b') on a full queue") is False,
          "offer('b') on a full queue should return False")
    check(_never_parks(q.poll, "poll() on a queue holding 'a'") == "a",
          "poll() should then return 'a'")
    big = 300  # above 256 equal ints are distinct objects: "full" must compare values
    q = call(lambda: impl.BoundedBlockingQueue(big), what=f"creating a capacity-{big} queue")
    call(lambda: [q.put(i) for i in range(big)], what=f"filling it with {big} items")
    check(_never_parks(lambda: q.offer("more"), f"offer() on a full capacity-{big} queue")
          is False, f"offer('more') on a full capacity-{big} queue should return False")
    check(call(len, q, what="len()") == big, "a refused offer() must not change the queue")


@pytest.mark.checkpoint("p03.timeouts")
def test_timed_calls_wait_parked_and_take_what_arrives_meanwhile(impl):
    q = call(impl.BoundedBlockingQueue, 1, what="creating a queue")
    call(q.poll, 0, what="poll(0)")
    poller = start_daemon(q.poll, 4 * BOUND, name="poll(long)")
    offerer = None
    try:
        wait_parked(poller, "poll(timeout) on an empty queue", q=q)
        call(q.put, "x", what="put('x') while a timed poll waits")
        check(finish(poller, "poll(timeout) after put('x')", pitfall="missing_notify") == "x",
              "the timed poll() should return 'x' as soon as it is put")
        call(q.put, "y", what="put('y')")
        offerer = start_daemon(q.offer, "z", 4 * BOUND, name="offer(long)")
        wait_parked(offerer, "offer('z', timeout) on a full queue", q=q)
        check(call(q.take, what="take()") == "y", "take() should return 'y'")
        check(finish(offerer, "offer('z', timeout) after take()", pitfall="missing_notify")
              is True, "the timed offer() should return True once the item is queued")
        check(call(q.take, what="take()") == "z", "take() should then return 'z'")
    finally:
        abandon(poller, *([offerer] if offerer else []))


@pytest.mark.checkpoint("p03.timeouts")
def test_calls_without_a_timeout_survive_wakeups_that_change_nothing(impl):
    q = call(impl.BoundedBlockingQueue, 1, what="creating a queue")
    call(q.poll, 0, what="poll(0)")
    conds = conditions(q)
    for what, fn, fill, want in (
        ("poll(None) on an empty queue", lambda: q.poll(None), None, "p"),
        ("offer('o', None) on a full queue", lambda: q.offer("o", None), "f", True),
    ):
        if fill is not None:
            call(q.put, fill, what=f"put({fill!r})")
        worker = start_daemon(fn, name=what)
        try:
            wait_parked(worker, what, q=q)
            if conds:
                for _ in range(3):
                    notify_all(conds)
                    settle(worker, f"{what} handled a wakeup that changed nothing")
                    check(worker.is_alive(),
                          f"{what} returned {worker.result!r} after a wakeup that changed "
                          "nothing: with no timeout it must re-check and wait again",
                          pitfall="if_not_while")
            else:
                note("the queue holds no Condition: no do-nothing wakeups could be delivered")
            if fill is None:
                call(q.put, "p", what="put('p')")
            else:
                check(call(q.take, what="take()") == fill, f"take() should return {fill!r}")
            check(finish(worker, f"{what}, once it can go on") == want,
                  f"{what} should return {want!r}")
            if fill is not None:
                check(call(q.take, what="take()") == "o", "take() should then return 'o'")
        finally:
            abandon(worker)


@pytest.mark.checkpoint("p03.timeouts")
def test_offer_refuses_none(impl):
    def scenario():
        q = impl.BoundedBlockingQueue(2)
        refused = _raises((TypeError, ValueError), q.offer, None)
        return refused, len(q)

    refused, size = call(scenario, what="offer(None)")
    check(refused, "offer(None) was accepted: poll() returning None would then be ambiguous")
    check(size == 0, f"after a refused offer(None), len() is {size}")


@pytest.mark.checkpoint("p03.timeouts")
def test_a_none_timeout_waits_until_it_can_proceed(impl):
    q = call(impl.BoundedBlockingQueue, 1, what="creating a queue")
    call(q.poll, 0, what="poll(0)")  # NotImplementedError surfaces here, not in a thread
    poller = start_daemon(q.poll, None, name="poll(None)")
    offerer = None
    try:
        wait_parked(poller, "poll(None) on an empty queue", q=q)
        call(q.put, "x", what="put('x') while poll(None) waits")
        check(finish(poller, "poll(None) after put('x')") == "x", "poll(None) missed 'x'")
        call(q.put, "y", what="put('y')")
        offerer = start_daemon(q.offer, "z", None, name="offer(None)")
        wait_parked(offerer, "offer('z', None) on a full queue", q=q)
        check(call(q.take, what="take()") == "y", "take() should return 'y'")
        check(finish(offerer, "offer('z', None) after take()") is True,
              "offer('z', None) should return True once it has queued the item")
        check(call(q.take, what="take()") == "z", "take() should then return 'z'")
    finally:
        abandon(poller, *([offerer] if offerer else []))


def _timed(thread_fn, timeout: float, wake: bool, q) -> tuple[object, float, bool, float]:
    """Run ``thread_fn`` (offer/poll with ``timeout``) in a daemon; with ``wake``, keep
    sending it do-nothing wakeups until it returns or the window below closes.

    Returns (result, seconds it took in all, finished inside the window, seconds of that
    spent ready to run but waiting for a CPU, by the worker or by this thread).  The window
    grows by that wait: on a crowded machine a worker whose deadline has passed may wait most
    of a second for a CPU to return on, or for the GIL held by this thread while the kernel
    has it waiting for a CPU, which says nothing about its code (a restarting one is parked
    instead, whatever the window)."""
    window = timeout + max(0.6, BOUND / 8)  # the reference needs `timeout` plus scheduling
    started = time.monotonic()
    worker = start_daemon(thread_fn)
    conds = conditions(q) if wake else []
    queued, mine = 0.0, run_delay_seconds()
    while worker.is_alive() and time.monotonic() - started < window + queued:
        if conds and quiet(worker, 0.01):
            notify_all(conds)
        worker.join(0.001)
        queued = max(queued, run_delay_seconds(kernel_tid(worker)) + run_delay_seconds() - mine)
    finished = not worker.is_alive()
    if not finished:
        worker.join(timeout + BOUND)  # it should at least finish once the wakeups stop
    if worker.is_alive():
        abandon(worker)
        fail(f"a call with timeout={timeout} was still waiting {window + timeout + BOUND:.1f} s "
             "after it started", pitfall="timeout_restarted" if wake else None)
    if worker.error is not None:
        raise worker.error
    return worker.result, time.monotonic() - started, finished, queued


@pytest.mark.checkpoint("p03.timeouts")
def test_poll_and_offer_give_up_at_their_deadline(impl):
    timeout = 0.2
    q = call(impl.BoundedBlockingQueue, 1, what="creating a queue")
    call(q.poll, 0, what="poll(0)")
    got, took, _, queued = _timed(lambda: q.poll(timeout), timeout, False, q)
    check(got is None, f"poll({timeout}) on an empty queue returned {got!r}, expected None")
    late = timeout + max(0.6, BOUND / 8)  # scheduling on a busy machine; far below 1 s
    check(took >= timeout - 0.01, f"poll({timeout}) gave up after only {took:.3f} s")
    check(took - queued <= late, f"poll({timeout}) gave up only after {took:.3f} s: the deadline "
                        "was not kept (is the time left computed right?)")
    call(q.put, "a", what="put('a')")
    got, took, _, queued = _timed(lambda: q.offer("b", timeout), timeout, False, q)
    check(got is False, f"offer('b', {timeout}) on a full queue returned {got!r}, expected False")
    check(took >= timeout - 0.01, f"offer('b', {timeout}) gave up after only {took:.3f} s")
    check(took - queued <= late, f"offer('b', {timeout}) gave up only after {took:.3f} s: the "
                        "deadline was not kept (is the time left computed right?)")
    check(call(lambda: (len(q), q.take()), what="len(), take()") == (1, "a"),
          "a timed-out offer must leave the queue unchanged")


@pytest.mark.checkpoint("p03.timeouts")
def test_wakeups_that_change_nothing_do_not_restart_the_deadline(impl):
    timeout = 0.3
    q = call(impl.BoundedBlockingQueue, 1, what="creating a queue")
    call(q.poll, 0, what="poll(0)")
    if not conditions(q):
        note("the queue holds no Condition: no do-nothing wakeups could be delivered")
    for what, fn, want in (
        (f"poll({timeout})", lambda: q.poll(timeout), None),
        (f"offer('b', {timeout})", lambda: q.offer("b", timeout), False),
    ):
        if want is False:
            call(q.put, "a", what="put('a')")
        got, took, finished, _ = _timed(fn, timeout, True, q)
        check(finished, f"{what}, woken again and again by notify_all() with nothing changed, "
                        f"gave up only after {took:.1f} s, once the wakeups stopped: each "
                        "wakeup restarted the full timeout instead of waiting for what was "
                        "left of one deadline",
              pitfall="timeout_restarted")
        check(got is want, f"{what} under spurious wakeups returned {got!r}, expected {want!r}")
        check(took >= timeout - 0.01,
              f"{what} returned after {took:.3f} s, before its deadline: a wakeup is not a "
              "timeout (re-check the time left)")


# -- shutdown -------------------------------------------------------------------------------

@pytest.mark.checkpoint("p03.shutdown")
def test_after_a_graceful_shutdown_puts_fail_and_takes_drain_then_fail(impl):
    ShutDown = impl.ShutDown

    def scenario():
        q = impl.BoundedBlockingQueue(3)
        q.put("a")
        q.put("b")
        q.shutdown()
        steps = {"put": _raises(ShutDown, q.put, "c"),
                 "offer": _optional(_raises, ShutDown, q.offer, "c"),
                 "len": len(q), "take": q.take(),
                 "poll": _optional(q.poll, 0)}
        if steps["poll"] is NotImplemented:
            steps["poll"] = q.take()
        steps["take_empty"] = _raises(ShutDown, q.take)
        steps["poll_empty"] = _optional(_raises, ShutDown, q.poll, 0)
        q.shutdown()  # a second call is harmless
        steps["again"] = _raises(ShutDown, q.take)
        return steps

    s = call(scenario, what="a graceful shutdown with two items queued")
    check(s["put"], "put() after shutdown() did not raise ShutDown")
    check(s["offer"] in (True, NotImplemented), "offer() after shutdown() did not raise ShutDown")
    check(s["len"] == 2, f"a graceful shutdown must keep the queued items (len() is {s['len']})")
    check((s["take"], s["poll"]) == ("a", "b"),
          f"after shutdown() the queued items came out as {s['take']!r}, {s['poll']!r}; "
          "expected 'a', 'b'")
    check(s["take_empty"], "take() on a shut-down, drained queue did not raise ShutDown")
    check(s["poll_empty"] in (True, NotImplemented),
          "poll(0) on a shut-down, drained queue did not raise ShutDown")
    check(s["again"], "after a second shutdown(), take() did not raise ShutDown")


@pytest.mark.checkpoint("p03.shutdown")
def test_an_immediate_shutdown_discards_the_queued_items(impl):
    ShutDown = impl.ShutDown

    def scenario():
        q = impl.BoundedBlockingQueue(3)
        for x in "abc":
            q.put(x)
        q.shutdown(immediate=True)
        return len(q), _raises(ShutDown, q.take), _raises(ShutDown, q.put, "d")

    size, take_fails, put_fails = call(scenario, what="an immediate shutdown of a full queue")
    check(size == 0, f"after shutdown(immediate=True) len() is {size}, expected 0")
    check(take_fails, "take() after shutdown(immediate=True) did not raise ShutDown")
    check(put_fails, "put() after shutdown(immediate=True) did not raise ShutDown")


def _blocked_then_shutdown(q, calls, immediate: bool, what: str) -> list:
    threads = [start_daemon(fn, name=name) for name, fn in calls]
    try:
        for thread, (name, _) in zip(threads, calls):
            wait_parked(thread, f"{name} on {what} queue", q=q)
        clocks = [thread_cpu_seconds(thread) for thread in threads]
        call(q.shutdown, immediate, what=f"shutdown(immediate={immediate})")
        outcomes = []
        for thread, (name, _), clock in zip(threads, calls, clocks):
            finish(thread, f"{name}, blocked on {what} queue, after shutdown()",
                   pitfall="shutdown_no_wake", reraise=False, cpu_before=clock)
            if isinstance(thread.error, NotImplementedError):
                raise thread.error
            outcomes.append((name, thread.error if thread.error else thread.result))
        return outcomes
    finally:
        abandon(*threads)


@pytest.mark.checkpoint("p03.shutdown")
def test_shutdown_wakes_every_blocked_take_with_shut_down(impl):
    q = call(impl.BoundedBlockingQueue, 2, what="creating a queue")
    calls = [("take() #1", q.take), ("take() #2", q.take)]
    if _optional(call, q.poll, 0, what="poll(0)") is not NotImplemented:
        calls.append(("poll(None)", lambda: q.poll(None)))
    for name, outcome in _blocked_then_shutdown(q, calls, False, "an empty"):
        check(isinstance(outcome, impl.ShutDown),
              f"{name}, blocked on an empty queue, ended with {outcome!r} after shutdown(); "
              "expected ShutDown")


@pytest.mark.checkpoint("p03.shutdown")
def test_shutdown_wakes_every_blocked_put_and_keeps_the_items_for_takers(impl):
    q = call(lambda: impl.BoundedBlockingQueue(1), what="creating a queue")
    call(q.put, "a", what="put('a')")
    calls = [("put('x')", lambda: q.put("x")), ("put('y')", lambda: q.put("y"))]
    if _optional(call, q.offer, "z", 0, what="offer('z', 0)") is not NotImplemented:
        calls.append(("offer('z', None)", lambda: q.offer("z", None)))
    for name, outcome in _blocked_then_shutdown(q, calls, False, "a full"):
        check(isinstance(outcome, impl.ShutDown),
              f"{name}, blocked on a full queue, ended with {outcome!r} after shutdown(); "
              "expected ShutDown")
    drained = call(lambda: (q.take(), _raises(impl.ShutDown, q.take)),
                   what="take() twice after a graceful shutdown")
    check(drained == ("a", True), f"after the shutdown, take() gave {drained[0]!r} and then "
                                  f"{'raised' if drained[1] else 'did not raise'} ShutDown; "
                                  "expected 'a', then ShutDown")


@pytest.mark.checkpoint("p03.shutdown")
def test_an_immediate_shutdown_wakes_a_blocked_put_and_empties_the_queue(impl):
    q = call(lambda: impl.BoundedBlockingQueue(1), what="creating a queue")
    call(q.put, "a", what="put('a')")
    [(name, outcome)] = _blocked_then_shutdown(q, [("put('x')", lambda: q.put("x"))],
                                               True, "a full")
    check(isinstance(outcome, impl.ShutDown),
          f"{name} ended with {outcome!r} after shutdown(immediate=True); expected ShutDown")
    after = call(lambda: (len(q), _raises(impl.ShutDown, q.take)), what="len(), take()")
    check(after == (0, True), f"after shutdown(immediate=True), len() and take() gave "
                              f"{after!r}; expected 0 and ShutDown")


class _HeldBeforeLine:
    """``fn()`` in a daemon thread that stops before the ``n``-th line of the submission's
    code it runs (its own lines and those of any helper it calls), until ``go`` is set."""

    def __init__(self, fn, n: int) -> None:
        self.at = threading.Event()
        self.go = threading.Event()
        self.line: int | None = None
        count = [0]

        def local(frame, event, arg):
            if event == "line" and not self.go.is_set():
                count[0] += 1
                if count[0] == n:
                    self.line = frame.f_lineno
                    self.at.set()
                    self.go.wait(BOUND)
            return local

        def trace(frame, event, arg):
            return local if is_submission_code(frame.f_code.co_filename) else None

        self.thread = start_daemon(run_hooked, fn, trace=trace, name="held-put")


def _done_or_blocked(thread) -> bool:
    """The thread has finished, or is asleep in the kernel using no CPU (waiting for
    something the held thread has): either way the held one may go on."""
    return not thread.is_alive() or (parked(thread, 0.02) and kernel_state(thread) == "S")


#: (held call, its item or None, the call beside it, its argument, shutdown's immediate,
#:  the two honest outcomes: (beside's result, held's fate, what is left)).
_BESIDE = {
    "put_offer": ("put('a')", "b", False, ((False, "returned", ["a"]), (True, "ShutDown", ["b"]))),
    "take_poll": ("take()", None, True, ((None, "returned", []), ("a", "ShutDown", []))),
}


@pytest.mark.checkpoint("p03.shutdown")
@pytest.mark.parametrize("case", list(_BESIDE))
def test_a_call_beside_one_that_shutdown_ends_is_explained_by_some_order(impl, case):
    """Capacity 1.  A put('a') on the empty queue (or a take() with 'a' queued) is held
    before each line of the submission's code in turn; meanwhile offer('b', 0) (or poll(0))
    runs, then shutdown() (immediate, for the take).  Operations are linearizable, so only
    two outcomes are honest: the held call came first, or the other one did.  An offer that
    finds "full" on a queue that never held an item (a poll that finds "empty" on one whose
    item nobody took) is neither: a call that has not taken effect must not look as if it
    had -- e.g. a permit it holds, then gives back when it fails."""
    ShutDown = impl.ShutDown
    held_name, other_item, immediate, honest = _BESIDE[case]
    n = 1
    while True:
        q = impl.BoundedBlockingQueue(1)
        if case == "put_offer":
            body, beside, name = (lambda: q.put("a")), (q.offer, "b", 0), "offer('b', 0)"
        else:
            q.put("a")
            body, beside, name = q.take, (q.poll, 0), "poll(0)"
        held = _HeldBeforeLine(body, n)
        wait_until(lambda: held.at.is_set() or not held.thread.is_alive(),
                   what=f"{held_name} reached its next line or returned")
        if not held.at.is_set():  # no n-th line: every line has been tried
            finish(held.thread, f"{held_name} alone")
            break
        results = []
        for label, fn, args in ((name, _optional, beside),
                                ("shutdown()", q.shutdown, (immediate,))):
            helper = start_daemon(fn, *args, name=label)
            wait_until(lambda: _done_or_blocked(helper), what=f"{label} returned or blocked")
            if helper.is_alive():
                held.go.set()  # it waits for the held call: let that go on
            results.append(finish(helper, f"{label} beside {held_name}"))
        held.go.set()
        finish(held.thread, f"{held_name} after shutdown()", reraise=False)
        other = results[0]
        if other is NotImplemented:
            note(f"{name} is not implemented: its interleavings with shutdown were not tried")
            return
        if case == "take_poll" and other is False:
            other = None  # "nothing" as the wrong value: p03.timeouts says so, not this check
        failed = isinstance(held.thread.error, ShutDown)
        if held.thread.error is not None and not failed:
            raise held.thread.error

        def drain():
            left = []
            while len(left) < 3:
                try:
                    left.append(q.take())
                except ShutDown:
                    return left
            return left

        left = call(drain, what="take() until ShutDown, after shutdown()")
        outcome = (other, "ShutDown" if failed else "returned", left)
        where = f"{held_name} held before line {held.line} (the {n}th line it ran)"
        if outcome[:2] == (honest[0][0], "ShutDown"):
            fail(f"{where}: {name} returned {other!r}, as if {held_name} had already taken "
                 f"effect, yet {held_name} then raised ShutDown: no order of these calls "
                 f"explains it.  A call that has not taken effect must not make the queue look "
                 f"{'full' if case == 'put_offer' else 'empty'} -- e.g. a permit it holds, "
                 "then gives back when it fails")
        check(outcome in honest,
              f"{where}: {name} gave {other!r}, {held_name} {outcome[1]}, and {left!r} was "
              f"left; the only orders give {honest[0]} or {honest[1]}")
        n += 1
        check(n < 500, f"{held_name} ran more than 500 lines")
