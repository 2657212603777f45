"""Hypothesis strategies made once per distinct argument.

A scenario is drawn from dozens of small strategies in every example.  Hypothesis validates a
strategy object on its first draw (its properties are worked out over the whole strategy
graph), so a ``st.sampled_from(...)`` made anew inside a composite was validated anew in every
example: that was most of the cost of drawing a scenario (P03: 3.9 ms an example, 1.3 ms
with these).  ``pick`` and ``between`` give back the same object for the same arguments, so
each is validated once and the draws are exactly the ones the fresh objects gave.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

from hypothesis import strategies as st


def _key(values: Sequence[Any]) -> tuple:
    # The type too: 0, 0.0 and False are equal (and hash alike) but are different draws.
    return tuple((type(v), v) for v in values)


@functools.lru_cache(maxsize=None)
def _pick(key: tuple) -> st.SearchStrategy:
    return st.sampled_from(tuple(v for _, v in key))


def pick(values: Sequence[Any]) -> st.SearchStrategy:
    """``st.sampled_from(values)``, made once per sequence of values."""
    try:
        return _pick(_key(values))
    except TypeError:  # a value that cannot be a key (a list): made anew
        return st.sampled_from(values)


@functools.lru_cache(maxsize=None)
def between(low: int, high: int) -> st.SearchStrategy[int]:
    """``st.integers(low, high)``, made once per pair."""
    return st.integers(low, high)
