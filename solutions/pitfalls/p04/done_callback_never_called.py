"""Pitfall: add_done_callback on a done Future only queues the callback.

The callbacks of a Future run once, when it completes.  A callback added after that is
appended to a list nobody will ever run again.
"""
from solutions.p04_coroutine_runner import *  # noqa: F401,F403
from solutions.p04_coroutine_runner import Future as _Reference


class Future(_Reference):
    def add_done_callback(self, fn):
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(fn)  # WRONG: too late; a done Future must call fn(self) now
