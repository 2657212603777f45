"""Pitfall: `if` instead of `while` around the condition wait.

A wakeup is only a hint that the state may have changed. Here the woken thread trusts
it and carries on without re-checking: after a spurious wakeup, or after another thread
took the freed item/slot first, take() reads an empty slot and put() overwrites a full
ring.
"""

from solutions.p03_bounded_queue import *  # noqa: F401,F403
from solutions.p03_bounded_queue import BoundedBlockingQueue as _Reference
from solutions.p03_bounded_queue import T
from solutions.p03_bounded_queue import ShutDown


class BoundedBlockingQueue(_Reference[T]):
    def put(self, item):
        if item is None:
            raise TypeError("None cannot be queued")
        with self._lock:
            if self._size == self._capacity and not self._closed:  # WRONG: `if`, not `while`
                self._not_full.wait()
            if self._closed:
                raise ShutDown("put() on a shut-down queue")
            self._insert(item)

    def take(self):
        with self._lock:
            if self._size == 0 and not self._closed:  # WRONG: `if`, not `while`
                self._not_empty.wait()
            if self._closed and self._size == 0:
                raise ShutDown("take() on a shut-down, empty queue")
            return self._remove()
