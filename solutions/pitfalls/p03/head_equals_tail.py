"""Pitfall: head and tail without a size (full/empty confusion).

Only the two indices are kept and "empty" is read as head == tail. But a full ring also
has head == tail: after `capacity` puts the queue looks empty, the length reads 0, take
waits on a full queue and put overwrites the oldest items instead of waiting.
"""

from solutions.p03_bounded_queue import *  # noqa: F401,F403
from solutions.p03_bounded_queue import BoundedBlockingQueue as _Reference
from solutions.p03_bounded_queue import T
from solutions.p03_bounded_queue import ShutDown


class BoundedBlockingQueue(_Reference[T]):
    def _count(self):
        # WRONG: (tail - head) % capacity is 0 for an empty ring *and* for a full one.
        return (self._tail - self._head) % self._capacity

    def __len__(self):
        with self._lock:
            return self._count()

    def put(self, item):
        if item is None:
            raise TypeError("None cannot be queued")
        with self._lock:
            while self._count() == self._capacity and not self._closed:  # never true
                self._not_full.wait()
            if self._closed:
                raise ShutDown("put() on a shut-down queue")
            self._slots[self._tail] = item
            self._tail = (self._tail + 1) % self._capacity
            self._not_empty.notify()

    def take(self):
        with self._lock:
            while self._head == self._tail and not self._closed:  # "empty" (or full!)
                self._not_empty.wait()
            if self._head == self._tail:
                raise ShutDown("take() on a shut-down, empty queue")
            item = self._slots[self._head]
            self._slots[self._head] = None
            self._head = (self._head + 1) % self._capacity
            self._not_full.notify()
            return item
