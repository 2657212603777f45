"""Pitfall: the slot of a taken item is not cleared.

take() returns the item but leaves it in the ring. The queue keeps it alive until a
later put happens to overwrite that slot: a memory leak that can hold large objects (or
objects whose lifetime matters, like open files) for a long time.
"""

from solutions.p03_bounded_queue import *  # noqa: F401,F403
from solutions.p03_bounded_queue import BoundedBlockingQueue as _Reference
from solutions.p03_bounded_queue import T


class BoundedBlockingQueue(_Reference[T]):
    def _remove(self):
        item = self._slots[self._head]  # WRONG: the slot keeps its reference to item
        self._head = (self._head + 1) % self._capacity
        self._size -= 1
        self._not_full.notify()
        return item
