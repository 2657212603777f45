"""Pitfall: the full timeout is restarted after every wakeup.

offer/poll wait for `timeout` seconds again each time they wake without being able to
proceed. Under a stream of wakeups that change nothing (spurious ones, or a competitor
taking the slot first) the call never times out.
"""

from solutions.p03_bounded_queue import *  # noqa: F401,F403
from solutions.p03_bounded_queue import BoundedBlockingQueue as _Reference
from solutions.p03_bounded_queue import T


class BoundedBlockingQueue(_Reference[T]):
    def _wait_until(self, cond, ready, timeout):
        while not ready() and not self._closed:
            if timeout is None:
                cond.wait()
                continue
            if timeout <= 0:
                return False
            # WRONG: waits the whole timeout again after every wakeup (no fixed deadline).
            if not cond.wait(timeout):
                return ready() or self._closed
        return True
