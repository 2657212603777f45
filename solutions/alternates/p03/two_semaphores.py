"""Alternate correct solution: two counting semaphores and a mutex.

`_free` counts empty slots, `_ready` counts queued items; the mutex only protects the
deque itself. A putter first claims a slot (may block), then appends under the mutex,
then publishes one item; a taker mirrors it. Shutdown adds one extra permit to each
semaphore, a baton: whoever acquires it and finds the queue shut down gives it back
before raising ShutDown, which wakes the next blocked thread, and so on.
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
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError("capacity must be an int")
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self._capacity = capacity
        # Invariant (before shutdown): _free + _ready + operations in flight == capacity.
        self._free = threading.Semaphore(capacity)  # permits = empty slots
        self._ready = threading.Semaphore(0)  # permits = queued items
        self._mutex = threading.Lock()  # guards _items and _shut
        self._items: deque[T] = deque()
        self._shut = False

    @property
    def capacity(self) -> int:
        return self._capacity

    def __len__(self) -> int:
        with self._mutex:
            return len(self._items)

    def _acquire(self, sem: threading.Semaphore, timeout: float | None) -> bool:
        try:
            if timeout is None:
                return sem.acquire()
            if timeout <= 0:
                return sem.acquire(blocking=False)
            return sem.acquire(timeout=timeout)  # Semaphore keeps a single deadline itself
        except BaseException:
            # An interrupt right after a release() woke this thread leaves the permit
            # unclaimed and the other waiters asleep: take it and give it back, which
            # wakes one of them (a no-op when there is no permit).
            if sem.acquire(blocking=False):
                sem.release()
            raise

    def _push(self, item: T) -> None:
        with self._mutex:
            if self._shut:
                self._free.release()  # pass the baton on to the next blocked putter
                raise ShutDown
            self._items.append(item)
        self._ready.release()

    def _pop(self) -> T:
        with self._mutex:
            if not self._items:  # only possible after shutdown: we hold the baton
                self._ready.release()  # pass it on to the next blocked taker
                raise ShutDown
            item = self._items.popleft()
        self._free.release()
        return item

    def put(self, item: T) -> None:
        if item is None:
            raise TypeError("None is not a valid item")
        self._acquire(self._free, None)
        self._push(item)

    def take(self) -> T:
        self._acquire(self._ready, None)
        return self._pop()

    def offer(self, item: T, timeout: float | None = 0.0) -> bool:
        if item is None:
            raise TypeError("None is not a valid item")
        if not self._acquire(self._free, timeout):
            with self._mutex:
                if self._shut:
                    raise ShutDown
            return False
        self._push(item)
        return True

    def poll(self, timeout: float | None = 0.0) -> T | None:
        if not self._acquire(self._ready, timeout):
            with self._mutex:
                if self._shut and not self._items:
                    raise ShutDown
            return None
        return self._pop()

    def shutdown(self, immediate: bool = False) -> None:
        with self._mutex:
            first = not self._shut
            self._shut = True
            if immediate:
                self._items.clear()
        if first:
            self._free.release()  # the batons
            self._ready.release()
