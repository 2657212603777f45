"""Pitfall: every add_callback writes to the waker.

Correct but wasteful: a burst of N callbacks costs N syscalls and N bytes for the loop to
read, although the first byte already wakes it -- and calls made on the loop thread itself,
which is awake by definition, write too.
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
            self.wakeups_scheduled += 1
            self._wake()  # WRONG: only needed from another thread when the list was empty


# The reference IOLoop.current(), creating this file's IOLoop.
IOLoop.current = staticmethod(types.FunctionType(
    _ref.IOLoop.current.__code__, {**vars(_ref), "IOLoop": IOLoop}))
