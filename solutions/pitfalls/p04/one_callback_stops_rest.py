"""Pitfall: one failing done callback stops the callbacks after it.

Without a try/except around each callback, the first exception escapes from set_result and
every callback registered after the broken one never learns the result.
"""
from solutions.p04_coroutine_runner import *  # noqa: F401,F403
from solutions.p04_coroutine_runner import Future as _Reference
from solutions.p04_coroutine_runner import InvalidStateError


class Future(_Reference):
    def _complete(self, value, exc):
        if self._done:
            raise InvalidStateError("the Future is already done")
        self._result, self._exception, self._done = value, exc, True
        callbacks, self._callbacks = self._callbacks, None
        for fn in callbacks:
            fn(self)  # WRONG: an exception here skips the rest
