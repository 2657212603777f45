"""Scenarios: a few threads × a few operations with edge values, drawn by Hypothesis, and the
replay token that carries one (with the schedule's seed) as plain text.

A scenario is plain data (JSON-able) so that a token reproduces it anywhere: item and
timeout *specs* ("obj", "0", ...; 0, 0.5, None, "inf", ...) become values only when a run
starts, and every run makes fresh objects.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from workbook.explore import tokens
from workbook.explore.strategies import between, pick

#: Items, simplest first (Hypothesis shrinks towards the front of each list): a plain object
#: (weakly referenceable, so a kept reference can be seen), falsy values, an object equal to
#: everything, and None (refused by put/offer).
ITEMS = ("obj", "0", "False", "''", "odd", "None")
#: Timeouts of offer/poll: zero, short, forever, a deadline already passed, huge, infinite.
TIMEOUTS: tuple[Any, ...] = (0, 0.5, None, 1.0, -1, 1e10, "inf")
#: Virtual seconds a thread waits before its next call (ties with deadlines on purpose).
DELAYS = (0, 0.5, 1.0)
#: What may be raised inside a wait: an interrupt, an ordinary exception, a BaseException.
FAULTS = (None, "KeyboardInterrupt", "Interrupted", "Cancelled")
PREEMPT = (0.0, 0.1, 0.3, 0.6)
#: Operations, the blocking core ones drawn more often (repeats weigh a draw).
CORE_KINDS = ("put", "take", "put", "take", "len")
ALL_KINDS = ("put", "take", "offer", "poll", "put", "take", "shutdown", "len")


class Size(int):
    """An int subclass (as an ``IntEnum`` member is one): a valid capacity."""

    def __repr__(self) -> str:
        return f"Size({int(self)})"


#: Capacities that are not an int > 0 (``bool`` is not accepted): refused with TypeError or
#: ValueError, by the spec's first sentence.
BAD_CAPACITIES: dict[str, Any] = {"True": True, "0": 0, "-1": -1, "1.0": 1.0, "None": None,
                                  "'2'": "2"}


def capacity_value(sc: "Scenario") -> Any:
    if sc.capacity_as in BAD_CAPACITIES:
        return BAD_CAPACITIES[sc.capacity_as]
    return Size(sc.capacity) if sc.capacity_as == "subclass" else sc.capacity


@dataclass
class Scenario:
    capacity: int
    preload: list[str]
    threads: list[list[list[Any]]]  # per thread: [kind, item or immediate, timeout, delay]
    fault: str | None = None
    late: bool = False  # the fault lands only in a thread just woken, before it runs
    jump: float = 0.0  # the wall clock (time.time) jumps by this once virtual time moves
    spurious: int = 0
    preempt: float = 0.0
    lines: bool = False
    seed: int = 0
    extensions: bool = True
    version: int = 1
    # A systematic run (``bounded``): its decisions, and the preemption bound they obey;
    # None for a run whose decisions come from ``seed``.
    script: list[int] | None = None
    bound: int = 0
    # how the capacity is passed: "int", "subclass" (an int subclass: valid), or one of
    # BAD_CAPACITIES (the constructor must refuse it)
    capacity_as: str = "int"
    ops: bool = False  # with ``lines``: also inside a line, after each read of shared state

    def describe(self) -> str:
        if self.capacity_as in BAD_CAPACITIES:
            return f"BoundedBlockingQueue({self.capacity_as})"
        pre = ", ".join(self.preload) or "nothing"
        size = (f"{Size(self.capacity)!r} (an int subclass)" if self.capacity_as == "subclass"
                else str(self.capacity))
        parts = [f"capacity {size}, preloaded with {pre}"]
        for n, ops in enumerate(self.threads, 1):
            parts.append(f"T{n}: " + "; ".join(op_label(op) for op in ops))
        extra = []
        if self.fault:
            extra.append(f"one {self.fault} raised inside a wait"
                         + (", just after a wake-up" if self.late else ""))
        if self.spurious:
            extra.append(f"up to {self.spurious} spurious wake-up(s)")
        extra += schedule_notes(self)
        if self.jump:
            extra.append(f"the wall clock jumps {self.jump:+g} s once time moves")
        return "; ".join(parts) + (" (" + ", ".join(extra) + ")" if extra else "")


def schedule_notes(sc: Any) -> list[str]:
    """How a scenario's schedule is drawn, in words (any problem's scenario with ``preempt``,
    ``lines``, ``script`` and ``bound``)."""
    notes = []
    if sc.preempt:
        notes.append(f"preemption {sc.preempt:g}")
    if sc.lines:
        notes.append("line-level preemption" + (", inside lines too (after each read of "
                                                "shared state)" if getattr(sc, "ops", False)
                                                else ""))
    if sc.script is not None:
        notes.append(f"a systematic schedule, {sc.bound} preemption(s) allowed")
    return notes


def timeout_value(spec: Any) -> float | None:
    return float("inf") if spec == "inf" else spec


def op_label(op: list[Any], item_name: str | None = None) -> str:
    kind, arg, timeout, delay = op
    wait = f"after {delay:g} s, " if delay else ""
    shown = item_name if item_name is not None else arg
    if kind == "put":
        return f"{wait}put({shown})"
    if kind == "offer":
        return f"{wait}offer({shown}, {_t(timeout)})"
    if kind == "poll":
        return f"{wait}poll({_t(timeout)})"
    if kind == "shutdown":
        return f"{wait}shutdown(immediate={bool(arg)})"
    if kind == "len":
        return f"{wait}len()"
    return f"{wait}{kind}()"


def _t(timeout: Any) -> str:
    if timeout == "inf":
        return "inf"
    return "None" if timeout is None else f"{timeout:g}"


@functools.lru_cache(maxsize=None)
def _op(kinds: tuple[str, ...]) -> st.SearchStrategy:
    """One operation of a thread: made once per set of kinds (see ``strategies``)."""
    return st.tuples(pick(kinds), pick(ITEMS), pick(TIMEOUTS), pick(DELAYS)).map(_tidy)


@st.composite
def scenarios(draw: Any, extensions: bool = True) -> Scenario:
    op = _op(ALL_KINDS if extensions else CORE_KINDS)
    capacity = draw(between(1, 2))
    preload = [draw(pick(ITEMS[:5])) for _ in range(draw(between(0, capacity)))]
    # sizes drawn as integers (near-uniform) rather than as list lengths (short ones favoured)
    threads = [[draw(op) for _ in range(draw(between(1, 3)))]
               for _ in range(draw(between(2, 3)))]
    return Scenario(
        capacity=capacity, preload=preload, threads=threads,
        fault=draw(pick(FAULTS)), late=draw(st.booleans()),
        spurious=draw(between(0, 2)),
        preempt=draw(pick(PREEMPT)), lines=draw(st.booleans()),
        jump=draw(pick((0.0, 0.0, -100.0, 100.0))),
        seed=draw(between(0, 2**16)), extensions=extensions)


def systematic(extensions: bool = True) -> list[Scenario]:
    """Small shapes chance rarely draws: two waiters of one role parked, then a thread of
    the other role (arriving half-way or at the instant a timed waiter's deadline passes)
    or a shutdown sequence, on an empty and on a full queue, with no interrupt, an interrupt
    while waiting and one just after a wake-up; and a wall clock that jumps during a timed
    wait.  There a wake-up goes to the wrong thread, is lost with an interrupted or
    timed-out waiter, or a shutdown is half done."""
    # every kind of capacity: each refused value, and an int subclass that must work
    out = [Scenario(1, [], [], capacity_as=bad, extensions=extensions) for bad in BAD_CAPACITIES]
    out.append(Scenario(2, ["obj"], [[["put", "obj", None, 0]], [["take", None, None, 0]]],
                        capacity_as="subclass", extensions=extensions))
    for cap in (1, 2):
        for side in ("empty", "full"):
            if side == "empty":
                preload: list[str] = []
                wait = ["take", None, None, 0]
                timed, forever = ["poll", None, 1.0, 0], ["poll", None, None, 0]
                now, other = ["poll", None, 0, 0], ["put", "obj", None, 0]
                role = [[dict_op(other, delay)] + [other] * cap for delay in (0.5, 1.0)]
            else:
                preload = ["obj"] * cap
                wait = ["put", "obj", None, 0]
                timed, forever = ["offer", "obj", 1.0, 0], ["offer", "obj", None, 0]
                now, other = ["offer", "obj", 0, 0], ["take", None, None, 0]
                role = [[dict_op(other, delay)] + [other] * cap for delay in (0.5, 1.0)]
            pairs = [(wait, wait)]
            shutdowns: list[list[list[Any]]] = []
            if extensions:
                if cap == 1:
                    pairs += [(wait, timed), (timed, wait), (forever, wait)]
                sd = ["shutdown", False, None, 0.5]
                sdi = ["shutdown", True, None, 0.5]
                shutdowns = [[sd], [sdi], [sd, ["shutdown", True, None, 0]], [sd, now],
                             [sdi, other]]
            for a, b in pairs:
                for w in role:
                    for fault, late in ((None, False), ("KeyboardInterrupt", False),
                                        ("KeyboardInterrupt", True)):
                        out.append(Scenario(cap, list(preload), [[list(a)], [list(b)], _copy(w)],
                                            fault=fault, late=late, extensions=extensions))
                for w in shutdowns:
                    out.append(Scenario(cap, list(preload), [[list(a)], [list(b)], _copy(w)],
                                        preempt=0.3, extensions=extensions))
            if extensions and cap == 2 and side == "empty":
                # a non-blocking offer while another call holds the lock, on a queue with room
                offer0 = ["offer", "obj", 0, 0]
                for busy in (["put", "obj", None, 0], ["len", None, None, 0],
                             ["shutdown", False, None, 0]):
                    for seed in range(0, 60, 10):
                        out.append(Scenario(cap, [], [[list(busy)], [list(offer0)]],
                                            preempt=0.6, seed=seed, extensions=extensions))
                # ... and beside a put that a concurrent shutdown is about to refuse (the
                # interleaving takes ~2.5 % of the schedules at this preemption: 40 seeds)
                for seed in range(0, 40, 2):
                    out.append(Scenario(1, [], [[["put", "obj", None, 0]], [list(offer0)],
                                                [["shutdown", False, None, 0]]],
                                        preempt=0.8, seed=seed, extensions=extensions))
            if extensions and cap == 1:
                # a timed waiter woken half-way by a call whose effect another thread
                # steals: it must wait again only for what is left of its timeout
                for first in (timed, forever):
                    for seed in (0, 10, 20):
                        out.append(Scenario(cap, list(preload),
                                            [[list(first)], [dict_op(other, 0.5)],
                                             [dict_op(wait, 0.5)]],
                                            seed=seed, extensions=extensions))
                for jump in (-100.0, 100.0):
                    out.append(Scenario(cap, list(preload), [[list(timed)], [dict_op(other, 2.0)]],
                                        jump=jump, extensions=extensions))
    return out


#: The calls of the pairs and triples, by short name; the plainest arguments (edge values
#: are Hypothesis's part): what varies here is only who runs when.
CALLS = {"put": ["put", "obj", None, 0], "take": ["take", None, None, 0],
         "len": ["len", None, None, 0], "offer": ["offer", "obj", 0, 0],
         "poll": ["poll", None, 0, 0], "shutdown": ["shutdown", False, None, 0],
         "shutdown_now": ["shutdown", True, None, 0]}
CORE_CALLS = ("put", "take", "len")
#: The queue a pair starts from: empty, full, and neither (capacity, preload).
STARTS = ((1, []), (1, ["obj"]), (2, ["obj"]))


def _calls(extensions: bool) -> list[str]:
    return list(CALLS) if extensions else list(CORE_CALLS)


def pairs(extensions: bool = True) -> list[Scenario]:
    """Every ordered pair of calls (a; b), one per thread, from each start; the second
    thread then looks (``poll(0)``, or ``len`` for the core), so that a state left half
    changed is seen.  Run under every schedule with a bounded number of preemptions."""
    look = CALLS["poll" if extensions else "len"]
    return [Scenario(cap, list(pre), [[list(CALLS[a])], [list(CALLS[b]), list(look)]],
                     preempt=1.0, extensions=extensions)
            for cap, pre in STARTS for a in _calls(extensions) for b in _calls(extensions)
            ] + midline(extensions)


#: Threads stopped inside a line, just after a read of shared state (a count read before it
#: is written back, outside the lock): two waiters of one role racing on their way in, and
#: a thread of the other role that comes later and serves both, one call at a time; and a
#: put beside a take on a queue with room, each then looking.
MIDLINE = (
    (1, ["obj"], [[CALLS["put"]], [CALLS["put"]],
                  [["take", None, None, 0.5], CALLS["take"]]]),
    (1, [], [[CALLS["take"]], [CALLS["take"]], [["put", "obj", None, 0.5], CALLS["put"]]]),
    (2, ["obj"], [[CALLS["put"], CALLS["len"]], [CALLS["take"], CALLS["len"]]]),
)


def midline(extensions: bool = True) -> list[Scenario]:
    """The ``MIDLINE`` shapes (core calls only), walked by ``bounded.each_first``."""
    return [Scenario(cap, list(pre), [[list(op) for op in ops] for ops in threads],
                     preempt=1.0, lines=True, ops=True, extensions=extensions)
            for cap, pre, threads in MIDLINE]


def triples(extensions: bool = True) -> list[Scenario]:
    """Every triple of calls, one per thread, from each start (the longer search)."""
    names = _calls(extensions)
    return [Scenario(cap, list(pre), [[list(CALLS[a])], [list(CALLS[b])], [list(CALLS[c])]],
                     preempt=1.0, extensions=extensions)
            for cap, pre in STARTS for a in names for b in names for c in names]


def dict_op(op: list[Any], delay: float) -> list[Any]:
    return [op[0], op[1], op[2], delay]


def _copy(ops: list[list[Any]]) -> list[list[Any]]:
    return [list(op) for op in ops]


def _tidy(raw: tuple) -> list[Any]:
    """Keep only the fields an operation uses, so equal scenarios print alike."""
    kind, item, timeout, delay = raw
    if kind == "shutdown":
        return [kind, item in ("0", "False"), None, delay]  # immediate: two specs of six
    if kind in ("take", "len"):
        return [kind, None, None, delay]
    if kind == "put":
        return [kind, item, None, delay]
    if kind == "poll":
        return [kind, None, timeout, delay]
    return [kind, item, timeout, delay]


# ---- the replay token ---------------------------------------------------------------------------

def token(problem: str, scenario: Scenario) -> str:
    return tokens.encode(problem, scenario)


def parse_token(text: str) -> tuple[str, Scenario]:
    """The problem and the P03 scenario a token carries; ValueError if it is not one."""
    problem, data = tokens.decode(text)
    try:
        return problem, Scenario(**data)
    except TypeError as exc:
        raise ValueError(f"the replay token is damaged ({exc})") from None


__all__ = ["Scenario", "scenarios", "token", "parse_token", "op_label", "timeout_value",
           "field"]
