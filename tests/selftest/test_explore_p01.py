"""P01's explorer (workbook/explore/p01*.py): its oracle on hand-built histories, its replay
token, its controlled event loop, and that a pitfall is found and replayed exactly."""
from __future__ import annotations

import asyncio

import pytest

from workbook import manifest, variants
from workbook.explore import p01, p01_judge
from workbook.explore.oracle import Call
from workbook.explore.p01_judge import Wakeup, fifo_order, same_cycle
from workbook.explore.p01_scenario import Scenario, candidates, well_formed
from workbook.explore.values import Item
from workbook.explore.tokens import decode, encode

REFERENCE = manifest.get("p01").solution_file


def put(item, call, ret, task=2, outcome=("return", None)):
    return Call(task, f"put({item!r})", "put", (item,), call=call, ret=ret, outcome=outcome)


def get(result, call, ret, max_items=1024, timeout=None):
    return Call(1, "get_batch()", "get", (max_items, timeout), call=call, ret=ret,
                outcome=("return", result))


def test_the_model_takes_the_oldest_items_each_exactly_once():
    a, b = Item(1), Item(2)
    ok = [put(a, 0, 1), put(b, 2, 3), get([a], 4, 5), get([b], 6, 7)]
    assert fifo_order(ok) is not None
    assert fifo_order([put(a, 0, 1), put(b, 2, 3), get([b, a], 4, 5)]) is None  # reordered
    assert fifo_order([put(a, 0, 1), get([a], 2, 3), get([a], 4, 5)]) is None  # twice
    # a put overlapping the batch may or may not be in it
    assert fifo_order([put(a, 0, 1), put(b, 2, 6), get([a], 3, 5)]) is not None
    assert fifo_order([put(a, 0, 1), put(b, 2, 6), get([a, b], 3, 5)]) is not None


def test_an_empty_batch_needs_an_empty_queue_and_a_waiting_call_an_empty_one_too():
    a = Item(1)
    assert fifo_order([put(a, 0, 1), get([], 2, 3, timeout=0)]) is None
    assert fifo_order([put(a, 0, 4), get([], 2, 3, timeout=0)]) is not None  # before the put
    waiting = Call(1, "get_batch()", "get", (1024, None), call=2)
    assert fifo_order([put(a, 0, 1), waiting]) is None  # it sleeps with an item there
    assert fifo_order([waiting]) is not None


def test_an_interrupted_put_may_or_may_not_have_queued_its_item_and_the_hook_needs_empty():
    a = Item(1)
    cut = put(a, 0, 1, outcome=("raise", KeyboardInterrupt()))
    cut.meta["injected"] = cut.outcome[1]
    assert fifo_order([cut, get([a], 2, 3)]) is not None
    assert fifo_order([cut, get([], 2, 3, timeout=0)]) is not None
    hook = Call(1, "after_empty_drain()", "empty", (), call=2, ret=3, outcome=("return", None))
    assert fifo_order([put(a, 0, 1), hook]) is None
    assert fifo_order([put(a, 0, 1), get([a], 4, 5), hook]) is None  # the hook came first
    assert fifo_order([put(a, 0, 1), get([a], 2, 3), hook]) is not None  # they overlap
    hook.call, hook.ret = 6, 7
    assert fifo_order([put(a, 0, 1), get([a], 4, 5), hook]) is not None


def test_two_wakeups_share_a_cycle_only_when_no_arm_can_lie_between_their_decisions():
    first, second = put(Item(1), 0, 3), put(Item(2), 4, 7)
    a, b = Wakeup(2, False, first), Wakeup(6, False, second)
    assert same_cycle([a, b], []) == (a, b)
    assert same_cycle([a, b], [(3, 5)]) is None  # the consumer armed in between
    # a put that decided early but called late, after an arm: the arm may be between
    late = put(Item(3), 0, 9)
    c = Wakeup(8, False, late)
    assert same_cycle([b, c], [(1, 2)]) is None
    assert same_cycle([b, c], [(8, 9)]) == (b, c)


def test_a_token_carries_its_scenario_and_shrinking_keeps_it_well_formed():
    sc = Scenario([["old_loop"], ["bind", "wrapper"], ["put", "odd"]],
                  [["get", "True", "-0.0", 0.5, 1.0], ["busy", 0.5]],
                  [[["put", "touchy", 0.5]], [["put", "0", 0]]], hook="handoff", end="close",
                  fault="Cancelled", late=True, spurious=2, stall=0.5, defer=1.0, lag=0.5,
                  jump=-100.0, preempt=0.3, lines=True, seed=9)
    owner, data = decode(encode("p01", sc))
    assert owner == "p01" and p01.from_data(data) == sc
    assert all(well_formed(c) for c in candidates(sc))
    assert not well_formed(Scenario([], [["get", 1, 0, 0, None]], []))


def test_the_loop_runs_on_the_virtual_clock_and_the_same_scenario_gives_the_same_run():
    sc = Scenario([["bind", "running"]], [["get", "default", 1.0, 0, None], ["busy", 0.5]],
                  [[["put", "obj", 0.5], ["put", "0", 0]], [["put", "odd", 1.0]]],
                  spurious=1, preempt=0.3, lines=True, seed=5)
    module = p01.load(REFERENCE)
    first, again = p01.run(module, sc), p01.run(module, sc)
    assert first.problem is None and first.error is None
    assert [(e.task, e.now, e.text, e.line) for e in first.events] == \
           [(e.task, e.now, e.text, e.line) for e in again.events]
    assert any(e.now >= 1.0 for e in first.events)  # a second of virtual time, no real wait
    assert any("sleeps in select()" in e.text for e in first.events)


def test_a_pitfall_is_found_and_its_token_replays_the_same_timeline():
    variant = variants.get(manifest.get("p01"), "pitfall", "single_drain")
    path = variants.materialize(variant)
    report = p01.explore(path, examples=0)
    assert report.found is not None and "lost wakeup" in report.found.problem
    message = report.found.message()
    assert "./check.sh p01 --replay x1." in message and "select()" in message
    again = p01.replay(path, encode("p01", report.found.scenario))
    assert again.problem == report.found.problem
    assert [(e.task, e.text) for e in again.events] == \
           [(e.task, e.text) for e in report.found.events]


def test_a_lock_order_deadlock_between_put_and_the_loop_side_is_found(tmp_path):
    source = REFERENCE.read_text()
    put_lock = "        with self._lock:\n            loop, event = self._loop, self._event"
    arm_lock = "            with self._lock:\n                self._wakeup_in_flight = False"
    assert put_lock in source and arm_lock in source
    abba = source.replace("        self._lock = threading.Lock()",
                          "        self._lock = threading.Lock()\n"
                          "        self._other = threading.Lock()")
    abba = abba.replace(put_lock, "        with self._lock, self._other:\n"
                                  "            loop, event = self._loop, self._event")
    abba = abba.replace(arm_lock, "            with self._other, self._lock:\n"
                                  "                self._wakeup_in_flight = False")
    path = tmp_path / "abba.py"
    path.write_text(abba)
    report = p01.explore(path, examples=0)
    assert report.found is not None, "the ABBA deadlock was not found"
    assert "waits" in report.found.problem and "holds" in report.found.problem


def test_a_closed_loop_is_a_real_asyncio_loop_that_refuses_call_soon_threadsafe():
    from workbook.explore.p01_loop import Loop, shut
    from workbook.explore.sched import Scheduler

    loop = Loop(Scheduler(0))
    assert isinstance(loop, asyncio.AbstractEventLoop)
    assert loop.run_until_complete(asyncio.sleep(0, "done")) == "done"
    shut(loop)
    with pytest.raises(RuntimeError):
        loop.call_soon_threadsafe(print)


def test_nan_timeouts_are_not_judged_for_liveness():
    assert p01_judge._nan(float("nan")) and not p01_judge._nan(0.5)
    assert p01_judge._forever(None) and p01_judge._forever(float("inf"))


def test_a_cancelled_wait_must_end_in_cancelled_error_unless_asyncio_lost_the_cancel(tmp_path):
    """A cancel that lands while nothing else happens must surface; one that lands as a
    wakeup arrives may be swallowed by asyncio.wait_for itself on 3.10-3.11 (not judged)."""
    source = REFERENCE.read_text()
    handler = "            except asyncio.TimeoutError:"
    assert handler in source
    swallow = tmp_path / "swallow.py"
    swallow.write_text(source.replace(
        handler, "            except (asyncio.TimeoutError, asyncio.CancelledError):"))
    alone = Scenario([["bind", "running"]], [["get", "default", 1.0, 0, 0.5]], [])
    module = p01.load(REFERENCE)
    assert p01.run(module, alone).problem is None
    bad = p01.run(p01.load(swallow), alone)
    assert bad.problem and "was cancelled while it waited" in bad.problem
