"""Acceptance set for P03 · BoundedBlockingQueue: interrupting a blocked call.

Python's counterpart of Java's InterruptedException: the main thread blocks in put/take, a
helper thread waits until it is parked (by behaviour: no CPU, no wake-ups) and sends it
SIGUSR1, and the signal handler raises.  The exception must leave put/take, the queue must
be unchanged and its lock free.  And when the interrupt comes right after the thread was
woken (a ``Probe`` sends the signal the moment its blocking call returns), the wake-up it
was given must not be lost: another thread waiting for the same thing gets it.  These
tests run in the main thread (pytest's), as signals require.
"""
from __future__ import annotations

import pytest

from tests.p03.support import (Interrupted, MainInterrupt, Probe, abandon, call, finish,
                               usable, wait_parked)
from workbook.testkit import check, fail, start_daemon


def _outcome(mi: MainInterrupt, blocking):
    """Run ``blocking()`` in the main thread under ``mi``; return (how it ended, value)."""
    with mi:
        try:
            mi.arm()
            value = blocking()
        except Interrupted:
            return "interrupted", None
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as the outcome
            return "raised", exc
    return "returned", value


def _judge(mi: MainInterrupt, how: str, value, what: str) -> None:
    if how == "interrupted":
        check(mi.parked, f"{what} was not parked when the signal came (it spins or polls "
                         "instead), although the exception did propagate",
              pitfall="spin_holding_lock")
        return
    if mi.swallowed or (how == "returned" and mi.rescued):
        fail(f"the exception raised by the signal handler while {what} was blocked never "
             f"reached the caller: the call went back to waiting and only ended when the "
             f"test freed the queue ({how} {value!r})", pitfall="swallow_interrupt")
    if not mi.sent:
        fail(f"{what} did not block at all: it {how} {value!r}",
             pitfall="head_equals_tail" if how == "returned" else None)
    fail(f"{what} was interrupted but {how} {value!r} instead of letting the "
         "exception propagate")


@pytest.mark.checkpoint("p03.interrupt")
def test_an_interrupt_in_a_blocked_put_propagates_and_leaves_the_queue_unchanged(impl):
    q = impl.BoundedBlockingQueue(2)
    call(lambda: (q.put("a"), q.put("b")), what="filling a capacity-2 queue")
    mi = MainInterrupt(rescue=q.take)
    how, value = _outcome(mi, lambda: q.put("extra"))
    _judge(mi, how, value, "put('extra') on a full queue")
    after = call(lambda: (len(q), q.take(), q.take(), len(q)),
                 what="len(), take(), take(), len() after the interrupted put "
                      "(is the lock still held?)")
    check(after == (2, "a", "b", 0),
          f"after the interrupted put, len/take/take/len gave {after!r}; expected "
          "(2, 'a', 'b', 0): the queue must be unchanged")
    again = call(lambda: (q.put("c"), q.take(), len(q)),
                 what="a put and a take after the interrupted put")
    check(again == (None, "c", 0), f"put('c'), take(), len() then gave {again!r}")


@pytest.mark.checkpoint("p03.interrupt")
def test_an_interrupt_in_a_blocked_take_propagates_and_leaves_the_queue_unchanged(impl):
    q = impl.BoundedBlockingQueue(2)
    mi = MainInterrupt(rescue=lambda: q.put("rescue"))
    how, value = _outcome(mi, q.take)
    _judge(mi, how, value, "take() on an empty queue")
    size = call(len, q, what="len() after the interrupted take (is the lock still held?)")
    check(size == 0, f"after the interrupted take, len() is {size}, expected 0")
    after = call(lambda: (q.put("x"), q.put("y"), q.take(), q.take(), len(q)),
                 what="two puts and two takes after the interrupted take")
    check(after == (None, None, "x", "y", 0),
          f"put('x'), put('y'), take(), take(), len() then gave {after!r}: an interrupted "
          "take must not consume anything")


def _interrupted_after_wakeup(impl, role: str):
    """The main thread and then a helper wait for the same thing; one change wakes the main
    thread, which is interrupted right then.  The helper must still get what it waits for."""
    q = call(impl.BoundedBlockingQueue, 1, what="creating a capacity-1 queue")
    if role == "take":
        blocking, wake, other = q.take, lambda: call(q.put, "x", what="put('x')"), q.take
        rescue = lambda: q.put("rescue")  # noqa: E731
    else:
        call(q.put, "a", what="filling the queue")
        blocking = lambda: q.put("m")  # noqa: E731
        wake = lambda: check(call(q.take, what="take()") == "a", "take() should return 'a'")  # noqa: E731
        other, rescue = (lambda: q.put("o")), q.take
    probe, helper = Probe(), []

    def prepare() -> None:
        helper.append(start_daemon(other, name=f"other-{role}"))
        wait_parked(helper[0], f"a second {role}() waiting behind the main thread's", q=q)

    mi = MainInterrupt(rescue=rescue, probe=probe, prepare=prepare, before=wake)
    try:
        how, value = _outcome(mi, lambda: probe.run(blocking))
        if mi.error is not None:
            raise mi.error
        _judge(mi, how, value, f"{role}() in the main thread")
        return q, helper[0], mi
    except BaseException:
        abandon(*helper)
        raise


def _lost(mi: MainInterrupt, role: str, what: str) -> str:
    first = ("it was interrupted right after it was woken" if mi.on_wake
             else "the other waiter was woken instead")
    return (f"the main thread's {role}() was woken and {first}; {what}: the wake-up it "
            "consumed was lost. A thread leaving its wait with an exception passes the "
            "wake-up on (notify again)")


@pytest.mark.checkpoint("p03.interrupt")
def test_a_take_interrupted_right_after_its_wakeup_passes_the_wakeup_on(impl):
    q, other, mi = _interrupted_after_wakeup(impl, "take")
    try:
        got = finish(other, "the second take(), with 'x' in the queue",
                     pitfall="interrupt_loses_wakeup")
    except AssertionError as exc:
        fail(f"{exc}. " + _lost(mi, "take", "the other take() stays asleep although 'x' "
                                "is queued"), pitfall="interrupt_loses_wakeup")
    finally:
        abandon(other)
    check(got == "x", f"the second take() returned {got!r}, expected 'x'")
    check(usable(q, "at the end") == 0, "the queue should be empty at the end")


@pytest.mark.checkpoint("p03.interrupt")
def test_a_put_interrupted_right_after_its_wakeup_passes_the_wakeup_on(impl):
    q, other, mi = _interrupted_after_wakeup(impl, "put")
    try:
        finish(other, "the second put('o'), with a free slot", pitfall="interrupt_loses_wakeup")
    except AssertionError as exc:
        fail(f"{exc}. " + _lost(mi, "put", "the other put() stays asleep although a slot "
                                "is free"), pitfall="interrupt_loses_wakeup")
    finally:
        abandon(other)
    after = call(lambda: (len(q), q.take(), len(q)), what="len(), take(), len()")
    check(after == (1, "o", 0), f"then len(), take(), len() gave {after!r}; expected "
                                "(1, 'o', 0): the interrupted put('m') must not be queued")
