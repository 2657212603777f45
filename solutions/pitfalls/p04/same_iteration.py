"""Pitfall: callbacks added during a turn run in that same turn.

Popping callbacks until the list is empty looks equivalent, but a callback that adds another
one (`yield moment` in a loop, a callback re-adding itself) keeps the turn going forever:
the due timeouts of step 2 never get their turn.
"""
import heapq
import types

import solutions.p04_coroutine_runner as _ref
from solutions.p04_coroutine_runner import *  # noqa: F401,F403


class IOLoop(_ref.IOLoop):
    def _iteration(self):
        while True:  # WRONG: runs what the callbacks add, too
            with self._lock:
                if not self._callbacks:
                    break
                callback = self._callbacks.pop(0)
            self._run(callback)
        now = self.time()
        while self._timeouts and self._timeouts[0][0] <= now:
            timeout = heapq.heappop(self._timeouts)[2]
            if timeout.callback is not None:
                self._run(timeout.callback)
        if self._stopped:
            return
        if self._callbacks:
            wait = 0.0
        elif self._timeouts:
            wait = max(0.0, self._timeouts[0][0] - self.time())
        else:
            wait = None
        for key, _ in self._selector.select(wait):
            if key.fileobj is self._waker_r:
                try:
                    self._waker_r.recv(4096)
                except (BlockingIOError, InterruptedError):
                    pass


IOLoop.current = staticmethod(types.FunctionType(
    _ref.IOLoop.current.__code__, {**vars(_ref), "IOLoop": IOLoop}))
