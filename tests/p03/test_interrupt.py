"""Acceptance set for P03 · BoundedBlockingQueue: interrupting a blocked call.

Python's counterpart of Java's InterruptedException: the main thread blocks in put/take, a
helper thread waits until it is parked in a Condition wait and sends it SIGUSR1, and the
signal handler raises.  The exception must leave put/take, the queue must be unchanged and
its lock free.  These tests run in the main thread (pytest's), as signals require.
"""
from __future__ import annotations

import pytest

from tests.p03.support import Interrupted, MainInterrupt, call
from workbook.testkit import check, fail


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
        check(mi.parked, f"{what} was not waiting in a Condition when the signal came (it "
                         "spins or sleeps instead), although the exception did propagate",
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
