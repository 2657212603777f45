"""Pitfall: a missing notify on one side.

take() frees a slot but never notifies the putters waiting on "not full". A putter that
went to sleep on a full queue keeps sleeping although there is room now.
"""

from solutions.p03_bounded_queue import *  # noqa: F401,F403
from solutions.p03_bounded_queue import BoundedBlockingQueue as _Reference
from solutions.p03_bounded_queue import T


class BoundedBlockingQueue(_Reference[T]):
    def _remove(self):
        item = self._slots[self._head]
        self._slots[self._head] = None
        self._head = (self._head + 1) % self._capacity
        self._size -= 1
        # WRONG: no self._not_full.notify(): nobody tells a waiting putter about the slot.
        return item
