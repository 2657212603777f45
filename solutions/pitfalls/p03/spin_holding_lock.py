"""Pitfall: waiting by sleeping in a loop while holding the lock.

The waiting thread never releases the lock, so the thread that could change the state
(a taker for a full queue, a putter for an empty one) can never get in: the waiter
polls forever and everyone else blocks on the lock.
"""

import time

from solutions.p03_bounded_queue import *  # noqa: F401,F403
from solutions.p03_bounded_queue import BoundedBlockingQueue as _Reference
from solutions.p03_bounded_queue import T
from solutions.p03_bounded_queue import ShutDown


class BoundedBlockingQueue(_Reference[T]):
    def put(self, item):
        if item is None:
            raise TypeError("None cannot be queued")
        with self._lock:
            while self._size == self._capacity and not self._closed:
                time.sleep(0.001)  # WRONG: sleeps with the lock held; nobody can take
            if self._closed:
                raise ShutDown("put() on a shut-down queue")
            self._insert(item)

    def take(self):
        with self._lock:
            while self._size == 0 and not self._closed:
                time.sleep(0.001)  # WRONG: sleeps with the lock held; nobody can put
            if self._size == 0:
                raise ShutDown("take() on a shut-down, empty queue")
            return self._remove()
