"""Alternate correct solution: a mutex for the state, two semaphores to sleep on.

Every decision is made under the mutex, with the deque in view: that is what makes each
call take effect at one instant (an earlier version counted free slots in a semaphore, and
a put that had claimed a slot but not yet appended made ``offer(x, 0)`` see a full queue
while ``poll(0)`` saw an empty one -- no order of the calls gives both).  The semaphores
count wake-up signals, not slots or items: a putter that finds the queue full registers
(``_putters += 1``) and sleeps on ``_space``; a take that frees a slot signals one
registered putter.  A woken thread decides again under the mutex, so a call that came in
meanwhile may take the slot first (no fairness is promised), and it sleeps again.

A waiter that times out or is interrupted leaves its registration behind; the signal later
spent on it stays in the semaphore, and the next sleeper takes it, looks again, and goes
back to sleep: a spare signal costs one look, never a lost wake-up.
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


def _sleep(signals: threading.Semaphore, deadline: float | None) -> None:
    """Wait for one signal, or until ``deadline``.  Leaving with an exception passes on a
    signal that was meant for this thread (it may have been woken just before)."""
    try:
        if deadline is None:
            signals.acquire()
        else:
            signals.acquire(timeout=max(deadline - time.monotonic(), 0.0))
    except BaseException:
        if signals.acquire(blocking=False):
            signals.release()
        raise


class BoundedBlockingQueue(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError("capacity must be an int")
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self._capacity = capacity
        self._mutex = threading.Lock()  # guards everything below
        self._items: deque[T] = deque()
        self._shut = False
        # Registered sleepers; at least as many signals are due as sleepers are registered.
        self._putters = 0  # signalled (on _space) by a take, or by shutdown
        self._takers = 0  # signalled (on _ready) by a put, or by shutdown
        self._space = threading.Semaphore(0)
        self._ready = threading.Semaphore(0)

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        with self._mutex:
            return len(self._items)

    def _wake_taker(self) -> None:  # the mutex is held
        if self._takers:
            self._takers -= 1
            self._ready.release()

    def _wake_putter(self) -> None:  # the mutex is held
        if self._putters:
            self._putters -= 1
            self._space.release()

    def _offer(self, item: T, deadline: float | None, blocking: bool) -> bool:
        if item is None:
            raise TypeError("None is not a valid item")
        while True:
            with self._mutex:
                if self._shut:
                    raise ShutDown
                if len(self._items) < self._capacity:
                    self._items.append(item)
                    self._wake_taker()
                    return True
                if not blocking or (deadline is not None and time.monotonic() >= deadline):
                    return False
                self._putters += 1
            _sleep(self._space, deadline)

    def _poll(self, deadline: float | None, blocking: bool) -> T | None:
        while True:
            with self._mutex:
                if self._items:
                    item = self._items.popleft()
                    self._wake_putter()
                    return item
                if self._shut:
                    raise ShutDown
                if not blocking or (deadline is not None and time.monotonic() >= deadline):
                    return None
                self._takers += 1
            _sleep(self._ready, deadline)

    def put(self, item: T) -> None:
        self._offer(item, None, True)

    def take(self) -> T:
        return self._poll(None, True)  # type: ignore[return-value]

    @staticmethod
    def _deadline(timeout: float | None) -> tuple[float | None, bool]:
        if timeout is None:
            return None, True
        if timeout <= 0:
            return None, False
        if timeout > threading.TIMEOUT_MAX:
            raise OverflowError("timeout is too large")
        return time.monotonic() + timeout, True

    def offer(self, item: T, timeout: float | None = 0.0) -> bool:
        return self._offer(item, *self._deadline(timeout))

    def poll(self, timeout: float | None = 0.0) -> T | None:
        return self._poll(*self._deadline(timeout))

    def shutdown(self, immediate: bool = False) -> None:
        with self._mutex:
            self._shut = True
            if immediate:
                self._items.clear()
            # Every sleeper wakes and sees the new state.
            while self._putters:
                self._wake_putter()
            while self._takers:
                self._wake_taker()
