"""Alternate correct solution: two counting semaphores and a mutex.

`_free` counts empty slots, `_ready` counts queued items; the mutex protects the deque,
the flags and every release of a permit that goes with a change of the deque. A putter
first claims a slot (may block), then appends under the mutex, then publishes one item; a
taker mirrors it. Shutdown adds one extra permit to each semaphore, a baton: whoever
acquires it and finds the queue shut down gives it back before raising ShutDown, which
wakes the next blocked thread, and so on.

A permit is a promise: a call that holds one has taken effect (the slot or the item is
its). So shutdown withdraws only the permits nobody holds; a putter that holds a slot's
permit still succeeds (an immediate shutdown then discards its item), and an immediate
shutdown keeps the items whose permits takers hold. Otherwise a put that was about to fail
could make an ``offer(x, 0)`` see a full queue that never held an item.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["BoundedBlockingQueue", "ShutDown"]

class ShutDown(Exception):
    pass


def _withdraw(sem: threading.Semaphore) -> int:
    """Take every permit of ``sem`` that nobody holds; how many there were."""
    n = 0
    while sem.acquire(blocking=False):
        n += 1
    return n


class BoundedBlockingQueue(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError("capacity must be an int")
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self._capacity = capacity
        # Invariant (before shutdown, whenever the mutex is free):
        # _free + puts holding a permit == capacity - len(_items), _ready + takes holding
        # a permit == len(_items).
        self._free = threading.Semaphore(capacity)  # permits = empty slots
        self._ready = threading.Semaphore(0)  # permits = queued items
        self._mutex = threading.Lock()  # guards _items, _shut, _discard and _room
        self._items: deque[T] = deque()
        self._shut = False
        self._discard = False  # an immediate shutdown has happened
        self._room = 0  # after shutdown: slot permits still held by putters

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

    def _refuse_if_shut(self, *, takes: bool = False) -> None:
        """A call made after shutdown fails (a take only after an immediate one)."""
        with self._mutex:
            if self._discard if takes else self._shut:
                raise ShutDown

    def _push(self, item: T) -> None:
        with self._mutex:
            if self._shut:
                if not self._room:  # the baton: every slot of before shutdown is spoken for
                    self._free.release()  # pass it on to the next blocked putter
                    raise ShutDown
                self._room -= 1  # a slot claimed before shutdown: this put came first
                if self._discard:
                    return  # ... and an immediate shutdown discarded its item
            self._items.append(item)
            self._ready.release()

    def _pop(self) -> T:
        with self._mutex:
            if not self._items:  # only possible after shutdown: we hold the baton
                self._ready.release()  # pass it on to the next blocked taker
                raise ShutDown
            item = self._items.popleft()
            if not self._shut:  # after shutdown a slot is never offered again
                self._free.release()
        return item

    def put(self, item: T) -> None:
        if item is None:
            raise TypeError("None is not a valid item")
        self._refuse_if_shut()
        self._acquire(self._free, None)
        self._push(item)

    def take(self) -> T:
        self._refuse_if_shut(takes=True)
        self._acquire(self._ready, None)
        return self._pop()

    def offer(self, item: T, timeout: float | None = 0.0) -> bool:
        if item is None:
            raise TypeError("None is not a valid item")
        self._refuse_if_shut()
        if not self._acquire(self._free, timeout):
            with self._mutex:  # decide with the deque in view: is a slot free after all?
                if self._shut:
                    raise ShutDown
                if not self._free.acquire(blocking=False):
                    return False  # every slot is queued or held by a put that will succeed
        self._push(item)
        return True

    def poll(self, timeout: float | None = 0.0) -> T | None:
        self._refuse_if_shut(takes=True)
        if not self._acquire(self._ready, timeout):
            with self._mutex:
                if not self._ready.acquire(blocking=False):
                    if self._shut:
                        raise ShutDown  # what is left is held by takes that will succeed
                    return None
        return self._pop()

    def shutdown(self, immediate: bool = False) -> None:
        with self._mutex:
            first = not self._shut
            if first:
                self._shut = True
                self._room = self._capacity - len(self._items) - _withdraw(self._free)
            if immediate and not self._discard:
                self._discard = True
                # Items whose permits takers hold are theirs; the rest go.  After an earlier
                # shutdown one more permit is about, the baton, held or not.
                unheld = _withdraw(self._ready)
                held = len(self._items) + (0 if first else 1) - unheld
                while len(self._items) > max(held, 0):
                    self._items.pop()
                if not first and unheld:
                    self._ready.release()  # the baton, taken back: blocked takers need it
        if first:
            self._free.release()  # the batons
            self._ready.release()
