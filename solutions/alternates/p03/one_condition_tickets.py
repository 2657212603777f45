"""Alternate correct solution: one Condition for everybody, notify_all, and two tickets.

The ring is described by two counters that only grow: ``_puts`` (items ever put) and
``_takes`` (items ever taken). The item of ticket n lives in slot n % capacity; the queue
holds ``_puts - _takes`` items. Every waiter, of either role, waits on the same Condition
with ``wait_for``; every change wakes them all, and each re-checks its own predicate.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["BoundedBlockingQueue", "ShutDown"]


class ShutDown(Exception):
    pass


class BoundedBlockingQueue(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError(f"capacity must be an int, not {type(capacity).__name__}")
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._n = capacity
        self._slots: list[T | None] = [None] * capacity
        self._puts = 0
        self._takes = 0
        self._stopped = False
        self._changed = threading.RLock()
        self._cv = threading.Condition(self._changed)  # "something changed"; everybody waits

    @property
    def capacity(self) -> int:
        return self._n

    def __len__(self) -> int:
        with self._cv:
            return self._puts - self._takes

    def _may_put(self) -> bool:
        return self._stopped or self._puts - self._takes < self._n

    def _may_take(self) -> bool:
        return self._stopped or self._puts > self._takes

    def _store(self, item: T) -> None:
        if self._stopped:
            raise ShutDown
        self._slots[self._puts % self._n] = item
        self._puts += 1
        self._cv.notify_all()

    def _fetch(self) -> T:
        if self._puts == self._takes:
            raise ShutDown
        slot = self._takes % self._n
        item, self._slots[slot] = self._slots[slot], None
        self._takes += 1
        self._cv.notify_all()
        return item  # type: ignore[return-value]

    def put(self, item: T) -> None:
        if item is None:
            raise ValueError("None cannot be queued")
        with self._cv:
            self._cv.wait_for(self._may_put)
            self._store(item)

    def take(self) -> T:
        with self._cv:
            self._cv.wait_for(self._may_take)
            return self._fetch()

    def offer(self, item: T, timeout: float | None = 0.0) -> bool:
        if item is None:
            raise ValueError("None cannot be queued")
        with self._cv:
            if not self._cv.wait_for(self._may_put, timeout):
                return False
            self._store(item)
            return True

    def poll(self, timeout: float | None = 0.0) -> T | None:
        with self._cv:
            if not self._cv.wait_for(self._may_take, timeout):
                return None
            return self._fetch()

    def shutdown(self, immediate: bool = False) -> None:
        with self._cv:
            self._stopped = True
            if immediate:
                self._slots = [None] * self._n
                self._takes = self._puts
            self._cv.notify_all()
