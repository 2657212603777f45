"""Pitfall: a ready-made blocking queue underneath.

Every operation is delegated to ``queue.Queue``. It behaves correctly (it is the
production answer), but the exercise is to build the waiting from a lock and conditions,
so the acceptance set refuses it.
"""

import queue

from solutions.p03_bounded_queue import *  # noqa: F401,F403
from solutions.p03_bounded_queue import BoundedBlockingQueue as _Reference
from solutions.p03_bounded_queue import T


class BoundedBlockingQueue(_Reference[T]):
    def __init__(self, capacity):
        super().__init__(capacity)  # validation
        self._inner = queue.Queue(capacity)  # WRONG: the exercise is to build this

    def __len__(self):
        return self._inner.qsize()

    def put(self, item):
        if item is None:
            raise TypeError("None cannot be queued")
        self._inner.put(item)

    def take(self):
        return self._inner.get()

    def offer(self, item, timeout=0.0):
        raise NotImplementedError("not part of this variant")

    def poll(self, timeout=0.0):
        raise NotImplementedError("not part of this variant")

    def shutdown(self, immediate=False):
        raise NotImplementedError("not part of this variant")
