"""Acceptance set for P03 · BoundedBlockingQueue: blocking, wakeups, many threads.

"Blocked" is proved by state: the thread is parked in a Condition wait (see
``support.parked``).  The stolen-wakeup and wrong-role interleavings of the chapter are
forced with a ``Gate`` that holds freshly woken threads before they retake the lock.
"""
from __future__ import annotations

import threading
import time

import pytest

from tests.p03.support import (Gate, WaitProbe, abandon, call, conditions, notify_all,
                               parked, settled, start_probed, wait_parked)
from workbook.testkit import BOUND, check, fail, join, start_daemon, wait_until


def filled(impl, capacity: int, items) -> object:
    def build():
        q = impl.BoundedBlockingQueue(capacity)
        for item in items:
            q.put(item)
        return q
    return call(build, what=f"filling a capacity-{capacity} queue with {len(items)} item(s)")


# -- put blocks while full ------------------------------------------------------------------

@pytest.mark.checkpoint("p03.put_blocks")
def test_put_on_a_full_queue_waits_and_resumes_when_take_frees_a_slot(impl):
    q = filled(impl, 2, ["a", "b"])
    putter = start_daemon(q.put, "c", name="putter")
    try:
        wait_parked(putter, "put('c') on a full queue", pitfall="spin_holding_lock",
                    returned_pitfall="head_equals_tail")
        size = call(len, q, what="len() while a put is waiting")
        check(size == 2, f"len() is {size} while put('c') waits on a full capacity-2 queue")
        first = call(q.take, what="take() while a put waits (the waiter must not hold the lock)",
                     pitfall="spin_holding_lock")
        check(first == "a", f"take() returned {first!r}, expected 'a'")
        join(putter, what="put('c') after take() freed a slot (nobody woke it?)",
             pitfall="missing_notify")
        rest = call(lambda: [q.take(), q.take(), len(q)], what="taking the last two items")
        check(rest == ["b", "c", 0], f"then take(), take(), len() gave {rest!r}, "
                                     "expected ['b', 'c', 0]")
    finally:
        abandon(putter)


@pytest.mark.checkpoint("p03.put_blocks")
def test_each_freed_slot_lets_exactly_one_waiting_put_in(impl):
    q = filled(impl, 1, ["a"])
    putters = [start_daemon(q.put, name, name=f"putter-{name}") for name in ("x", "y")]
    try:
        for putter in putters:
            wait_parked(putter, "a second put on a full capacity-1 queue",
                        pitfall="spin_holding_lock", returned_pitfall="head_equals_tail")
        got = [call(q.take, what="take() with two puts waiting")]
        wait_until(lambda: sum(not p.is_alive() for p in putters) == 1 and
                   all(settled(p) for p in putters),
                   what="exactly one of the two waiting puts finished after one take()",
                   pitfall="missing_notify")
        check(call(len, q, what="len()") == 1, "one take() from a full capacity-1 queue with "
              "two puts waiting should leave exactly one item queued")
        got.append(call(q.take, what="the second take()"))
        for putter in putters:
            join(putter, what="the other waiting put after the second take()",
                 pitfall="missing_notify")
        got.append(call(q.take, what="the third take()"))
        check(got[0] == "a" and sorted(got[1:]) == ["x", "y"],
              f"took {got!r}; expected 'a' then 'x' and 'y' in some order")
    finally:
        abandon(*putters)


# -- take blocks while empty ----------------------------------------------------------------

@pytest.mark.checkpoint("p03.take_blocks")
def test_take_on_an_empty_queue_waits_and_returns_the_next_item_put(impl):
    q = filled(impl, 2, [])
    taker = start_daemon(q.take, name="taker")
    try:
        wait_parked(taker, "take() on an empty queue", pitfall="spin_holding_lock")
        call(q.put, "x", what="put('x') while a take waits (the waiter must not hold the lock)",
             pitfall="spin_holding_lock")
        got = join(taker, what="take() after put('x') (nobody woke it?)")
        check(got == "x", f"the waiting take() returned {got!r}, expected 'x'")
        check(call(len, q, what="len()") == 0, "the queue should be empty again")
    finally:
        abandon(taker)


@pytest.mark.checkpoint("p03.take_blocks")
def test_two_waiting_takes_each_get_one_of_two_items(impl):
    q = filled(impl, 3, [])
    takers = [start_daemon(q.take, name=f"taker-{i}") for i in range(2)]
    try:
        for taker in takers:
            wait_parked(taker, "take() on an empty queue", pitfall="spin_holding_lock")
        call(q.put, "x", what="put('x') with two takes waiting")
        call(q.put, "y", what="put('y') with one take waiting")
        got = sorted(join(t, what="a waiting take() after two puts") for t in takers)
        check(got == ["x", "y"], f"the two waiting takes returned {got!r}")
    finally:
        abandon(*takers)


# -- spurious and stolen wakeups ------------------------------------------------------------

def _wake_and_settle(q, threads, probes, role: str) -> None:
    """Deliver a do-nothing wakeup to every waiter and wait until each has handled it."""
    before = [p.wakeups for p in probes]
    conds = conditions(q, threads)
    check(conds, "found no threading.Condition on the queue or in its waiting threads")
    notify_all(conds)
    for thread, probe, count in zip(threads, probes, before):
        wait_until(lambda: probe.wakeups > count or not thread.is_alive(),
                   what=f"a waiting {role} woke up from notify_all()")
        wait_until(lambda: settled(thread), what=f"the woken {role} went back to waiting")


@pytest.mark.checkpoint("p03.spurious")
def test_waiting_takes_survive_wakeups_that_change_nothing(impl):
    q = filled(impl, 2, [])
    probes = [WaitProbe(), WaitProbe()]
    takers = [start_probed(p, q.take, name=f"taker-{i}") for i, p in enumerate(probes)]
    try:
        for taker in takers:
            wait_parked(taker, "take() on an empty queue", pitfall="spin_holding_lock")
        for _ in range(3):
            _wake_and_settle(q, takers, probes, "take()")
            for taker in takers:
                check(taker.is_alive(),
                      f"after a wakeup that added nothing, take() on the empty queue "
                      f"returned {taker.result!r} (error: {taker.error!r}); a woken thread "
                      "must re-check that the queue is non-empty", pitfall="if_not_while")
        call(q.put, "x", what="put('x')")
        call(q.put, "y", what="put('y')")
        got = sorted(join(t, what="a waiting take() after two puts") for t in takers)
        check(got == ["x", "y"], f"the two waiting takes returned {got!r}")
    finally:
        abandon(*takers)


@pytest.mark.checkpoint("p03.spurious")
def test_waiting_puts_survive_wakeups_that_change_nothing(impl):
    q = filled(impl, 2, ["a", "b"])
    probes = [WaitProbe(), WaitProbe()]
    putters = [start_probed(p, q.put, x, name=f"putter-{x}") for p, x in zip(probes, "xy")]
    try:
        for putter in putters:
            wait_parked(putter, "put() on a full queue", pitfall="spin_holding_lock",
                        returned_pitfall="head_equals_tail")
        for _ in range(3):
            _wake_and_settle(q, putters, probes, "put()")
            for putter in putters:
                check(putter.is_alive(),
                      "after a wakeup that freed nothing, put() on the full queue returned; "
                      "a woken thread must re-check that a slot is free",
                      pitfall="if_not_while")
        got = call(lambda: [q.take() for _ in range(4)], what="taking four items")
        check(got[:2] == ["a", "b"] and sorted(got[2:]) == ["x", "y"],
              f"took {got!r}; expected 'a', 'b', then 'x' and 'y' in some order")
    finally:
        abandon(*putters)


@pytest.mark.checkpoint("p03.spurious")
def test_a_woken_take_that_loses_the_item_to_another_taker_waits_again(impl):
    q = filled(impl, 1, [])
    gate = Gate()
    waiter = start_probed(WaitProbe(gate), q.take, name="waiting-taker")
    try:
        wait_parked(waiter, "take() on an empty queue", pitfall="spin_holding_lock")
        call(q.put, "x", what="put('x') with a take waiting")
        # The waiting take has been woken; the gate holds it before it retakes the lock.
        wait_until(lambda: gate.held, what="put('x') woke the waiting take()")
        barged = call(q.take, what="a second take() that arrives while the first is waking")
        check(barged == "x", f"the barging take() returned {barged!r}, expected 'x'")
        gate.open()
        wait_until(lambda: settled(waiter), what="the woken take() re-checked the queue")
        check(waiter.is_alive(),
              f"the woken take() returned {waiter.result!r} (error: {waiter.error!r}) "
              "although another thread had already taken the only item: it did not re-check "
              "the queue after waking", pitfall="if_not_while")
        call(q.put, "y", what="put('y')")
        check(join(waiter, what="the waiting take() after put('y')") == "y",
              "the waiting take() should get 'y'")
    finally:
        gate.open()
        abandon(waiter)


# -- many producers and consumers ----------------------------------------------------------

@pytest.mark.checkpoint("p03.mpmc")
def test_a_slot_freed_while_both_roles_wait_wakes_a_put_not_another_take(impl):
    # capacity 1: two takes wait on the empty queue; put('x') wakes one of them, which the
    # gate holds; put('y') then finds the queue full and waits. When the woken take runs,
    # the slot it frees must reach the waiting put, not the other waiting take.
    q = filled(impl, 1, [])
    gate = Gate()
    probes = [WaitProbe(gate), WaitProbe(gate)]
    takers = [start_probed(p, q.take, name=f"taker-{i}") for i, p in enumerate(probes)]
    putter = None
    try:
        for taker in takers:
            wait_parked(taker, "take() on an empty queue", pitfall="spin_holding_lock")
        call(q.put, "x", what="put('x') with two takes waiting")
        wait_until(lambda: gate.held, what="put('x') woke a waiting take()")
        putter = start_daemon(q.put, "y", name="putter")
        wait_parked(putter, "put('y') on a full capacity-1 queue",
                    pitfall="spin_holding_lock", returned_pitfall="head_equals_tail")
        held = gate.held
        gate.open()
        putter.join(BOUND)
        if putter.is_alive():
            # Which wakeup went where: a take woken after the gate opened got the slot's
            # notification; no extra wakeup at all means nobody was notified.
            wrong_role = sum(p.wakeups for p in probes) > held
            fail("put('y') was still waiting after a take() emptied the capacity-1 queue: "
                 + ("the take() woke the other waiting take() instead of the put"
                    if wrong_role else "the take() notified nobody"),
                 pitfall="single_condition_notify" if wrong_role else "missing_notify")
        join(putter, what="put('y')")
        got = sorted(join(t, what="a waiting take()") for t in takers)
        check(got == ["x", "y"], f"the two takes returned {got!r}")
    finally:
        gate.open()
        abandon(*takers, *([putter] if putter else []))


@pytest.mark.checkpoint("p03.mpmc")
def test_many_producers_and_consumers_lose_nothing_and_keep_each_producers_order(impl):
    producers, consumers, per_producer, capacity = 4, 3, 1500, 3
    q = impl.BoundedBlockingQueue(capacity)
    start = threading.Barrier(producers + consumers)
    stop = object()

    def produce(pid: int) -> None:
        start.wait(BOUND)
        for seq in range(per_producer):
            q.put((pid, seq))

    def consume() -> list:
        start.wait(BOUND)
        got = []
        while True:
            item = q.take()
            if item is stop:
                return got
            got.append(item)

    workers = [start_daemon(produce, p, name=f"producer-{p}") for p in range(producers)]
    readers = [start_daemon(consume, name=f"consumer-{c}") for c in range(consumers)]
    try:
        deadline = time.monotonic() + 2 * BOUND  # the reference needs a fraction of a second
        for w in workers:
            join(w, max(0.0, deadline - time.monotonic()),
                 what=f"{producers} producers putting {per_producer} items each through a "
                      f"capacity-{capacity} queue (lost wakeup or deadlock?)")
        for _ in readers:
            call(q.put, stop, what="putting a stop marker for each consumer")
        results = [join(r, what="a consumer taking the rest") for r in readers]
    finally:
        abandon(*workers, *readers)
    everything = [item for got in results for item in got]
    check(None not in everything,
          "a consumer got None: a take went ahead on an empty queue", pitfall="if_not_while")
    want = {(p, s) for p in range(producers) for s in range(per_producer)}
    missing, extra = want - set(everything), len(everything) - len(set(everything))
    check(not missing, f"{len(missing)} items were lost, e.g. {sorted(missing)[:3]}")
    check(extra == 0, f"{extra} items were taken twice")
    for c, got in enumerate(results):
        for p in range(producers):
            seqs = [s for (pid, s) in got if pid == p]
            if seqs != sorted(seqs):
                fail(f"consumer {c} got producer {p}'s items out of order: FIFO broken")
