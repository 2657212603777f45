"""Pitfall: add_callback never writes to the waker.

The callback is queued, but a loop asleep in select() with no timeout has no reason to look
at the list again: it sleeps on, and the callback waits forever (a lost wakeup).
"""
import functools
import types

import solutions.p04_coroutine_runner as _ref
from solutions.p04_coroutine_runner import *  # noqa: F401,F403


class IOLoop(_ref.IOLoop):
    def add_callback(self, callback, *args, **kwargs):
        with self._lock:
            if self._closed:
                raise RuntimeError("the IOLoop is closed")
            self._callbacks.append(functools.partial(callback, *args, **kwargs))
            # WRONG: no wakeup -- "the loop will see it on its next turn" (it never turns)


IOLoop.current = staticmethod(types.FunctionType(
    _ref.IOLoop.current.__code__, {**vars(_ref), "IOLoop": IOLoop}))
