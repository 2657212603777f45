"""Pitfall: shutdown() without waking the waiters.

The flag is set under the lock, but nobody notifies the conditions: threads already
blocked in put/take sleep on and never see the shutdown.
"""

from solutions.p03_bounded_queue import *  # noqa: F401,F403
from solutions.p03_bounded_queue import BoundedBlockingQueue as _Reference
from solutions.p03_bounded_queue import T


class BoundedBlockingQueue(_Reference[T]):
    def shutdown(self, immediate=False):
        with self._lock:
            self._closed = True
            if immediate:
                self._slots = [None] * self._capacity
                self._head = self._tail = self._size = 0
            # WRONG: no notify_all() on either condition; blocked threads never wake.
