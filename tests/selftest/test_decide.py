"""The stuck detector's decision, driven by hand-built snapshots: no threads, no /proc, no
clock (the way trio tests its core with synthetic state).  Each test is a situation a
bounded wait can look at; the end-to-end proof stays in test_stuck.py."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from workbook.stuck.decide import (Progress, classify, deadlocked, decide, gil_starved, hogging,
                                   ready_for_python, spins)
from workbook.stuck.model import Held, Snapshot, ThreadLook
from workbook.stuck.procfs import Call
from workbook.tuning import CONFIRM, CONFIRM_LOOKS, CYCLE_LOOK, HOLD_CONFIRM, LOOK_INTERVAL

FAR = 1_000.0  # a deadline no test reaches
LOCK_A, LOCK_B = 101, 102  # lock ids
FUTEX = Call("futex", False, None)


def look(ident: int, state: str = "parked", *, cpu: float = 1.0, line: int = 10,
         held: tuple[Held, ...] = (), waits_for: int | None = None, **kw) -> ThreadLook:
    return ThreadLook(ident, f"t{ident}", cpu, "S", kw.pop("syscall", FUTEX), state,
                      position=(7, line), in_learner=True, held=held,
                      waits_for=waits_for, **kw)


def holding(lock: int, *, owner: object | None = None, with_block: bool = True) -> Held:
    return Held(lock, f"self._lock{lock}", 5, "Sink.put", owner or object(), with_block)


def snap(at: float, *looks: ThreadLook, why: str = "", **kw) -> Snapshot:
    return Snapshot(list(looks), at, why, **kw)


def run(snaps, *, known=None, guards=(), progress=None):
    """Feed the snapshots in order; the decisions."""
    progress = progress or Progress()
    out = []
    for s in snaps:
        d = decide(progress, s, deadline=FAR, known=known or {}, guards=guards)
        progress = d.progress
        out.append(d)
    return out


def looks_every(interval: float, count: int, make) -> list[Snapshot]:
    return [make(i * interval) for i in range(count)]


# -- a lock cycle ----------------------------------------------------------------------------

def abba(at: float, cpu: float = 1.0) -> Snapshot:
    return snap(at, look(1, held=(holding(LOCK_A),), waits_for=LOCK_B, cpu=cpu),
                look(2, held=(holding(LOCK_B),), waits_for=LOCK_A, cpu=cpu))


def test_a_lock_cycle_is_stuck_after_two_quick_looks():
    first, second = run([abba(0.0), abba(CYCLE_LOOK)])
    assert first.kind is None and first.interval == CYCLE_LOOK
    assert second.kind == "stuck" and {x.ident for x in second.threads.looks} == {1, 2}
    assert deadlocked(second.threads).cycle == {1, 2}


def test_a_lock_cycle_is_stuck_even_while_another_thread_moves():
    busy = look(3, "moving", cpu=0.0)
    s = [snap(t, *abba(t).looks, busy, why="thread 't3': kernel state R")
         for t in (0.0, CYCLE_LOOK)]
    assert [d.kind for d in run(s)] == [None, "stuck"]
    assert {x.ident for x in run(s)[-1].threads.looks} == {1, 2}


def test_a_cycle_of_bare_acquires_is_not_certain():
    """A Lock taken by a bare acquire() may be released by another thread (a hand-made wait
    queue): it names the cause in the text but never decides."""
    s = snap(0, look(1, held=(holding(LOCK_A, with_block=False),), waits_for=LOCK_B),
             look(2, held=(holding(LOCK_B, with_block=False),), waits_for=LOCK_A))
    assert deadlocked(s) is None and deadlocked(s, with_only=False) is not None


def test_a_thread_waiting_for_an_rlock_it_holds_is_no_cycle():
    s = snap(0, look(1, held=(holding(LOCK_A),), waits_for=LOCK_A, waits_reentrant=True))
    assert deadlocked(s) is None
    s.looks[0].waits_reentrant = False  # a plain Lock taken twice: a cycle of one
    assert deadlocked(s).cycle == {1}


def test_a_cycle_that_moved_between_looks_starts_over():
    moved = abba(CYCLE_LOOK, cpu=1.5)  # a clock moved: not the same still state
    assert [d.kind for d in run([abba(0.0), moved])] == [None, None]


# -- every thread parked, nothing pending ------------------------------------------------------

def parked_pair(at: float) -> Snapshot:
    return snap(at, look(1), look(2, line=20))


def test_all_parked_needs_the_full_confirmation():
    times = [i * LOOK_INTERVAL for i in range(CONFIRM_LOOKS + 1)]
    kinds = [d.kind for d in run([parked_pair(t) for t in times])]
    first_stuck = kinds.index("stuck")
    assert "stuck" not in kinds[:CONFIRM_LOOKS - 1]
    assert times[first_stuck] >= CONFIRM and first_stuck + 1 >= CONFIRM_LOOKS


def test_a_state_already_judged_stuck_needs_no_new_streak():
    s = parked_pair(0.0)
    known = {x.key: x.cpu for x in s.looks}
    assert run([s], known=known)[0].kind == "stuck"


def test_a_state_judged_in_an_earlier_wait_is_not_stuck_at_once_beside_a_new_thread():
    """One wait ended on 'every thread at rest' (``rest_is_success``); the next wait's
    snapshot holds the same threads and a new one (a probe parked on the queue's lock for a
    moment): the new thread was never judged, so the whole state needs its own streak."""
    rest = parked_pair(0.0)
    known = {x.key: x.cpu for x in rest.looks}
    probe = look(3, line=30, waits_for=LOCK_A)
    first = run([snap(0.0, *rest.looks, probe)], known=known)[0]
    assert first.kind is None


def test_a_state_judged_before_whose_clock_moved_since_needs_a_new_streak():
    rest = parked_pair(0.0)
    known = {x.key: x.cpu for x in rest.looks}
    ran = snap(0.0, look(1, cpu=1.5), look(2, line=20))  # t1 ran in between, same line
    assert run([ran], known=known)[0].kind is None


def test_a_stuck_decision_teaches_the_states_it_judged():
    decisions = run([parked_pair(i * LOOK_INTERVAL) for i in range(CONFIRM_LOOKS + 1)])
    stuck = next(d for d in decisions if d.kind == "stuck")
    assert set(stuck.learned) == {x.key for x in parked_pair(0).looks}


def test_a_pending_asyncio_bound_is_ended_instead_of_the_check():
    guard = SimpleNamespace(deadline=5.0, fired=False)
    later = SimpleNamespace(deadline=FAR + 1, fired=False)  # ends after this wait: not ours
    decisions = run([parked_pair(i * LOOK_INTERVAL) for i in range(CONFIRM_LOOKS + 1)],
                    guards=[later, guard])
    end = next(d for d in decisions if d.kind is not None)
    assert end.kind == "guard" and end.guard is guard


def test_a_loop_with_callbacks_ready_is_stuck_not_rescued_by_its_bound():
    guard = SimpleNamespace(deadline=5.0, fired=False)
    asleep = look(1, "asleep", in_loop=True, loop_ready=3)
    decisions = run([snap(i * LOOK_INTERVAL, asleep) for i in range(CONFIRM_LOOKS + 1)],
                    guards=[guard])
    assert next(d for d in decisions if d.kind is not None).kind == "stuck"


# -- a slow thread that moves, a lock kept from its waiters ------------------------------------

def test_a_slow_but_moving_thread_is_never_stuck():
    slow = [snap(i * LOOK_INTERVAL, look(1, "moving", cpu=i * 0.01), look(2),
                 why="thread 't1': kernel state R") for i in range(400)]  # 20 s of looks
    assert all(d.kind is None for d in run(slow))


def hog(at: float, *, waiter_cpu: float = 1.0, owner=None, children=False) -> Snapshot:
    return snap(at, look(1, "moving", held=(holding(LOCK_A, owner=owner),), cpu=at),
                look(2, waits_for=LOCK_A, cpu=waiter_cpu),
                why="thread 't1': kernel state R", children=children)


def test_a_lock_kept_while_its_waiters_starve_is_a_hog_after_hold_confirm():
    frame = object()
    times = [i * LOOK_INTERVAL for i in range(int(HOLD_CONFIRM / LOOK_INTERVAL) + 2)]
    decisions = run([hog(t, owner=frame) for t in times])
    kinds = [d.kind for d in decisions]
    first = kinds.index("stuck")
    assert times[first] >= HOLD_CONFIRM and "stuck" not in kinds[:first]
    assert "keeps `self._lock101`" in decisions[first].header
    assert {x.ident for x in decisions[first].threads.looks} == {1, 2}


def test_a_hog_whose_waiter_ran_or_whose_holder_let_go_starts_over():
    frame = object()
    times = [i * LOOK_INTERVAL for i in range(int(HOLD_CONFIRM / LOOK_INTERVAL) + 2)]
    # the waiter's clock moves each look: it got the lock in between, however briefly
    assert all(d.kind is None for d in run([hog(t, owner=frame, waiter_cpu=t) for t in times]))
    # a new frame holds it each look: the holder left the with block and came back
    assert all(d.kind is None for d in run([hog(t) for t in times]))


def test_a_hog_beside_a_child_process_is_not_called():
    frame = object()
    times = [i * LOOK_INTERVAL for i in range(int(HOLD_CONFIRM / LOOK_INTERVAL) + 2)]
    assert all(d.kind is None for d in run([hog(t, owner=frame, children=True) for t in times]))


def test_a_busy_thread_holding_no_lock_the_parked_ones_want_is_no_hog():
    s = snap(0, look(1, "moving", held=(holding(LOCK_B),)), look(2, waits_for=LOCK_A),
             why="thread 't1': kernel state R")
    assert hogging(s) is None


# -- how one thread's kernel state is read (``classify``) --------------------------------------

def test_running_or_unknown_calls_could_move():
    assert classify("R", None)[0] == "moving"
    assert classify("S", Call("syscall 999", None, None))[0] == "moving"


def test_a_timed_wait_could_move_unless_it_ends_after_the_bound():
    timed = Call("futex", True, None)
    assert classify("S", timed, deadline=10.0)[0] == "timed"
    assert classify("S", Call("futex", True, 20.0), deadline=10.0)[0] == "parked"
    assert classify("S", Call("futex", True, 5.0), deadline=10.0)[0] == "timed"
    # a test's own event.wait(BOUND) is a deadline, not progress -- unless learner code called it
    assert classify("S", timed, harness_bound=True)[0] == "bound"
    assert classify("S", timed, harness_bound=True, learner=True)[0] == "timed"


def test_an_untimed_wait_is_parked():
    assert classify("S", FUTEX)[0] == "parked"
    assert classify("S", Call("read", False, None))[0] == "parked"


def test_a_thread_in_time_sleep_could_move():
    assert classify("S", Call("clock_nanosleep", True, 3.0), deadline=10.0)[0] == "timed"
    assert classify("S", Call("nanosleep", True, None), deadline=10.0)[0] == "timed"
    assert classify("S", Call("clock_nanosleep", True, 30.0), deadline=10.0)[0] == "parked"


@pytest.mark.parametrize("name", ["poll", "epoll_wait", "pselect6"])
def test_a_selector_with_a_finite_timeout_could_move(name):
    """The timeout is the kernel's (seconds), whatever the selector class did to it: a
    PollSelector passes milliseconds to poll(2), its frame's local was once read as seconds."""
    call = Call(name, True, None, 7.5)
    assert classify("S", call, selector=True, deadline=10.0)[0] == "timed"
    assert classify("S", call, selector=True, deadline=10.0, began=0.0)[0] == "timed"
    # a thread of ours that began at 5.0 cannot see a 7.5 s select() end before 10.0
    assert classify("S", call, selector=True, deadline=10.0, began=5.0)[0] == "asleep"
    # a timeout we could not read: it may end, so it could move
    assert classify("S", Call(name, True, None), selector=True, began=5.0)[0] == "timed"


@pytest.mark.parametrize("name", ["poll", "epoll_wait", "pselect6"])
def test_a_selector_with_no_timeout_is_asleep(name):
    assert classify("S", Call(name, False, None), selector=True)[0] == "asleep"


def test_a_selector_with_an_fd_ready_could_move():
    call = Call("epoll_wait", False, None)
    assert classify("S", call, selector=True, fds_ready=True) == ("timed",
                                                                 "a registered fd is ready")


def test_a_selector_frame_outside_a_select_call_is_leaving_it():
    assert classify("S", FUTEX, selector=True)[0] == "timed"


def test_a_thread_started_but_not_yet_running_means_the_check_can_still_move(monkeypatch):
    """``Thread.start()`` waits, parked, until the new thread runs; on a loaded machine that
    lasts seconds.  The newborn is in threading's limbo with no ident yet: the look says it
    is starting, so its parent is never called stuck (P04's cross-thread scenario was, once,
    at load 10)."""
    import threading

    from workbook.stuck import observe

    newborn = threading.Thread(target=lambda: None, name="newborn", daemon=True)
    assert newborn.ident is None
    monkeypatch.setattr(threading, "enumerate", lambda: [threading.current_thread(), newborn])
    session = SimpleNamespace(watchers={}, watchers_lock=threading.Lock(), excluded=set(),
                              background={}, guards=set(), guards_lock=threading.Lock(),
                              is_learner=lambda filename: False)
    shot = observe.take_snapshot(session, threading.get_ident(), FAR)
    assert shot.looks == [] and shot.why == "thread 'newborn' is starting"


# -- spinning, from the clocks of one watched thread ------------------------------------------

def test_a_spinner_on_a_crowded_machine_spins_though_it_got_a_tenth_of_a_cpu():
    # 3.4 s watched at load 20 on 2 cores: 0.3 s of CPU, the rest runnable, waiting for one
    assert spins(used=0.3, wanted=3.3, elapsed=3.4, moved=68, looks=68)


def test_a_short_sleep_loop_on_a_crowded_machine_is_not_spinning():
    # a 50 ms time.sleep loop at load 15: each wake-up waits for a CPU, so it "wanted" one
    # at every look, but it ran for microseconds and was asleep in time.sleep at most looks
    assert not spins(used=0.004, wanted=3.0, elapsed=3.4, moved=68, looks=68, slept=60)
    assert not spins(used=0.004, wanted=3.0, elapsed=3.4, moved=68, looks=68)  # no CPU got
    assert not spins(used=0.3, wanted=3.3, elapsed=3.4, moved=68, looks=68, slept=60)


def test_a_thread_that_wanted_a_cpu_at_few_looks_is_not_spinning():
    assert not spins(used=0.3, wanted=0.3, elapsed=3.4, moved=20, looks=68)
    assert not spins(used=0.0, wanted=0.0, elapsed=0.0, moved=0, looks=0)


SWITCH = 0.005  # CPython's default switch interval


def test_a_thread_running_or_in_the_gils_short_futex_wait_is_ready_for_python():
    assert ready_for_python("R", None, now=10.0, switch=SWITCH)
    assert ready_for_python("S", Call("futex", True, 10.004), now=10.0, switch=SWITCH)
    assert ready_for_python("S", Call("futex", True, 10.009), now=10.0, switch=SWITCH)


def test_a_longer_timed_wait_an_untimed_one_or_another_call_is_not_the_gil():
    assert not ready_for_python("S", Call("futex", True, 10.5), now=10.0, switch=SWITCH)
    assert not ready_for_python("S", Call("futex", True, 9.9), now=10.0, switch=SWITCH)
    assert not ready_for_python("S", FUTEX, now=10.0, switch=SWITCH)  # untimed: parked
    assert not ready_for_python("S", Call("futex", True, None), now=10.0, switch=SWITCH)
    assert not ready_for_python("S", Call("clock_nanosleep", True, 10.001), now=10.0,
                                switch=SWITCH)
    assert not ready_for_python("D", None, now=10.0, switch=SWITCH)


def test_a_thread_ready_at_most_looks_but_asleep_while_another_held_the_gil_is_starved():
    # 0.39 s of CPU in 6 s, never queued, beside a thread that ran 3 s in one C call
    assert gil_starved(ready=18, looks=20, used=0.39, wanted=0.4, elapsed=6.0,
                       holder_used=3.0)


def test_a_thread_starved_of_cpu_on_a_crowded_machine_is_queued_not_starved_of_the_gil():
    assert not gil_starved(ready=18, looks=20, used=0.39, wanted=5.5, elapsed=6.0,
                           holder_used=3.0)


def test_threads_sharing_the_gil_fairly_or_with_no_busy_holder_are_not_starved():
    assert not gil_starved(ready=18, looks=20, used=1.0, wanted=1.1, elapsed=6.0,
                           holder_used=1.2)  # a fair share of it
    assert not gil_starved(ready=18, looks=20, used=0.01, wanted=0.01, elapsed=6.0,
                           holder_used=0.1)  # nobody kept it
    assert not gil_starved(ready=5, looks=20, used=0.01, wanted=0.01, elapsed=6.0,
                           holder_used=3.0)  # mostly in waits of its own
    assert not gil_starved(ready=2, looks=2, used=0.01, wanted=0.01, elapsed=6.0,
                           holder_used=3.0)  # too few looks to say
