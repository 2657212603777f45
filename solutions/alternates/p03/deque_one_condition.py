"""Alternate correct solution: a deque and a single Condition woken with notify_all().

Putters and takers share one wait-set. That is only correct because every state change
wakes *all* waiters (each re-checks its own predicate in a loop); it costs extra
wakeups, but no thread of the right role can be left asleep.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["BoundedBlockingQueue", "ShutDown"]


class ShutDown(Exception):
    pass


class BoundedBlockingQueue(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if type(capacity) is not int:
            raise TypeError("capacity must be an int")
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._cap = capacity
        self._items: deque[T] = deque()  # guarded by _changed's lock
        self._shut = False  # guarded by _changed's lock
        # Any change of _items or _shut; everybody waits here, every change notifies all.
        self._changed = threading.Condition()

    @property
    def capacity(self) -> int:
        return self._cap

    def __len__(self) -> int:
        with self._changed:
            return len(self._items)

    def _can_put(self) -> bool:
        return self._shut or len(self._items) < self._cap

    def _can_take(self) -> bool:
        return self._shut or bool(self._items)

    def _push(self, item: T) -> None:
        if self._shut:
            raise ShutDown
        self._items.append(item)
        self._changed.notify_all()

    def _pop(self) -> T:
        if not self._items:
            raise ShutDown
        item = self._items.popleft()
        self._changed.notify_all()
        return item

    def put(self, item: T) -> None:
        if item is None:
            raise ValueError("None is not a valid item")
        with self._changed:
            self._changed.wait_for(self._can_put)
            self._push(item)

    def take(self) -> T:
        with self._changed:
            self._changed.wait_for(self._can_take)
            return self._pop()

    def offer(self, item: T, timeout: float | None = 0.0) -> bool:
        if item is None:
            raise ValueError("None is not a valid item")
        with self._changed:
            if not self._changed.wait_for(self._can_put, timeout):
                return False
            self._push(item)
            return True

    def poll(self, timeout: float | None = 0.0) -> T | None:
        with self._changed:
            if not self._changed.wait_for(self._can_take, timeout):
                return None
            return self._pop()

    def shutdown(self, immediate: bool = False) -> None:
        with self._changed:
            self._shut = True
            if immediate:
                self._items.clear()
            self._changed.notify_all()
