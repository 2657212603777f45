"""Alternate correct solution: a deque, a Lock, and one threading.Event per waiting thread.

A waiting thread registers a fresh Event in the list of its role and waits on it *without*
holding the lock. Whoever makes progress possible sets the oldest registered Event of the
other role. The woken thread takes the lock again and re-checks: a barging thread may have
been faster. Leaving early (timeout, exception) unregisters the Event; if it had already
been set, its wakeup is handed to the next waiter of the same role.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["BoundedBlockingQueue", "ShutDown"]


class ShutDown(Exception):
    pass


class BoundedBlockingQueue(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError("capacity must be an int")
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self._capacity = capacity
        self._lock = threading.Lock()  # guards everything below
        self._items: deque[T] = deque()
        self._closed = False
        self._takers: deque[threading.Event] = deque()
        self._putters: deque[threading.Event] = deque()

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    @staticmethod
    def _signal(role: deque[threading.Event]) -> None:
        if role:
            role.popleft().set()

    def _await(self, role: deque[threading.Event], deadline: float | None) -> bool:
        """Called and returns with the lock held; False once the deadline has passed."""
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        event = threading.Event()
        role.append(event)
        self._lock.release()
        try:
            event.wait(left)
        except BaseException:
            self._lock.acquire()  # the caller's `with` releases it
            if event in role:
                role.remove(event)
            else:
                self._signal(role)  # it was our wakeup: pass it on
            raise
        self._lock.acquire()
        if event in role:
            role.remove(event)  # timed out
        return True

    @staticmethod
    def _deadline(timeout: float | None) -> float | None:
        return None if timeout is None else time.monotonic() + timeout

    def _enqueue(self, item: T, timeout: float | None) -> bool:
        if item is None:
            raise TypeError("None cannot be queued")
        deadline = self._deadline(timeout)
        with self._lock:
            while len(self._items) >= self._capacity and not self._closed:
                if not self._await(self._putters, deadline):
                    return False
            if self._closed:
                raise ShutDown
            self._items.append(item)
            self._signal(self._takers)
            return True

    def _dequeue(self, timeout: float | None) -> tuple[bool, T | None]:
        deadline = self._deadline(timeout)
        with self._lock:
            while not self._items and not self._closed:
                if not self._await(self._takers, deadline):
                    return False, None
            if not self._items:
                raise ShutDown
            item = self._items.popleft()
            self._signal(self._putters)
            return True, item

    def put(self, item: T) -> None:
        self._enqueue(item, None)

    def take(self) -> T:
        return self._dequeue(None)[1]  # type: ignore[return-value]

    def offer(self, item: T, timeout: float | None = 0.0) -> bool:
        return self._enqueue(item, timeout)

    def poll(self, timeout: float | None = 0.0) -> T | None:
        return self._dequeue(timeout)[1]

    def shutdown(self, immediate: bool = False) -> None:
        with self._lock:
            self._closed = True
            if immediate:
                self._items.clear()
            for role in (self._takers, self._putters):
                while role:
                    self._signal(role)
