"""Pitfall: a failed Future's exception never reaches the generator.

The Runner fails the coroutine's own Future directly instead of throw()ing the exception
into the generator at its yield, so a `try: yield f / except` in the coroutine never runs.
"""
import types

import solutions.p04_coroutine_runner as _ref
from solutions.p04_coroutine_runner import *  # noqa: F401,F403


class _Runner(_ref._Runner):
    def _step(self, future):
        exc = future.exception()
        if exc is not None:
            self._finish(None, exc)  # WRONG: should be self.gen.throw(exc)
            return
        try:
            yielded = self.gen.send(future.result())
        except (StopIteration, Return) as e:
            self._finish(e.value, None)
        except Exception as e:
            self._finish(None, e)
        else:
            self._wait_for(yielded)


coroutine = types.FunctionType(_ref.coroutine.__code__, {**vars(_ref), "_Runner": _Runner})
