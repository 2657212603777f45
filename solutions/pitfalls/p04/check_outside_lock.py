"""Pitfall: the emptiness of the list is checked before taking the lock.

Between the check ("not empty: a wakeup is already on its way") and the append, the loop can
take the whole list, run it and go to sleep.  The append then lands in an empty list without
a wakeup, and the loop sleeps through it.
"""
import functools
import threading
import types

import solutions.p04_coroutine_runner as _ref
from solutions.p04_coroutine_runner import *  # noqa: F401,F403


class IOLoop(_ref.IOLoop):
    def add_callback(self, callback, *args, **kwargs):
        wake = threading.get_ident() != self._thread_ident and not self._callbacks  # WRONG
        with self._lock:
            if self._closed:
                raise RuntimeError("the IOLoop is closed")
            self._callbacks.append(functools.partial(callback, *args, **kwargs))
            if wake:
                self.wakeups_scheduled += 1
                self._wake()


IOLoop.current = staticmethod(types.FunctionType(
    _ref.IOLoop.current.__code__, {**vars(_ref), "IOLoop": IOLoop}))
