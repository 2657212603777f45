"""Pitfall: run() has no `running` guard.

_wait_for() calls run() whenever the yielded Future is already done.  With the guard that
nested call returns at once and the outer while loop resumes the generator.  Without it,
run() re-enters itself: every done Future adds frames, and a long run of them ends in
RecursionError.
"""
import types

import solutions.p04_coroutine_runner as _ref
from solutions.p04_coroutine_runner import *  # noqa: F401,F403


class _Runner(_ref._Runner):
    def run(self):
        if self.finished:  # WRONG: no `if self.running: return`
            return
        self.running = True
        try:
            while not self.finished and self.future.done():
                future, self.future = self.future, None
                self._step(future)
        finally:
            self.running = False


# The reference decorator, looking up this file's _Runner.
coroutine = types.FunctionType(_ref.coroutine.__code__, {**vars(_ref), "_Runner": _Runner})
