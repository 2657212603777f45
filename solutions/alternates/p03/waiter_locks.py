"""Alternate correct solution: hand-made wait queues, one Lock per waiting thread.

No Condition at all. A thread that must wait creates a Lock, acquires it once, appends it
to the FIFO of its role and, after letting go of the mutex, acquires it a second time:
it sleeps there until someone releases that lock (a wakeup). A wakeup is only a hint: the
woken thread re-checks under the mutex and may wait again. A thread that leaves its wait
with an exception or a timeout takes its lock out of the FIFO; if it was already taken out,
a wakeup was spent on it, and it passes that wakeup on to the next waiter.
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


class _WaitQueue:
    """Threads waiting for one kind of change, oldest first. Used under the owner's mutex."""

    def __init__(self, mutex: threading.Lock) -> None:
        self._mutex = mutex
        self._sleepers: deque[threading.Lock] = deque()

    def _forget(self, sleeper: threading.Lock) -> bool:
        """Take ``sleeper`` out of the FIFO; False if a wakeup already took it out."""
        try:
            self._sleepers.remove(sleeper)
            return True
        except ValueError:
            return False

    def wait(self, timeout: float | None) -> None:
        """Sleep until woken or ``timeout`` seconds pass. Mutex held on entry and on exit."""
        sleeper = threading.Lock()
        sleeper.acquire()
        self._sleepers.append(sleeper)
        self._mutex.release()
        try:
            if timeout is None:
                sleeper.acquire()
            else:
                sleeper.acquire(timeout=max(timeout, 0.0))
        except BaseException:
            self._mutex.acquire()
            if not self._forget(sleeper):
                self.wake_one()  # our wakeup would be lost with us: hand it on
            raise
        self._mutex.acquire()
        self._forget(sleeper)  # timed out: no longer waiting

    def wake_one(self) -> None:
        if self._sleepers:
            self._sleepers.popleft().release()

    def wake_all(self) -> None:
        while self._sleepers:
            self.wake_one()


class BoundedBlockingQueue(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError("capacity must be an int")
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self._capacity = capacity
        self._ring: list[T | None] = [None] * capacity  # guarded by _mutex
        self._first = 0  # index of the oldest item
        self._count = 0  # items queued; the next free slot is (_first + _count) % capacity
        self._shut = False
        self._mutex = threading.Lock()
        self._want_item = _WaitQueue(self._mutex)  # takers
        self._want_slot = _WaitQueue(self._mutex)  # putters

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        with self._mutex:
            return self._count

    @staticmethod
    def _left(deadline: float | None) -> float | None:
        return None if deadline is None else deadline - time.monotonic()

    def _room(self, timeout: float | None) -> bool:
        """Wait (mutex held) until a slot is free or the queue is shut; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._count == self._capacity and not self._shut:
            left = self._left(deadline)
            if left is not None and left <= 0:
                return False
            self._want_slot.wait(left)
        if self._shut:
            raise ShutDown
        return True

    def _item(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._count == 0 and not self._shut:
            left = self._left(deadline)
            if left is not None and left <= 0:
                return False
            self._want_item.wait(left)
        if self._count == 0:
            raise ShutDown
        return True

    def _push(self, item: T) -> None:
        self._ring[(self._first + self._count) % self._capacity] = item
        self._count += 1
        self._want_item.wake_one()

    def _pop(self) -> T:
        item = self._ring[self._first]
        self._ring[self._first] = None
        self._first = (self._first + 1) % self._capacity
        self._count -= 1
        self._want_slot.wake_one()
        return item  # type: ignore[return-value]

    def put(self, item: T) -> None:
        if item is None:
            raise TypeError("None cannot be queued")
        with self._mutex:
            self._room(None)
            self._push(item)

    def take(self) -> T:
        with self._mutex:
            self._item(None)
            return self._pop()

    def offer(self, item: T, timeout: float | None = 0.0) -> bool:
        if item is None:
            raise TypeError("None cannot be queued")
        with self._mutex:
            if not self._room(timeout):
                return False
            self._push(item)
            return True

    def poll(self, timeout: float | None = 0.0) -> T | None:
        with self._mutex:
            if not self._item(timeout):
                return None
            return self._pop()

    def shutdown(self, immediate: bool = False) -> None:
        with self._mutex:
            self._shut = True
            if immediate:
                self._ring = [None] * self._capacity
                self._first = self._count = 0
            self._want_item.wake_all()
            self._want_slot.wake_all()
