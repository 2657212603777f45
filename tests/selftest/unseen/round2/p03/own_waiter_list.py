"""CORRECT: no threading.Condition at all. One mutex guards the ring and two explicit FIFO lists
of waiter records (one per role); each waiting thread parks on a private, pre-acquired Lock, and a
transition hands its wake-up to the oldest waiter of the role it can help by setting the record's
`signalled` flag and releasing that Lock. This is Condition's own mechanism written out by hand,
so the properties the spec asks for are visible in the code:

* a waiter is registered (appended to its list) *before* the mutex is released, so no wake-up
  can fall between the check and the sleep;
* a waiter re-checks its predicate in a `while` after every wake-up;
* a waiter that leaves with an exception (an interrupt) after it was signalled passes the
  signal on to the next waiter of its role; one that was not signalled unregisters itself;
* timeouts: one deadline on entry (monotonic), remaining time recomputed after each wake-up;
* shutdown signals every waiter of both roles.

It has no Condition, so it cannot be woken spuriously from outside; its `while` loops would
tolerate it anyway.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["BoundedBlockingQueue", "ShutDown"]


class ShutDown(Exception):
    """Raised by put/offer after shutdown(), and by take/poll once a shut-down queue is empty."""


class _Waiter:
    """One parked thread: a private lock, held until someone signals it."""

    __slots__ = ("lock", "signalled")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.signalled = False  # written under the queue's mutex only


class BoundedBlockingQueue(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError(f"capacity must be an int, not {type(capacity).__name__}")
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self._capacity = capacity
        # Guarded by _mutex: _ring, _head, _count, _closed, _putters, _takers.
        # Items, oldest first: _ring[(_head + i) % capacity] for i < _count; other slots None.
        self._ring: list = [None] * capacity
        self._head = 0
        self._count = 0
        self._closed = False
        self._putters: deque[_Waiter] = deque()  # parked in put/offer, oldest first
        self._takers: deque[_Waiter] = deque()   # parked in take/poll, oldest first
        self._mutex = threading.Lock()

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        with self._mutex:
            return self._count

    # ---- parking (mutex held on entry and on exit, released while parked) ----

    def _signal(self, waiters: deque) -> None:
        if waiters:
            w = waiters.popleft()
            w.signalled = True
            w.lock.release()

    def _park(self, waiters: deque, timeout: float | None) -> None:
        w = _Waiter()
        waiters.append(w)  # registered before the mutex is let go
        self._mutex.release()
        try:
            try:
                if timeout is None:
                    w.lock.acquire()
                else:
                    w.lock.acquire(True, timeout)
            finally:
                self._mutex.acquire()
                if not w.signalled:
                    waiters.remove(w)
        except BaseException:
            if w.signalled:  # the wake-up was ours and we will not use it: pass it on
                self._signal(waiters)
            raise

    def _await(self, waiters: deque, ready, timeout: float | None) -> bool:
        """Park until ready() or closed; False when the deadline passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ready() and not self._closed:
            if deadline is None:
                self._park(waiters, None)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._park(waiters, remaining)
        return True

    # ---- transitions ----

    def _insert(self, item) -> None:
        self._ring[(self._head + self._count) % self._capacity] = item
        self._count += 1
        self._signal(self._takers)

    def _remove(self):
        item = self._ring[self._head]
        self._ring[self._head] = None
        self._head = (self._head + 1) % self._capacity
        self._count -= 1
        self._signal(self._putters)
        return item

    def _room(self) -> bool:
        return self._count < self._capacity

    def _some(self) -> bool:
        return self._count > 0

    # ---- API ----

    def put(self, item: T) -> None:
        if item is None:
            raise TypeError("None cannot be queued")
        with self._mutex:
            self._await(self._putters, self._room, None)
            if self._closed:
                raise ShutDown("put() on a shut-down queue")
            self._insert(item)

    def take(self) -> T:
        with self._mutex:
            self._await(self._takers, self._some, None)
            if self._count == 0:
                raise ShutDown("take() on a shut-down, empty queue")
            return self._remove()

    def offer(self, item: T, timeout: float | None = 0.0) -> bool:
        if item is None:
            raise TypeError("None cannot be queued")
        with self._mutex:
            if not self._await(self._putters, self._room, timeout):
                return False
            if self._closed:
                raise ShutDown("offer() on a shut-down queue")
            self._insert(item)
            return True

    def poll(self, timeout: float | None = 0.0) -> T | None:
        with self._mutex:
            if not self._await(self._takers, self._some, timeout):
                return None
            if self._count == 0:
                raise ShutDown("poll() on a shut-down, empty queue")
            return self._remove()

    def shutdown(self, immediate: bool = False) -> None:
        with self._mutex:
            self._closed = True
            if immediate:
                self._ring = [None] * self._capacity
                self._head = self._count = 0
            while self._takers:
                self._signal(self._takers)
            while self._putters:
                self._signal(self._putters)
