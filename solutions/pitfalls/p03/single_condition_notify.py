"""Pitfall: one wait-set for both roles, woken with notify().

Putters and takers wait on the same Condition. notify() wakes the longest waiter,
whatever its role: when a take frees a slot it may wake another taker (which finds the
queue empty and goes back to sleep) while the putter that could use the slot sleeps on.
Both roles end up waiting on a queue that one of them could use: a deadlock.
"""

from solutions.p03_bounded_queue import *  # noqa: F401,F403
from solutions.p03_bounded_queue import BoundedBlockingQueue as _Reference
from solutions.p03_bounded_queue import T


class BoundedBlockingQueue(_Reference[T]):
    def __init__(self, capacity):
        super().__init__(capacity)
        # WRONG: a single Condition for "not empty" and "not full"; the code still calls
        # notify() (wake one), which can now wake a thread of the wrong role.
        self._not_full = self._not_empty
