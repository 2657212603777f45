"""BREAKS: "`put(None)` is rejected (`TypeError` or `ValueError`) before any locking".
HOW: the learner moved the None check next to the other checks, after the wait loop. On a full
queue (capacity 1 holding "a"), `put(None)` does not raise: it parks until some take frees a slot,
and only then raises TypeError; on a shut-down queue it raises ShutDown instead of TypeError.
`offer(None, timeout=0.1)` on a full queue returns False instead of raising.

P03 learner file: a bounded blocking queue on a ring buffer, one lock, two conditions.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

T = TypeVar("T")

__all__ = ["BoundedBlockingQueue", "ShutDown"]


class ShutDown(Exception):
    """Raised by put/offer after shutdown(), and by take/poll once a shut-down queue is empty."""


class BoundedBlockingQueue(Generic[T]):
    """A FIFO queue of at most ``capacity`` items; put waits while full, take while empty."""

    def __init__(self, capacity: int) -> None:
        # bool is a subclass of int, but BoundedBlockingQueue(True) is a mistake, not a size.
        if isinstance(capacity, bool) or not isinstance(capacity, int):
            raise TypeError(f"capacity must be an int, not {type(capacity).__name__}")
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self._capacity = capacity

        # ---- shared state: every field below is read and written only under self._lock ----
        # Invariant 1: 0 <= _size <= _capacity.
        # Invariant 2: the queued items, oldest first, are _slots[(_head + i) % _capacity]
        #              for i in range(_size); every other slot holds None.
        # Invariant 3: _tail == (_head + _size) % _capacity. Empty and full both have
        #              _head == _tail, so only _size tells them apart.
        # Invariant 4: no thread reads or writes these fields without holding _lock.
        self._slots: list[T | None] = [None] * capacity
        self._head = 0  # index of the oldest item (the next take reads here)
        self._tail = 0  # index of the next free slot (the next put writes here)
        self._size = 0  # number of queued items
        self._closed = False  # set once by shutdown(), never cleared

        self._lock = threading.Lock()
        # "an item is available (or the queue is shut down)". Takers wait here.
        # Notified by _insert (one new item, so one taker) and by shutdown (everyone).
        self._not_empty = threading.Condition(self._lock)
        # "a slot is free (or the queue is shut down)". Putters wait here.
        # Notified by _remove (one freed slot, so one putter) and by shutdown (everyone).
        self._not_full = threading.Condition(self._lock)

    @property
    def capacity(self) -> int:
        """The fixed maximum number of queued items."""
        return self._capacity

    def __len__(self) -> int:
        with self._lock:
            return self._size

    # ---- the two state transitions; callers hold self._lock and checked the predicate ----

    def _insert(self, item: T) -> None:
        self._slots[self._tail] = item
        self._tail = (self._tail + 1) % self._capacity
        self._size += 1  # linearization point of a put: others now see the item
        self._not_empty.notify()  # one new item can satisfy exactly one taker

    def _remove(self) -> T:
        item = self._slots[self._head]
        self._slots[self._head] = None  # keep no reference to an item we hand out
        self._head = (self._head + 1) % self._capacity
        self._size -= 1  # linearization point of a take
        self._not_full.notify()  # one freed slot can satisfy exactly one putter
        return item  # type: ignore[return-value]

    def _wait(self, cond: threading.Condition, timeout: float | None = None) -> bool:
        """``cond.wait(timeout)`` that never loses a wakeup when an exception leaves it."""
        try:
            return cond.wait(timeout)
        except BaseException:
            # An interrupt that lands right after a notify() ends the wait of the very
            # thread that notify() chose: the wakeup would be lost, and a waiter the queue
            # could serve would sleep on. Pass it on (the lock is held again here); a
            # needless wakeup costs one re-check of the `while`.
            cond.notify()
            raise

    # ---- core ----

    def put(self, item: T) -> None:
        """Append ``item``, waiting while the queue is full."""
        with self._lock:
            # `while`, not `if`: a wakeup only says the state *may* have changed. Another
            # putter can take the freed slot before we get the lock back, and wakeups can
            # be spurious. If an exception (an interrupt) leaves the wait, `with` releases
            # the lock and nothing has been changed.
            while self._size == self._capacity and not self._closed:
                self._wait(self._not_full)  # releases _lock while asleep, retakes it
            if self._closed:
                raise ShutDown("put() on a shut-down queue")
            if item is None:  # validated together with the other checks, just before storing
                raise TypeError("None cannot be queued (poll() returns None to mean 'no item')")
            self._insert(item)

    def take(self) -> T:
        """Remove and return the oldest item, waiting while the queue is empty."""
        with self._lock:
            while self._size == 0 and not self._closed:
                self._wait(self._not_empty)
            if self._size == 0:  # shut down and drained
                raise ShutDown("take() on a shut-down, empty queue")
            return self._remove()

    # ---- follow-ups: deadlines and shutdown ----

    def _wait_until(self, cond: threading.Condition, ready: Callable[[], bool],
                    timeout: float | None) -> bool:
        """Wait on ``cond`` (lock held) until ready() or shut down; False if time ran out."""
        # One deadline, fixed on entry. Each wakeup waits only for what is left of it:
        # restarting the full timeout after every wakeup could wait forever.
        # (threading.Condition.wait_for does the same; it is spelled out here.)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ready() and not self._closed:
            if deadline is None:
                self._wait(cond)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._wait(cond, remaining)
        return True

    def offer(self, item: T, timeout: float | None = 0.0) -> bool:
        """Append ``item`` if a slot frees up within ``timeout`` seconds; return whether it did.

        ``timeout=0`` never blocks, ``None`` waits as long as it takes.
        """
        with self._lock:
            if not self._wait_until(self._not_full,
                                    lambda: self._size < self._capacity, timeout):
                return False
            if self._closed:
                raise ShutDown("offer() on a shut-down queue")
            if item is None:
                raise TypeError("None cannot be queued (poll() returns None to mean 'no item')")
            self._insert(item)
            return True

    def poll(self, timeout: float | None = 0.0) -> T | None:
        """Remove and return the oldest item, or None if none arrives within ``timeout``."""
        with self._lock:
            if not self._wait_until(self._not_empty, lambda: self._size > 0, timeout):
                return None
            if self._size == 0:  # shut down and drained
                raise ShutDown("poll() on a shut-down, empty queue")
            return self._remove()

    def shutdown(self, immediate: bool = False) -> None:
        """Refuse new items from now on; with ``immediate``, drop the queued ones too.

        Every waiting thread wakes up and re-checks its predicate, which now sees the
        shutdown: putters raise ShutDown, takers drain what is left and then raise it.
        """
        with self._lock:
            self._closed = True
            if immediate:
                self._slots = [None] * self._capacity
                self._head = self._tail = self._size = 0
            # A state change that concerns *every* waiter: notify() would wake only one.
            self._not_empty.notify_all()
            self._not_full.notify_all()
