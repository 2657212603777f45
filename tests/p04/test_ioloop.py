"""Acceptance set for P04 · the IOLoop: callbacks across threads, the waker, timeouts.

The loop runs ``start()`` in a daemon thread (fixture ``served``).  "The loop is asleep" is
proven by what the kernel says of the loop thread -- asleep (state S) in a poll, epoll_wait or
select system call (``testkit.asleep_in_selector``), whichever selector or raw call the loop
uses -- never by a sleep or a frame.  The lost-wakeup race is forced with a gate callback that parks the loop thread and
a line tracer that pauses the producer between two steps of ``add_callback``.
"""
from __future__ import annotations

import threading
import time

import pytest

from tests.p04 import scenarios as sc
from tests.p04.support import traced_call
from tests.p04.test_coroutines import expect_events
from workbook.testkit import (BOUND, check, fail, join, note, parked, start_daemon,
                              thread_cpu_seconds, wait_event)


def _asleep(served) -> None:
    if not served.wait_idle():
        fail(f"the idle loop thread never went to sleep waiting on its descriptors within "
             f"{BOUND:g} s (block in the selector's select(timeout), or poll/select)")


# -- cross-thread add_callback ---------------------------------------------------------------

@pytest.mark.checkpoint("p04.cross_thread")
def test_a_callback_from_another_thread_wakes_a_loop_asleep_in_select(served):
    _asleep(served)
    ran = threading.Event()
    before = served.loop.wakeups_scheduled
    check(before == 0, f"a loop that no other thread has called counts {before} in "
          "wakeups_scheduled, expected 0")
    start = time.monotonic()
    served.loop.add_callback(ran.set)
    if not wait_event(ran, BOUND, what="a callback added while the loop slept"):
        fail(f"a callback added from another thread while the loop slept in select() had not "
             f"run after {BOUND:g} s; wakeups_scheduled went {before} -> "
             f"{served.loop.wakeups_scheduled}: the loop must be woken through the waker",
             pitfall="never_wake")
    note(f"woken in {(time.monotonic() - start) * 1000:.1f} ms")
    check(served.loop.wakeups_scheduled == before + 1,
          f"waking a sleeping loop counted {served.loop.wakeups_scheduled - before} wakeups "
          "in wakeups_scheduled, expected 1")
    deadline = time.monotonic() + BOUND
    cpu_before = thread_cpu_seconds(served.thread) or 0.0
    while not parked(served.thread, 0.1):  # behaviour: it neither runs nor waits to run
        # A loop that runs one callback and sleeps again needs milliseconds of its own CPU;
        # a whole second of it (not of the wall clock: a loaded box only slows a correct
        # loop down) is a loop that never sleeps.
        spent = (thread_cpu_seconds(served.thread) or 0.0) - cpu_before
        if time.monotonic() >= deadline or spent >= 1.0:
            fail("after a wakeup the loop never went back to sleep: it keeps using CPU (is "
                 "the waker's byte read after select() reports it?)")


@pytest.mark.checkpoint("p04.cross_thread")
def test_a_burst_of_callbacks_while_the_loop_is_busy_writes_the_waker_once(served):
    gate = served.gate()  # the loop thread is inside a callback: the list is empty
    ran = []
    before = served.loop.wakeups_scheduled
    for i in range(100):
        served.loop.add_callback(ran.append, i)
    burst = served.loop.wakeups_scheduled - before
    gate.open()
    served.call(lambda: None, what="after the burst")
    check(burst != 0, "100 callbacks added from another thread to an empty list counted no "
          "wakeup at all in wakeups_scheduled")
    check(burst == 1, f"100 callbacks added from another thread while the loop was busy "
          f"scheduled {burst} wakeups; only the first (the list was empty) needs one",
          pitfall="wake_every_add")
    check(ran == list(range(100)), f"the burst ran as {ran[:5]}... ({len(ran)} callbacks)")


@pytest.mark.checkpoint("p04.cross_thread")
def test_a_producer_that_looked_before_the_loop_drained_still_wakes_it(served):
    """For each seam of add_callback where no lock of the loop is held, pause the producer
    there while the loop drains the list and goes to sleep; the callback must still run."""
    loop = served.loop
    dry_run: list[int] = []
    done = threading.Event()
    traced = start_daemon(traced_call, loop, lambda: loop.add_callback(done.set),
                          dry_run.append, name="producer")
    join(traced, what="a traced add_callback")
    if not wait_event(done, BOUND, what="a traced add_callback's callback"):
        fail("a callback added from another thread did not run", pitfall="never_wake")
    seams = len(dry_run)
    for seam in range(1, seams + 1):
        _asleep(served)
        gate = served.gate()
        first_ran, second_ran = threading.Event(), threading.Event()
        loop.add_callback(first_ran.set)  # queued behind the gate

        def pause_at(n: int, seam=seam, gate=gate, first_ran=first_ran) -> None:
            if n != seam:
                return
            gate.open()  # the loop finishes its turn, runs first_ran.set, then sleeps --
            # unless this line is inside add_callback's critical section (guarded by
            # something that is not a Lock, say a Semaphore): then the loop waits for this
            # thread, the wait is seen stuck at once, and the producer simply goes on.
            # (The bounded wait runs in a helper thread: this function runs inside a trace
            # callback, where the stuck detector's own work must not happen.)
            waiter = start_daemon(wait_event, first_ran, BOUND, name="seam-waiter",
                                  what="the loop to run the callback queued first",
                                  record=False)
            waiter.join(BOUND + 1.0)  # wait_event returns within BOUND
            if waiter.result:
                served.wait_idle()

        producer = start_daemon(traced_call, loop, lambda: loop.add_callback(second_ran.set),
                                pause_at, name="producer")
        join(producer, 3 * BOUND, what="add_callback paused at one of its seams")
        gate.open()
        if not wait_event(second_ran, BOUND, what="the callback of the paused add_callback"):
            fail(f"add_callback was paused before line {seam} of its unlocked lines while the "
                 "loop drained the list and went to sleep; the callback it then added never "
                 "ran: it decided 'the list is not empty, no wakeup needed' before taking the "
                 "lock, and the loop emptied the list in between",
                 pitfall="check_outside_lock")
    note(f"{seams} unlocked seams of add_callback tried")


@pytest.mark.checkpoint("p04.cross_thread")
def test_four_threads_times_a_thousand_callbacks_all_run_in_each_thread_s_order(served):
    threads, per_thread = 4, 1000
    total = threads * per_thread
    ran: list = []  # appended on the loop thread only
    all_ran = threading.Event()
    start = threading.Barrier(threads + 1)

    def record(t, i):
        ran.append((t, i))
        if len(ran) == total:
            all_ran.set()

    def producer(t):
        start.wait(BOUND)
        for i in range(per_thread):
            served.loop.add_callback(record, t, i)

    _asleep(served)
    before = served.loop.wakeups_scheduled
    workers = [start_daemon(producer, t, name=f"producer-{t}") for t in range(threads)]
    start.wait(BOUND)
    for w in workers:
        join(w, what="a producer's 1000 add_callback calls")
    if not wait_event(all_ran, BOUND, what="4000 callbacks from 4 threads"):
        wakeups = served.loop.wakeups_scheduled - before
        fail(f"only {len(ran)} of {total} callbacks had run {BOUND:g} s after the producers "
             f"finished ({wakeups} wakeups scheduled): the loop sleeps with callbacks queued",
             pitfall="never_wake" if wakeups == 0 else None)
    wakeups = served.loop.wakeups_scheduled - before
    for t in range(threads):
        seq = [i for u, i in ran if u == t]
        check(seq == list(range(per_thread)), f"thread {t}'s callbacks ran out of order")
    check(len(ran) == total, f"{len(ran)} callbacks ran, expected {total}")
    check(wakeups >= 1, f"{total} callbacks from {threads} threads woke a sleeping loop but "
          "counted no waker write in wakeups_scheduled")
    check(wakeups <= total // 4,
          f"{total} callbacks from {threads} threads scheduled {wakeups} wakeups; a wakeup is "
          "needed only when the list was empty", pitfall="wake_every_add")
    note(f"{wakeups} wakeups for {total} callbacks")


@pytest.mark.checkpoint("p04.cross_thread")
def test_callbacks_from_other_threads_wake_the_loop_and_keep_each_thread_s_order(api):
    expect_events(api, "cross_thread")


@pytest.mark.checkpoint("p04.cross_thread")
def test_add_callback_on_a_closed_loop_is_dropped(api):
    expect_events(api, "closed_loop")


@pytest.mark.checkpoint("p04.run_sync")
def test_close_releases_the_selector_and_the_waker(api):
    expect_events(api, "close_releases")


# -- add_callback on the loop thread -----------------------------------------------------------

@pytest.mark.checkpoint("p04.loop_thread")
def test_add_callback_on_the_loop_thread_never_writes_to_the_waker(pumped):
    def on_loop():
        before = pumped.loop.wakeups_scheduled
        for _ in range(50):
            pumped.loop.add_callback(lambda: None)
        return pumped.loop.wakeups_scheduled - before

    delta = pumped.call(on_loop, what="50 add_callback calls on the loop thread")
    check(delta == 0, f"50 add_callback calls made on the loop thread counted {delta} waker "
          "writes; the loop is awake, it will see the list before it sleeps",
          pitfall="wake_every_add")


@pytest.mark.checkpoint("p04.loop_thread")
def test_a_callback_runs_on_the_loop_thread_after_add_callback_returns(api):
    expect_events(api, "later_turn")


@pytest.mark.checkpoint("p04.loop_thread")
def test_callbacks_added_during_a_turn_wait_for_the_next_turn(api):
    expect_events(api, "next_turn")


@pytest.mark.checkpoint("p04.loop_thread")
def test_add_future_calls_back_on_a_later_turn(api):
    expect_events(api, "add_future")


@pytest.mark.checkpoint("p04.loop_thread")
def test_a_failing_callback_is_logged_and_the_loop_goes_on(api, logged):
    expect_events(api, "failing_callback")
    check(any(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in logged),
          "the failing callback's exception was not logged")


# -- timeouts ---------------------------------------------------------------------------------------

@pytest.mark.checkpoint("p04.timeouts")
def test_timeouts_fire_in_deadline_order_and_a_removed_one_never_fires(api):
    expect_events(api, "timeouts")


@pytest.mark.checkpoint("p04.timeouts")
def test_a_timeout_wakes_a_sleeping_loop_on_time_with_its_arguments(api):
    expect_events(api, "call_later_args")


def _collected_late(got):
    want = sc.SCENARIOS["timeouts_at_turn_start"][1]
    if got[:3] == want[:3] and got[3:] != want[3:] and "call_later(0) added by first" in got[3:4]:
        return ("a call_later(0) added by a callback fired in the same turn: a turn takes the "
                "timeouts that are due when it *begins* (before its callbacks run), as tornado "
                "6 / asyncio do; what falls due later waits for the next turn", None)
    return None


@pytest.mark.checkpoint("p04.timeouts")
def test_a_turn_runs_the_timeouts_due_when_it_began(api):
    expect_events(api, "timeouts_at_turn_start", diagnose=_collected_late)


@pytest.mark.checkpoint("p04.timeouts")
def test_a_timeout_that_became_overdue_during_a_turn_fires_at_once(api):
    expect_events(api, "overdue")


@pytest.mark.checkpoint("p04.timeouts")
def test_a_due_timeout_removed_by_a_callback_of_the_same_turn_never_fires(api):
    expect_events(api, "removed_in_turn")
