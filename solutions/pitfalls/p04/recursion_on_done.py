"""Pitfall: a done Future is resumed by a direct, recursive call.

Instead of leaving a done Future to the run() loop, _wait_for() steps the generator itself:
_step -> _wait_for -> _step -> ...  Each done Future in a row adds frames to the stack; ten
thousand of them end in RecursionError.
"""
import types

import solutions.p04_coroutine_runner as _ref
from solutions.p04_coroutine_runner import *  # noqa: F401,F403


class _Runner(_ref._Runner):
    def _wait_for(self, yielded):
        if yielded is None or yielded is moment:
            self.future = Future()
            self.io_loop.add_callback(self._end_moment, self.future)
            return
        try:
            self.future = self._to_future(yielded)
        except BadYieldError as e:
            self.future = Future()
            self.future.set_exception(e)
        if self.future.done():
            future, self.future = self.future, None
            self._step(future)  # WRONG: recursion; leave it to the run() loop
        else:
            self.io_loop.add_future(self.future, lambda _: self.run())


coroutine = types.FunctionType(_ref.coroutine.__code__, {**vars(_ref), "_Runner": _Runner})
