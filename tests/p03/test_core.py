"""Acceptance set for P03 · BoundedBlockingQueue: single-thread contract.

Validation, FIFO through the ring, capacity 1, duplicates, no reference kept to taken
items, and no ready-made queue underneath.  Every call that could block on a broken queue
runs in a daemon thread with a bounded join.
"""
from __future__ import annotations

import gc
import random
import sys
import weakref
from collections import deque

import pytest

from tests.p03.support import call
from workbook.testkit import check, fail


def _raises(fn, *args) -> BaseException | None:
    try:
        fn(*args)
    except (TypeError, ValueError) as exc:
        return exc
    return None


# -- constructor and None validation ----------------------------------------------------------

@pytest.mark.checkpoint("p03.validation")
def test_capacity_must_be_a_positive_int_and_bool_is_refused(impl):
    q = impl.BoundedBlockingQueue(3)
    check(q.capacity == 3, f"BoundedBlockingQueue(3).capacity is {q.capacity!r}")
    check(len(q) == 0, f"a new queue has len() {len(q)}, expected 0")
    for bad in (0, -1, -7, True, False, 2.0, 1.5, "3", None):
        try:
            impl.BoundedBlockingQueue(bad)
        except (TypeError, ValueError):
            continue
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - report what it raised instead
            fail(f"BoundedBlockingQueue({bad!r}) raised {type(exc).__name__}, "
                 "expected TypeError or ValueError")
        fail(f"BoundedBlockingQueue({bad!r}) was accepted; capacity must be an int > 0 "
             "(and bool is not accepted)")
    check(impl.BoundedBlockingQueue[int](1).capacity == 1,
          "BoundedBlockingQueue[int](1) should work: the class is Generic[T]")


@pytest.mark.checkpoint("p03.validation")
def test_capacity_is_read_only(impl):
    q = impl.BoundedBlockingQueue(2)
    try:
        q.capacity = 5
    except AttributeError:
        pass
    else:
        fail("assigning q.capacity = 5 was accepted; capacity is read-only (a property)")
    check(q.capacity == 2, f"capacity changed to {q.capacity!r}")


@pytest.mark.checkpoint("p03.validation")
def test_put_none_is_refused_even_on_a_full_queue_and_changes_nothing(impl):
    def scenario():
        q = impl.BoundedBlockingQueue(2)
        empty = _raises(q.put, None)
        size_after_empty = len(q)
        q.put("a")
        q.put("b")
        full = _raises(q.put, None)  # must not wait for a slot: refused before locking
        return empty, size_after_empty, full, len(q), q.take(), q.take()

    empty, size_empty, full, size_full, a, b = call(
        scenario, what="put(None) on an empty and then on a full queue")
    check(empty is not None, "put(None) on an empty queue was accepted; expected TypeError "
                             "or ValueError (poll() uses None to mean 'no item')")
    check(size_empty == 0, f"after a refused put(None), len() is {size_empty}, expected 0")
    check(full is not None, "put(None) on a full queue returned instead of raising")
    check((size_full, a, b) == (2, "a", "b"),
          f"after a refused put(None) the full queue holds len {size_full} and yields "
          f"{a!r}, {b!r}; expected 2, 'a', 'b'")


# -- FIFO through many wrap-arounds -----------------------------------------------------------

def _len_pitfall(got: int, want: int, capacity: int) -> str | None:
    return "head_equals_tail" if (got, want) == (0, capacity) else None


@pytest.mark.checkpoint("p03.fifo_wrap")
def test_items_come_out_in_put_order_through_many_wrap_arounds(impl):
    capacity = 5

    def scenario():
        q = impl.BoundedBlockingQueue(capacity)
        model: deque[int] = deque()
        rnd = random.Random(3)
        fulls = empties = 0
        for step in range(4000):
            # Mostly random, but every 100 steps fill it up or drain it completely.
            if step % 200 == 0:
                plan = ["put"] * (capacity - len(model))
            elif step % 200 == 100:
                plan = ["take"] * len(model)
            else:
                plan = ["put" if rnd.random() < 0.5 else "take"]
            for op in plan:
                if op == "put" and len(model) < capacity:
                    q.put(step)
                    model.append(step)
                elif op == "take" and model:
                    got, want = q.take(), model.popleft()
                    if got != want:
                        return f"after {step} steps take() returned {got!r}, expected {want!r}", None
                size = len(q)
                if size != len(model):
                    return (f"after {step} steps (the last one a {op}) len() is {size}, "
                            f"expected {len(model)}", _len_pitfall(size, len(model), capacity))
                fulls += len(model) == capacity
                empties += not model
        return f"ok {fulls} {empties}", None

    message, pitfall = call(scenario, what="a single-threaded run of 4000 put/take steps "
                            "that never needs to wait")
    check(message.startswith("ok"), message, pitfall=pitfall)
    _, fulls, empties = message.split()
    check(int(fulls) > 10 and int(empties) > 10,
          f"the scenario should reach full and empty many times ({fulls}, {empties})")


# -- capacity 1 ---------------------------------------------------------------------------------

@pytest.mark.checkpoint("p03.capacity_one")
def test_capacity_one_alternates_between_full_and_empty(impl):
    def scenario():
        q = impl.BoundedBlockingQueue(1)
        for i in range(300):
            q.put(i)
            if len(q) != 1:
                return f"round {i}: after put() on a capacity-1 queue len() is {len(q)}", (
                    "head_equals_tail" if len(q) == 0 else None)
            got = q.take()
            if got != i or len(q) != 0:
                return f"round {i}: take() returned {got!r} leaving len() {len(q)}", None
        return "ok", None

    message, pitfall = call(scenario, what="300 put/take rounds on a capacity-1 queue")
    check(message == "ok", message, pitfall=pitfall)


# -- duplicates and falsy items -------------------------------------------------------------

@pytest.mark.checkpoint("p03.duplicates")
def test_equal_and_duplicate_items_are_kept_separately_and_falsy_items_are_accepted(impl):
    same = ["shared"]
    twin_a, twin_b = [1], [1]  # equal, not identical
    items = [same, "", same, 0, twin_a, False, twin_b, same, (), 0.0]

    def scenario():
        q = impl.BoundedBlockingQueue(4)
        out = []
        for item in items:  # keeps 1-3 items queued, wrapping around the ring
            q.put(item)
            if len(q) == 3:
                out.append(q.take())
                out.append(q.take())
        while len(q):
            out.append(q.take())
        return out

    out = call(scenario, what="putting and taking equal, duplicate and falsy items")
    check(len(out) == len(items), f"put {len(items)} items, took {len(out)}: {out!r}")
    for i, (got, want) in enumerate(zip(out, items)):
        check(got is want, f"item {i}: took {got!r} ({type(got).__name__}), expected the "
                           f"very object that was put: {want!r} ({type(want).__name__})")


# -- no reference kept ------------------------------------------------------------------------

class Token:
    __slots__ = ("n", "__weakref__")

    def __init__(self, n: int) -> None:
        self.n = n


@pytest.mark.checkpoint("p03.no_reference")
def test_the_queue_keeps_no_reference_to_taken_items(impl):
    def scenario():
        q = impl.BoundedBlockingQueue(4)
        refs = []
        for n in range(10):  # wraps around twice; 1-3 items in flight
            token = Token(n)
            refs.append(weakref.ref(token))
            q.put(token)
            del token
            if n % 3 == 2:
                while len(q):
                    q.take()
        while len(q):
            q.take()
        return refs, q

    refs, q = call(scenario, what="putting and taking 10 tokens")
    # Looked at here, once the thread and the wait that watched it are over: a look of the
    # stuck detector keeps the frames it saw (a take() in progress, holding its item) until
    # its next look.
    gc.collect()
    alive = [ref().n for ref in refs if ref() is not None]
    check(not alive, f"tokens {alive} were taken but are still alive while the queue "
                     "exists: a taken slot still references its item", pitfall="slot_not_cleared")
    del q


# -- no ready-made queue ----------------------------------------------------------------------

def _forbidden() -> tuple[tuple[type, ...], tuple[str, ...]]:
    import asyncio
    import multiprocessing.queues
    import queue
    types: list[type] = [queue.Queue, queue.SimpleQueue, asyncio.Queue,
                         multiprocessing.queues.Queue, multiprocessing.queues.SimpleQueue]
    try:
        import _queue
        types.append(_queue.SimpleQueue)
    except ImportError:  # pragma: no cover
        pass
    return tuple(types), ("queue", "_queue", "asyncio.queues", "multiprocessing.queues")


def _inside(value) -> list[tuple[str, object]]:
    """The attributes and container elements of ``value``, one level down."""
    if isinstance(value, (str, bytes, int, float, type, type(sys))):
        return []
    inner = [(f".{k}", v) for k, v in getattr(value, "__dict__", {}).items()]
    if isinstance(value, dict):
        inner += [(f"[{k!r}]", v) for k, v in value.items()]
    elif isinstance(value, (list, tuple, set, frozenset, deque)):
        inner += [(f"[{i}]", v) for i, v in enumerate(value)]
    return inner


@pytest.mark.checkpoint("p03.no_ready_made")
def test_no_ready_made_queue_is_used_underneath(impl):
    banned, modules = _forbidden()
    cls = impl.BoundedBlockingQueue
    bad_bases = [base.__name__ for base in cls.__mro__ if any(base is b for b in banned)]
    check(not bad_bases, f"BoundedBlockingQueue inherits from {bad_bases}",
          pitfall="ready_made_queue")
    for name, value in vars(impl).items():
        if any(value is b for b in banned) or (
                isinstance(value, type(sys)) and value.__name__ in modules):
            fail(f"the module binds {name!r} to {value!r}: build the queue from "
                 "threading primitives, not on a ready-made queue", pitfall="ready_made_queue")

    def scenario():
        q = cls(3)
        q.put("x")
        return q

    q = call(scenario, what="creating a queue and putting one item")
    level = [("q", q)]
    for _ in range(3):  # the queue, its attributes, and two levels below them
        for where, value in level:
            if isinstance(value, banned):
                fail(f"{where} is a {type(value).__module__}.{type(value).__qualname__}: "
                     "build the queue from threading primitives, not on a ready-made queue",
                     pitfall="ready_made_queue")
        level = [(where + key, inner) for where, value in level
                 for key, inner in _inside(value)][:2000]
