"""CORRECT: no ring and no modulo. Items live in a dict keyed by an ever-growing ticket number
(`_next_put`, `_next_take`; size = `_next_put - _next_take`), taken items are popped out of the
dict (so no reference stays behind), and all waiting goes through ONE Condition built on an
RLock, using `Condition.wait_for`, with `notify_all()` on every transition. The spec names "a
single Condition with notify_all" as acceptable; wait_for supplies the `while` re-check and the
single deadline on the monotonic clock (it recomputes the remaining time after each wake-up;
timeout 0 or negative returns at once, inf raises OverflowError at once, as Lock.acquire does).
Because every transition wakes every waiter, a waiter that leaves with an interrupt cannot
swallow a wake-up that somebody else needed.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["BoundedBlockingQueue", "ShutDown"]


class ShutDown(Exception):
    """Raised by put/offer after shutdown(), and by take/poll once a shut-down queue is empty."""


class BoundedBlockingQueue(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if type(capacity) is bool or not isinstance(capacity, int):
            raise TypeError("capacity must be an int")
        if capacity < 1:
            raise ValueError("capacity must be > 0")
        self._capacity = capacity
        # Guarded by _cond's lock. Invariant: the queued items, oldest first, are
        # _items[_next_take], ..., _items[_next_put - 1]; _items has no other key.
        self._items: dict[int, T] = {}
        self._next_put = 0
        self._next_take = 0
        self._closed = False
        self._cond = threading.Condition(threading.RLock())

    @property
    def capacity(self) -> int:
        return self._capacity

    def _size(self) -> int:
        return self._next_put - self._next_take

    def __len__(self) -> int:
        with self._cond:
            return self._size()

    def _can_put(self) -> bool:
        return self._closed or self._size() < self._capacity

    def _can_take(self) -> bool:
        return self._closed or self._size() > 0

    def _store(self, item: T) -> None:
        if self._closed:
            raise ShutDown("the queue is shut down")
        self._items[self._next_put] = item
        self._next_put += 1
        self._cond.notify_all()

    def _pop(self) -> T:
        if self._size() == 0:
            raise ShutDown("the queue is shut down and empty")
        item = self._items.pop(self._next_take)
        self._next_take += 1
        self._cond.notify_all()
        return item

    def put(self, item: T) -> None:
        if item is None:
            raise ValueError("None cannot be queued")
        with self._cond:
            self._cond.wait_for(self._can_put)
            self._store(item)

    def take(self) -> T:
        with self._cond:
            self._cond.wait_for(self._can_take)
            return self._pop()

    def offer(self, item: T, timeout: float | None = 0.0) -> bool:
        if item is None:
            raise ValueError("None cannot be queued")
        with self._cond:
            if not self._cond.wait_for(self._can_put, timeout):
                return False
            self._store(item)
            return True

    def poll(self, timeout: float | None = 0.0) -> T | None:
        with self._cond:
            if not self._cond.wait_for(self._can_take, timeout):
                return None
            return self._pop()

    def shutdown(self, immediate: bool = False) -> None:
        with self._cond:
            self._closed = True
            if immediate:
                self._items.clear()
                self._next_take = self._next_put
            self._cond.notify_all()
