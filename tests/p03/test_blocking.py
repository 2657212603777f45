"""Acceptance set for P03 · BoundedBlockingQueue: blocking, wakeups, many threads.

"Blocked" is proved by behaviour: the thread uses no CPU and makes no wake-ups while its
call has not returned, and the queue stays usable meanwhile (see ``support.wait_parked``).
The stolen-wakeup and wrong-role interleavings of the chapter are forced with a ``Probe``
on the waiting thread: the moment its blocking call returns, a ``Gate`` holds it, so that
another thread goes first.  Nothing here depends on which primitive the queue waits on.
"""
from __future__ import annotations

import threading

import pytest

from tests.p03.support import (ASLEEP, Gate, Probe, Quiet, abandon, call, conditions, finish,
                               notify_all, quiet, settle, start_probed, usable, usage,
                               wait_parked, where)
from workbook.testkit import BOUND, check, fail, note, start_daemon, wait_until


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
        wait_parked(putter, "put('c') on a full queue", q=q,
                    returned_pitfall="head_equals_tail")
        size = usable(q, "while put('c') waits")
        check(size == 2, f"len() is {size} while put('c') waits on a full capacity-2 queue")
        first = call(q.take, what="take() while a put waits (the waiter must not hold the lock)",
                     pitfall="spin_holding_lock")
        check(first == "a", f"take() returned {first!r}, expected 'a'")
        finish(putter, "put('c') after take() freed a slot", pitfall="missing_notify")
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
            wait_parked(putter, "a second put on a full capacity-1 queue", q=q,
                        returned_pitfall="head_equals_tail")
        got = [call(q.take, what="take() with two puts waiting")]

        def one_done() -> bool:
            done = [p for p in putters if not p.is_alive()]
            if len(done) > 1:
                fail("one take() from a full capacity-1 queue let both waiting puts in")
            return len(done) == 1 and all(quiet(p) for p in putters if p.is_alive())

        wait_until(one_done, what="exactly one of the two waiting puts finished after one "
                                  "take() and the other went on waiting", pitfall="missing_notify")
        check(call(len, q, what="len()") == 1, "one take() from a full capacity-1 queue with "
              "two puts waiting should leave exactly one item queued")
        got.append(call(q.take, what="the second take()"))
        for putter in putters:
            finish(putter, "the other waiting put after the second take()",
                   pitfall="missing_notify")
        got.append(call(q.take, what="the third take()"))
        check(got[0] == "a" and sorted(got[1:]) == ["x", "y"],
              f"took {got!r}; expected 'a' then 'x' and 'y' in some order")
    finally:
        abandon(*putters)


@pytest.mark.checkpoint("p03.put_blocks")
def test_a_large_queue_is_full_at_its_capacity_too(impl):
    # Sizes above 256 are distinct int objects: "full" must compare values, not identities.
    capacity = 1000
    q = filled(impl, capacity, list(range(capacity)))
    check(call(len, q, what="len()") == capacity, f"len() of a full capacity-{capacity} queue")
    putter = start_daemon(q.put, "more", name="putter")
    try:
        wait_parked(putter, f"put() on a full capacity-{capacity} queue", q=q)
        check(call(q.take, what="take()") == 0, "take() should return the oldest item, 0")
        finish(putter, "put('more') after take() freed a slot", pitfall="missing_notify")
        got = call(lambda: [q.take() for _ in range(capacity)], what="draining the queue")
        check(got == list(range(1, capacity)) + ["more"], "the items did not come out in order")
    finally:
        abandon(putter)


# -- take blocks while empty ----------------------------------------------------------------

@pytest.mark.checkpoint("p03.take_blocks")
def test_take_on_an_empty_queue_waits_and_returns_the_next_item_put(impl):
    q = filled(impl, 2, [])
    taker = start_daemon(q.take, name="taker")
    try:
        wait_parked(taker, "take() on an empty queue", q=q)
        call(q.put, "x", what="put('x') while a take waits (the waiter must not hold the lock)",
             pitfall="spin_holding_lock")
        got = finish(taker, "take() after put('x')", pitfall="missing_notify")
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
            wait_parked(taker, "take() on an empty queue", q=q)
        call(q.put, "x", what="put('x') with two takes waiting")
        call(q.put, "y", what="put('y') with one take waiting")
        got = sorted(finish(t, "a waiting take() after two puts", pitfall="missing_notify")
                     for t in takers)
        check(got == ["x", "y"], f"the two waiting takes returned {got!r}")
    finally:
        abandon(*takers)


# -- spurious and stolen wakeups ------------------------------------------------------------

def _wake_and_settle(q, threads, probes, role: str) -> int:
    """Deliver a do-nothing wakeup (``notify_all`` on every Condition the queue holds) and
    wait until each waiter has handled it.  Returns how many waiters it woke."""
    conds = conditions(q)
    if not conds:
        return 0
    armed = [p.arm() for p in probes]
    before = [p.wakeups for p in probes]
    notify_all(conds)
    for thread in threads:
        settle(thread, f"the woken {role} went back to waiting")
    for probe in probes:
        probe.disarm()
    return sum(a and p.wakeups > b for a, p, b in zip(armed, probes, before))


def _spurious_rounds(q, threads, probes, role: str, what_changed: str) -> None:
    woken = 0
    for _ in range(3):
        woken += _wake_and_settle(q, threads, probes, role)
        for thread in threads:
            check(thread.is_alive(),
                  f"after a wakeup that {what_changed}, {role} "
                  + (f"raised {thread.error!r}" if thread.error is not None
                     else f"returned {thread.result!r}")
                  + "; a woken thread must re-check its condition",
                  pitfall="if_not_while")
    note(f"{woken} spurious wakeup(s) delivered through {len(conditions(q))} Condition(s)"
         if woken else "the queue holds no Condition: spurious wakeups are not injected "
                       "(the stolen-wakeup check still applies)")


@pytest.mark.checkpoint("p03.spurious")
def test_waiting_takes_survive_wakeups_that_change_nothing(impl):
    q = filled(impl, 2, [])
    probes = [Probe(), Probe()]
    takers = [start_probed(p, q.take, name=f"taker-{i}") for i, p in enumerate(probes)]
    try:
        for taker in takers:
            wait_parked(taker, "take() on an empty queue", q=q)
        _spurious_rounds(q, takers, probes, "take() on the empty queue", "added nothing")
        call(q.put, "x", what="put('x')")
        call(q.put, "y", what="put('y')")
        got = sorted(finish(t, "a waiting take() after two puts", pitfall="missing_notify")
                     for t in takers)
        check(got == ["x", "y"], f"the two waiting takes returned {got!r}")
    finally:
        abandon(*takers)


@pytest.mark.checkpoint("p03.spurious")
def test_waiting_puts_survive_wakeups_that_change_nothing(impl):
    q = filled(impl, 2, ["a", "b"])
    probes = [Probe(), Probe()]
    putters = [start_probed(p, q.put, x, name=f"putter-{x}") for p, x in zip(probes, "xy")]
    try:
        for putter in putters:
            wait_parked(putter, "put() on a full queue", q=q, returned_pitfall="if_not_while")
        _spurious_rounds(q, putters, probes, "put() on the full queue", "freed nothing")
        check(usable(q, "after the wakeups") == 2,
              "after wakeups that freed nothing, the full capacity-2 queue no longer holds "
              "2 items", pitfall="if_not_while")
        got = call(lambda: [q.take() for _ in range(4)], what="taking four items")
        check(got[:2] == ["a", "b"] and sorted(got[2:]) == ["x", "y"],
              f"took {got!r}; expected 'a', 'b', then 'x' and 'y' in some order")
    finally:
        abandon(*putters)


def _steal(q, waiter, probe, gate, wake, barge, what: str):
    """Force the stolen wakeup: ``wake()`` wakes the parked ``waiter``; the gate holds it the
    moment its blocking call returns, and ``barge`` runs in another thread first.
    Returns (barging thread, whether the interleaving was forced)."""
    forced = probe.arm(gate.hold)
    wake()
    if forced:
        wait_until(lambda: gate.held or not waiter.is_alive(), what=f"{what} woke the waiter")
        forced = bool(gate.held)
    barger = start_daemon(barge, name="barger")
    settle(barger, "the barging call returned or waited")
    gate.open()
    return barger, forced


@pytest.mark.checkpoint("p03.spurious")
def test_a_woken_take_that_loses_the_item_to_another_taker_waits_again(impl):
    q = filled(impl, 1, [])
    gate, probe = Gate(), Probe()
    waiter = start_probed(probe, q.take, name="waiting-taker")
    barger = None
    try:
        wait_parked(waiter, "take() on an empty queue", q=q)
        barger, forced = _steal(q, waiter, probe, gate,
                                lambda: call(q.put, "x", what="put('x') with a take waiting"),
                                q.take, "put('x')")
        if not barger.is_alive():  # the barger got the item: the woken take must wait again
            check(barger.result == "x", f"the barging take() returned {barger.result!r}, "
                                        "expected 'x'")
            settle(waiter, "the woken take() re-checked the queue")
            check(waiter.is_alive(),
                  "the woken take() " + (f"raised {waiter.error!r}" if waiter.error is not None
                                         else f"returned {waiter.result!r}")
                  + " although another thread had already taken the only item: it did not "
                  "re-check the queue after waking", pitfall="if_not_while")
            call(q.put, "y", what="put('y')")
            check(finish(waiter, "the waiting take() after put('y')") == "y",
                  "the waiting take() should get 'y'")
        else:  # the item was handed to the woken take: the barger waits for the next one
            check(finish(waiter, "the woken take()") == "x",
                  f"the woken take() returned {waiter.result!r}, expected 'x'")
            call(q.put, "y", what="put('y')")
            check(finish(barger, "the barging take() after put('y')") == "y",
                  "the barging take() should get 'y'")
        check(usable(q, "at the end") == 0, "the queue should be empty at the end")
        if not forced:
            note("the waiting take() was not blocked in a call the probe could see: the "
                 "stolen wakeup was not forced")
    finally:
        gate.open()
        abandon(waiter, *([barger] if barger else []))


@pytest.mark.checkpoint("p03.spurious")
def test_a_woken_put_that_loses_the_slot_to_another_putter_waits_again(impl):
    q = filled(impl, 1, ["a"])
    gate, probe = Gate(), Probe()
    waiter = start_probed(probe, q.put, "w", name="waiting-putter")
    barger = None
    try:
        wait_parked(waiter, "put('w') on a full queue", q=q, returned_pitfall="head_equals_tail")
        barger, forced = _steal(q, waiter, probe, gate,
                                lambda: check(call(q.take, what="take() with a put waiting")
                                              == "a", "take() should return 'a'"),
                                lambda: q.put("b"), "take()")
        if not barger.is_alive():  # the barger got the slot: the woken put must wait again
            settle(waiter, "the woken put() re-checked the queue")
            check(waiter.is_alive(),
                  "the woken put('w') returned although another put had already filled the "
                  "only slot: it did not re-check the queue after waking",
                  pitfall="if_not_while")
            check(usable(q, "with the woken put waiting again") == 1,
                  "the capacity-1 queue should hold exactly one item", pitfall="if_not_while")
            check(call(q.take, what="take()") == "b", "take() should return 'b'")
            finish(waiter, "the waiting put('w') after take()")
            check(call(q.take, what="take()") == "w", "take() should then return 'w'")
        else:  # the slot went to the woken put: the barger waits for the next one
            finish(waiter, "the woken put('w')")
            check(call(q.take, what="take()") == "w", "take() should return 'w'")
            finish(barger, "the barging put('b') after take()")
            check(call(q.take, what="take()") == "b", "take() should then return 'b'")
        if not forced:
            note("the waiting put() was not blocked in a call the probe could see: the "
                 "stolen wakeup was not forced")
    finally:
        gate.open()
        abandon(waiter, *([barger] if barger else []))


# -- many producers and consumers ----------------------------------------------------------

@pytest.mark.checkpoint("p03.mpmc")
def test_a_slot_freed_while_both_roles_wait_wakes_a_put_not_another_take(impl):
    # capacity 1: two takes wait on the empty queue; put('x') wakes one of them, which the
    # gate holds; put('y') then finds the queue full and waits. When the woken take runs,
    # the slot it frees must reach the waiting put, not the other waiting take.
    q = filled(impl, 1, [])
    gate = Gate()
    probes = [Probe(), Probe()]
    takers = [start_probed(p, q.take, name=f"taker-{i}") for i, p in enumerate(probes)]
    putter = None
    try:
        for taker in takers:
            wait_parked(taker, "take() on an empty queue", q=q)
        armed = all([p.arm(gate.hold) for p in probes])
        call(q.put, "x", what="put('x') with two takes waiting")
        if armed:
            wait_until(lambda: gate.held or not all(t.is_alive() for t in takers),
                       what="put('x') woke a waiting take()")
        putter = start_daemon(q.put, "y", name="putter")
        settle(putter, "put('y') returned or waited")
        held = gate.held
        gate.open()
        try:
            finish(putter, "put('y'), once a take() emptied the capacity-1 queue")
            got = sorted(finish(t, "a waiting take()") for t in takers)
        except AssertionError as exc:
            # Which wakeup went where: a take woken after the gate opened got the slot's
            # notification; no extra wakeup at all means nobody was notified.
            wrong_role = sum(p.wakeups for p in probes) > held
            fail(f"{exc}: " + ("the take() woke the other waiting take() instead of the put"
                               if wrong_role else "the take() notified nobody"),
                 pitfall="single_condition_notify" if wrong_role else "missing_notify")
        check(got == ["x", "y"], f"the two takes returned {got!r}")
    finally:
        gate.open()
        for p in probes:
            p.disarm()
        abandon(*takers, *([putter] if putter else []))


@pytest.mark.checkpoint("p03.mpmc")
def test_many_producers_and_consumers_lose_nothing_and_keep_each_producers_order(impl):
    producers, consumers, per_producer, capacity = 4, 3, 1500, 3
    q = impl.BoundedBlockingQueue(capacity)
    start = threading.Barrier(producers + consumers)
    stop = object()

    moved = [0] * producers  # items put so far, by producer (each writes its own slot)

    def produce(pid: int) -> None:
        start.wait(BOUND)
        for seq in range(per_producer):
            q.put((pid, seq))
            moved[pid] = seq + 1

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
        everyone = [Quiet(t) for t in workers + readers]
        since_progress = [sum(moved), {t: usage(t) for t in workers + readers}]

        def producers_done() -> bool:
            if not any(w.is_alive() for w in workers):
                return True
            # A correct waiter runs only when the state changed, so items move.  A thread
            # that used a second of its own CPU (a loaded box runs it less, not more) while
            # not one item was put is spinning.  (Wake-ups are no evidence here: on a loaded
            # box every thread waiting for the GIL wakes hundreds of times a second.)
            if sum(moved) != since_progress[0]:
                since_progress[:] = [sum(moved), {t: usage(t) for t in workers + readers}]
            for t, before in since_progress[1].items():
                now = usage(t)
                if before is None or now is None:
                    continue
                if now[0] - before[0] > 1.0:
                    spot = where(t)
                    abandon(*(workers + readers))
                    fail(f"thread '{t.name}' used {now[0] - before[0]:.2f} s of CPU while no "
                         f"item was put (it is in {spot}): it spins instead of waiting",
                         pitfall="spin_holding_lock")
            # A deadlock: every thread still running is parked at once, for a while.
            if all(s.since() >= ASLEEP for s in everyone if s.thread.is_alive()):
                fail(f"{producers} producers and {consumers} consumers on a capacity-"
                     f"{capacity} queue are all asleep with "
                     f"{sum(w.is_alive() for w in workers)} producer(s) unfinished: a "
                     "lost wakeup or a deadlock")
            return False

        wait_until(producers_done, 2 * BOUND,
                   what=f"{producers} producers put {per_producer} items each through a "
                        f"capacity-{capacity} queue")
        for w in workers:
            finish(w, "a producer")
        for _ in readers:
            call(q.put, stop, what="putting a stop marker for each consumer")
        results = [finish(r, "a consumer taking the rest") for r in readers]
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
