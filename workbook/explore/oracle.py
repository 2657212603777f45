"""Linearizability: can some sequential order of the same calls explain what they returned?

A history is a list of ``Call``s, each with the step at which it began and the step at
which it returned (``None``: it never returned).  A finished call takes effect at one
instant between the two -- never before ``lo``, its earliest possible instant (a call that
reports a timeout cannot have taken effect before its deadline).  The search (in the manner
of Wing and Gong, memoised on the set of placed calls and the model's state) places the
finished calls one at a time, each one placed only while no unplaced call has returned
before it could begin, and asks the model whether each call's observed outcome is one it
can produce in the state reached so far.  Calls that never returned are not placed: in the
final state each of them must be one the model says cannot go on (it is blocked), or a
thread sleeps that could go on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable


class Undecided(Exception):
    """The search ran out of its budget: no verdict either way."""


@dataclass
class Call:
    task: int
    label: str  # how the timeline names it: "take()", "offer(obj1, 0.5)"
    kind: str
    args: tuple
    call: int  # step at which it began
    ret: int | None = None  # step at which it returned; None while it never did
    lo: int = 0  # earliest step at which it may take effect
    outcome: tuple = ()  # ("return", value) or ("raise", exception)
    call_time: float = 0.0  # virtual clock at the call and at the return
    ret_time: float | None = None
    meta: dict = field(default_factory=dict)


Step = Callable[[Hashable, Call], Iterable[Hashable]]
Blocked = Callable[[Hashable, Call], bool]


def linearize(calls: list[Call], initial: Hashable, step: Step, blocked: Blocked,
              budget: int = 200_000, final: list | None = None) -> list[Call] | None:
    """An order of the finished ``calls`` that the model explains, with every unfinished
    call blocked at the end; None if there is none (or the search ran out of ``budget``)."""
    done = [c for c in calls if c.ret is not None]
    pending = [c for c in calls if c.ret is None]
    n = len(done)
    full = (1 << n) - 1
    seen: set = set()
    order: list[Call] = []
    nodes = 0

    def search(mask: int, state: Hashable, last: int) -> bool:
        nonlocal nodes
        if mask == full:
            if all(blocked(state, c) for c in pending):
                if final is not None:
                    final.append(state)  # the model's state after the order found
                return True
            return False
        key = (mask, state, last)
        if key in seen:
            return False
        seen.add(key)
        nodes += 1
        if nodes > budget:
            raise Undecided(f"the search gave up after {budget} states")
        left = [i for i in range(n) if not mask >> i & 1]
        for i in left:
            c = done[i]
            at = max(last, c.lo, c.call)
            if at > c.ret:  # type: ignore[operator]
                continue
            # every other unplaced call must not have returned before that instant
            if any(done[j].ret < at for j in left if j != i):  # type: ignore[operator]
                continue
            for after in step(state, c):
                order.append(c)
                if search(mask | 1 << i, after, at):
                    return True
                order.pop()
        return False

    return list(order) if search(0, initial, 0) else None


_DICTS: list[Any] = [0, frozenset()]  # len(sys.modules) when computed; their namespaces' ids


def _module_dicts() -> frozenset[int]:
    """The ids of every module's namespace (cached while no module is added)."""
    import sys

    if _DICTS[0] != len(sys.modules):
        _DICTS[:] = [len(sys.modules), frozenset(
            id(vars(m)) for m in list(sys.modules.values()) if hasattr(m, "__dict__"))]
    return _DICTS[1]


def reachable(roots: list[Any], targets: set[int], skip: tuple[type, ...] = ()) -> list[int]:
    """The ids of ``targets`` reachable from ``roots``, nearest first, following every
    reference (``gc.get_referents``) except into modules, classes, a module's namespace, the
    explorer's own objects (its tasks, threads and scheduler) and instances of ``skip``:
    those reach everything, and what the learner's objects own is none of them."""
    import gc
    import threading
    import types

    from workbook.explore.sched import Scheduler, Task

    stop = _module_dicts()
    stop_types = (types.ModuleType, type, Task, Scheduler, threading.Thread) + skip
    seen: set[int] = set()
    found: list[int] = []
    level = list(roots)
    while level:  # breadth first, a level at a time: the nearest targets are found first
        expand = []
        for obj in level:
            key = id(obj)  # once: each call of id() is an audit event in a graded run
            if key in seen:
                continue
            seen.add(key)
            if key in targets:
                found.append(key)
            elif key not in stop and not isinstance(obj, stop_types):
                expand.append(obj)
        # One call for the whole level: get_referents is an audit event too.
        level = gc.get_referents(*expand) if expand else []
    return found
