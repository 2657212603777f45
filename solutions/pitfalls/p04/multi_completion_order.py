"""Pitfall: a list/dict multi collects results in completion order.

Appending each child's result as it completes loses the position it was yielded at: the
caller of `yield [a, b, c]` gets whatever finished first in position 0.
"""
import types

import solutions.p04_coroutine_runner as _ref
from solutions.p04_coroutine_runner import *  # noqa: F401,F403


class _Runner(_ref._Runner):
    def _gather(self, children):
        keys = list(children) if isinstance(children, dict) else range(len(children))
        futures = [children[k] for k in keys]
        for f in futures:
            if not isinstance(f, Future):
                raise BadYieldError(f"yielded {type(children).__name__} holding {f!r}")
        gathered = Future()
        results = []  # WRONG: filled in completion order

        def on_child_done(child):
            if gathered.done():
                return
            if child.exception() is not None:
                gathered.set_exception(child.exception())
                return
            results.append(child.result())
            if len(results) == len(futures):
                gathered.set_result(dict(zip(keys, results))
                                    if isinstance(children, dict) else results)

        if not futures:
            gathered.set_result({} if isinstance(children, dict) else [])
        for f in futures:
            f.add_done_callback(on_child_done)
        return gathered


coroutine = types.FunctionType(_ref.coroutine.__code__, {**vars(_ref), "_Runner": _Runner})
