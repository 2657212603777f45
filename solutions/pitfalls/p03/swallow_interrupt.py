"""Pitfall: swallowing the interrupt.

The wait is wrapped in a try/except that ignores the exception and waits again. The
caller (the main thread whose signal handler raised, asking it to stop) never gets
control back: the blocked put/take cannot be cancelled.
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
            while self._size == self._capacity and not self._closed:
                try:
                    self._not_full.wait()
                except Exception:  # WRONG: the interrupt is swallowed; we just wait again
                    pass
            if self._closed:
                raise ShutDown("put() on a shut-down queue")
            self._insert(item)

    def take(self):
        with self._lock:
            while self._size == 0 and not self._closed:
                try:
                    self._not_empty.wait()
                except Exception:  # WRONG: the interrupt is swallowed; we just wait again
                    pass
            if self._size == 0:
                raise ShutDown("take() on a shut-down, empty queue")
            return self._remove()
