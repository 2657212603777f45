"""Systematic schedules: every run of a scenario with at most ``bound`` preemptions.

Random schedules find a bug with the probability of its interleaving; for a pair of calls
that is often a few percent.  Here the scheduler's decisions come from a script instead
(``Choices``, given to ``Scheduler(choices=...)``): at each point where a thread may be
preempted, go on (0) or switch (1); at each pick among ready threads, which one.  After a
run, the last decision that has an untried alternative is advanced and everything after
it is dropped (a depth-first walk of the tree of decisions), so the runs of one scenario
cover each schedule with at most ``bound`` preemptions exactly once -- preemption bounding
as Musuvathi and Qadeer's CHESS does it: most concurrency bugs need one or two.
"""
from __future__ import annotations

from typing import Callable, Iterator, TypeVar

R = TypeVar("R")


class Choices:
    """The decisions of one run: those of ``script`` first, then the default (0) of each.

    ``random()`` answers the scheduler's yes/no questions (``rng.random() < p``): 1.0 is
    "no", 0.0 is "yes"; a "yes" is a preemption, and after ``bound`` of them the question is
    no longer a branch.  ``randrange(n)`` picks among ``n``."""

    def __init__(self, script: list[int], bound: int) -> None:
        self.script = script
        self.bound = bound
        self.used = 0
        self.trail: list[list[int]] = []  # [choice, arity, is_preemption] per decision

    def _next(self, arity: int, preemption: bool) -> int:
        at = len(self.trail)
        choice = self.script[at] if at < len(self.script) else 0
        if choice >= arity:  # the script came from a run that went otherwise: be safe
            choice = 0
        self.trail.append([choice, arity, int(preemption)])
        return choice

    def random(self) -> float:
        arity = 2 if self.used < self.bound else 1
        choice = self._next(arity, True)
        self.used += choice
        return 0.0 if choice else 1.0

    def randrange(self, n: int) -> int:
        return self._next(n, False)


def _advance(trail: list[list[int]], bound: int) -> list[int] | None:
    """The script of the next run after one whose decisions were ``trail``."""
    while trail:
        choice, arity, preemption = trail[-1]
        used = sum(c for c, _, p in trail[:-1] if p)
        if choice + 1 < arity and (not preemption or used < bound):
            return [c for c, _, _ in trail[:-1]] + [choice + 1]
        trail.pop()
    return None


def deviations(run: Callable[[Choices], R], bound: int, limit: int,
               prefix: list[int] | None = None) -> Iterator[R]:
    """The run that takes every default (after the decisions of ``prefix``), then one run
    per other way of taking one of its later decisions (a preemption there, or another
    thread picked), the defaults after it: every schedule that leaves the default at exactly
    one point.  Where that is more than ``limit`` runs, the points are spread evenly over
    the whole run -- a depth-first walk cut short would only vary the end of it."""
    prefix = list(prefix or [])
    first = Choices(prefix, bound)
    yield run(first)
    taken = [c for c, _, _ in first.trail]
    others = [(k, alt) for k, (choice, arity, _) in enumerate(first.trail)
              for alt in range(arity) if alt != choice and k >= len(prefix)]
    if len(others) > limit - 1:
        others = [others[i * len(others) // (limit - 1)] for i in range(limit - 1)]
    for k, alt in others:
        yield run(Choices(taken[:k] + [alt], bound))


def each_first(run: Callable[[Choices], R], bound: int, limit: int) -> Iterator[R]:
    """``deviations`` from the default schedule and from each schedule in which another
    thread is the first to run (``limit`` runs in all): a thread's whole operation can land
    inside another's only if that other one got there first."""
    first = Choices([], bound)
    yield run(first)
    pick = next((k for k, (_, arity, preemption) in enumerate(first.trail)
                 if arity > 1 and not preemption), None)
    starts = [[]] if pick is None else [
        [c for c, _, _ in first.trail[:pick]] + [alt] for alt in range(first.trail[pick][1])]
    share = max(2, (limit - 1) // len(starts))
    for n, prefix in enumerate(starts):
        runs = deviations(run, bound, share, prefix)
        if n == 0:
            next(runs)  # the default schedule: run above already
        yield from runs


def schedules(run: Callable[[Choices], R], bound: int, limit: int) -> Iterator[R]:
    """``run`` under every schedule with at most ``bound`` preemptions (at most ``limit``
    runs), first the one with none."""
    script: list[int] | None = []
    for _ in range(limit):
        if script is None:
            return
        choices = Choices(script, bound)
        yield run(choices)
        script = _advance(choices.trail, bound)
