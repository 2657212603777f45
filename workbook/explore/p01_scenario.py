"""P01 scenarios: what a setup does alone, what the event loop's thread does, what each
producer thread does, and the dimensions around them (the hook, faults, spurious wakeups,
a stalled ``call_soon_threadsafe``, a late loop turn, preemption), as plain data that a
replay token carries.  Hypothesis draws them from a fixed seed; ``systematic``, ``pairs``
and ``triples`` are the fixed shapes.

Operations (lists, JSON-able):

- setup (alone, before the threads start): ``["put", ITEM]``, ``["bind", HOW]``,
  ``["get", MAX, TIMEOUT]`` (a non-blocking look that moves the sink to a state: armed,
  a wakeup in flight, items left over);
- the loop's thread: ``["bind", HOW]``, ``["get", MAX, TIMEOUT, DELAY, CANCEL]`` (after
  ``DELAY`` virtual seconds of ``asyncio.sleep``; the call's task cancelled ``CANCEL``
  seconds after it starts, if not None), ``["busy", SECONDS]`` (the loop's thread busy
  outside the loop: nothing of the loop runs meanwhile);
- a producer thread: ``["put", ITEM, DELAY]``.

``HOW`` is how ``bind_loop`` is called: ``"running"`` (no argument, inside the running
loop), ``"loop"`` (the loop object) or ``"wrapper"`` (an object that forwards to it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

from workbook.explore.scenario import schedule_notes
from workbook.explore.strategies import between, pick

#: Items: a plain object (identity is what counts), falsy values, None, an object equal to
#: everything, one that refuses to be compared, hashed or tested for truth (as a numpy
#: array refuses ``bool``): a sink never looks at what it carries.
ITEMS = ("obj", "0", "''", "None", "False", "odd", "touchy")
#: ``max_items``: edge values of its type.  "default" leaves the argument out.
MAXES: tuple[Any, ...] = ("default", 1, 2, 1, 2, 0, -1, "True", "False", 2.0, 1.5, "10**30")
_MAX_VALUES = {"True": True, "False": False, "10**30": 10**30}
#: ``timeout``: forever, none, zero of both signs, negative, short, huge, infinite, NaN.
TIMEOUTS: tuple[Any, ...] = (None, 0, 0.5, 1.0, None, 0.5, "-0.0", -1, 0.25, 1e10, "inf",
                             "nan")
#: Virtual seconds before a call (ties with the deadlines and each other on purpose).
DELAYS = (0, 0, 0.5, 1.0)
CANCELS = (None, None, None, 0, 0.5, 1.0)
HOOKS = (None, "record", "record", "put", "handoff", "slow")
BINDS = ("running", "loop", "wrapper")
#: Exceptions injected into a producer's wait for a lock: an interrupt, an Exception, a
#: BaseException that is neither.
FAULTS = (None, None, "KeyboardInterrupt", "Interrupted", "Cancelled")
PREEMPT = (0.0, 0.1, 0.3, 0.6)
#: The largest batch the final look asks for.
FINAL_MAX = 1024


@dataclass
class Scenario:
    setup: list[list[Any]]
    consumer: list[list[Any]]
    producers: list[list[list[Any]]]
    hook: str | None = "record"  # None | "record" | "put" | "handoff"
    end: str = "drain"  # "drain": join the producers, then look until []; "close": close the loop
    fault: str | None = None
    late: bool = False  # the fault lands only in a thread just woken
    spurious: int = 0  # stale wakeups delivered while the loop sleeps
    spurious_after: float = 0.5  # ... this long into each sleep
    stall: float = 0.0  # call_soon_threadsafe stalls the producer this long
    stall_after: bool = False  # ... after the self-pipe write (else before)
    defer: float = 0.0  # a put's wakeup is delivered this long after its call (put returns)
    lag: float = 0.0  # a loop turn may start this much late
    jump: float = 0.0  # the wall clock (time.time) jumps by this once virtual time moves
    preempt: float = 0.0
    lines: bool = False
    ops: bool = False  # with ``lines``: also inside a line, after each read of shared state
    seed: int = 0
    script: list[int] | None = None
    bound: int = 0
    version: int = 1

    def describe(self) -> str:
        parts = []
        if self.setup:
            parts.append("first, alone: " + "; ".join(op_label(op) for op in self.setup))
        parts.append("the loop's thread: " + ("; ".join(op_label(op) for op in self.consumer)
                                              or "nothing"))
        for n, ops in enumerate(self.producers, 1):
            parts.append(f"P{n}: " + "; ".join(op_label(op) for op in ops))
        extra = [HOOK_TEXT[self.hook]]
        if self.end == "close":
            extra.append("the loop is closed after the loop thread's calls, then it puts once more")
        if self.fault:
            extra.append(f"one {self.fault} raised inside a producer's wait"
                         + (", just after a wake-up" if self.late else ""))
        if self.spurious:
            extra.append(f"up to {self.spurious} stale wakeup(s), {self.spurious_after:g} s "
                         "into a sleep of the loop")
        if self.stall:
            extra.append(f"call_soon_threadsafe stalls its caller {self.stall:g} s "
                         + ("after" if self.stall_after else "before") + " the self-pipe write")
        if self.defer:
            extra.append(f"each wakeup a put schedules reaches the loop {self.defer:g} s late")
        if self.lag:
            extra.append(f"a loop turn may start {self.lag:g} s late")
        if self.jump:
            extra.append(f"the wall clock jumps {self.jump:+g} s once time moves")
        extra = [e for e in extra + schedule_notes(self) if e]
        return "; ".join(parts) + (" (" + ", ".join(extra) + ")" if extra else "")


HOOK_TEXT = {None: "no after_empty_drain hook", "record": "",
             "put": "after_empty_drain puts an item the first time",
             "handoff": "after_empty_drain, the first time, has another thread put an item "
                        "and waits for that put",
             "slow": "after_empty_drain works 0.3 s each time"}


# ---- values ------------------------------------------------------------------------------------

def max_value(spec: Any) -> Any:
    return _MAX_VALUES.get(spec, spec) if isinstance(spec, str) else spec


def timeout_value(spec: Any) -> float | None:
    if isinstance(spec, str):
        return float(spec)
    return spec


def max_limit(value: Any) -> int | None:
    """The most items a batch may hold for this ``max_items`` (None: it must be refused)."""
    if isinstance(value, bool):
        return 1 if value else None
    if isinstance(value, int):
        return value if value >= 1 else None
    if isinstance(value, float) and value >= 1:
        return math.ceil(value)  # a float is not an int: refusing it is allowed too
    return None


def get_args(op: list[Any]) -> dict[str, Any]:
    """The keyword arguments of a get operation."""
    kwargs: dict[str, Any] = {}
    if op[1] != "default":
        kwargs["max_items"] = max_value(op[1])
    if op[2] is not None:
        kwargs["timeout"] = timeout_value(op[2])
    return kwargs


def op_label(op: list[Any], item: str | None = None) -> str:
    kind = op[0]
    if kind == "put":
        delay = op[2] if len(op) > 2 else 0
        return (f"after {delay:g} s, " if delay else "") + f"put({item or op[1]})"
    if kind == "bind":
        return {"running": "bind_loop()", "loop": "bind_loop(loop)",
                "wrapper": "bind_loop(a wrapper of the loop)"}[op[1]]
    if kind == "busy":
        return f"busy outside the loop for {op[1]:g} s"
    if kind == "old_loop":
        return "bind_loop() and get_batch(timeout=0.25) on an earlier loop, then closed"
    args = ", ".join(f"{k}={_show(v)}" for k, v in get_args(op).items())
    text = f"get_batch({args})"
    if len(op) > 3 and op[3]:
        text = f"after {op[3]:g} s, " + text
    if len(op) > 4 and op[4] is not None:
        text += f" cancelled after {op[4]:g} s"
    return text


def _show(v: Any) -> str:
    if isinstance(v, float) and not math.isnan(v) and v == 0 and math.copysign(1, v) < 0:
        return "-0.0"
    if isinstance(v, int) and not isinstance(v, bool) and v > 10**9:
        return "10**30"
    return repr(v) if not isinstance(v, float) else f"{v:g}"


def well_formed(sc: Scenario) -> bool:
    """The loop is bound, before the first get (the final look included): else no correct
    sink could serve it."""
    bound = False
    for op in sc.setup:
        if op[0] == "bind":
            bound = True
        elif op[0] == "get" and not bound:
            return False
    for op in sc.consumer:
        if op[0] == "bind":
            bound = True
        elif op[0] == "get" and not bound:
            return False
    return bound


# ---- Hypothesis ---------------------------------------------------------------------------------

@st.composite
def scenarios(draw: Any) -> Scenario:
    item = pick(ITEMS)
    setup: list[list[Any]] = [["old_loop"]] if draw(between(0, 7)) == 0 else []
    setup += [["put", draw(item)] for _ in range(draw(between(0, 1)))]
    where = draw(pick(("setup", "setup", "consumer")))
    how = draw(pick(BINDS))
    consumer: list[list[Any]] = []
    if where == "setup":
        setup.append(["bind", how])
        for _ in range(draw(between(0, 2))):
            if draw(st.booleans()):
                setup.append(["put", draw(item)])
            else:
                setup.append(["get", draw(pick((1, "default"))), 0])
    else:
        consumer.append(["bind", how])
    for _ in range(draw(between(1, 3))):
        if draw(between(0, 9)) == 0:
            consumer.append(["busy", draw(pick((0.5, 1.0)))])
        consumer.append(["get", draw(pick(MAXES)), draw(pick(TIMEOUTS)),
                         draw(pick(DELAYS)), draw(pick(CANCELS))])
    producers = [[["put", draw(item), draw(pick(DELAYS))]
                  for _ in range(draw(between(1, 3)))]
                 for _ in range(draw(between(1, 3)))]
    return Scenario(
        setup=setup, consumer=consumer, producers=producers,
        hook=draw(pick(HOOKS)), end=draw(pick(("drain", "drain", "close"))),
        fault=draw(pick(FAULTS)), late=draw(st.booleans()),
        spurious=draw(between(0, 2)), spurious_after=draw(pick((0.25, 0.5, 1.0))),
        stall=draw(pick((0.0, 0.0, 0.5, 1.0))), stall_after=draw(st.booleans()),
        defer=draw(pick((0.0, 0.0, 0.0, 0.5, 1.0))),
        lag=draw(pick((0.0, 0.0, 0.5))),
        jump=draw(pick((0.0, 0.0, 0.0, -100.0, 100.0))),
        preempt=draw(pick(PREEMPT)), lines=draw(st.booleans()),
        seed=draw(between(0, 2**16)))


# ---- fixed shapes ---------------------------------------------------------------------------------

#: The states a pair starts from, as setups: not bound yet; bound and armed (no wakeup in
#: flight); an item queued with its wakeup in flight; a wakeup in flight whose item the
#: consumer already took (the cycle is not over); an item left over from a full batch.
STARTS: dict[str, list[list[Any]]] = {
    "unbound": [],
    "armed": [["bind", "running"], ["get", "default", 0]],
    "in_flight": [["bind", "running"], ["put", "obj"]],
    "taken": [["bind", "running"], ["put", "obj"], ["get", "default", 0]],
    "leftover": [["bind", "running"], ["put", "obj"], ["put", "obj"], ["get", 1, 0]],
}
#: What the loop's thread does in a pair: wait forever, look once, wait with a deadline.
LOOP_CALLS: dict[str, list[Any]] = {"wait": ["get", "default", None, 0, None],
                                    "look": ["get", 1, 0, 0, None],
                                    "timed": ["get", "default", 0.5, 0, None]}
PUT = ["put", "obj", 0]
#: A wait that starts only after 0.5 s (the consumer is busy until then).
LATE_WAIT = ["get", "default", None, 0.5, None]
#: The starts whose pair (a wait beside one put) is also explored line by line by default.
LINE_STARTS = ("unbound", "armed", "taken")


def _consumer(start: str, *calls: str) -> list[list[Any]]:
    ops = [["bind", "running"]] if start == "unbound" else []
    return ops + [list(LOOP_CALLS[c]) for c in calls]


def pairs() -> list[Scenario]:
    """Every pair of a loop-side call and one or two puts of one producer, from each start
    (and the hook putting too), run under every schedule with a bounded number of
    preemptions."""
    out = []
    for start, setup in STARTS.items():
        for call in LOOP_CALLS:
            for puts in (1, 2):
                out.append(Scenario([list(op) for op in setup], _consumer(start, call),
                                    [[list(PUT) for _ in range(puts)]], preempt=1.0))
        out.append(Scenario([list(op) for op in setup], _consumer(start, "wait"), [[list(PUT)]],
                            hook="put", preempt=1.0))
    for start in LINE_STARTS:  # and at the learner's lines, where no lock marks a point
        out.append(Scenario([list(op) for op in STARTS[start]], _consumer(start, "wait"),
                            [[list(PUT)]], preempt=1.0, lines=True))
    # two producers racing at the learner's lines for the one wakeup of a cycle (a flag read
    # and set outside the lock), the consumer armed and out of the way
    out.append(Scenario([list(op) for op in STARTS["armed"]], _consumer("armed"),
                        [[list(PUT)], [list(PUT)]], preempt=1.0, lines=True))
    # and stopped inside a line, just after a read of shared state (a list read before an
    # append to it, a count read before it is written back): a put beside a wait, and two
    # producers beside a consumer that takes one wakeup's item and re-arms for the next
    out.append(Scenario([list(op) for op in STARTS["armed"]], _consumer("armed", "wait"),
                        [[list(PUT)]], preempt=1.0, lines=True, ops=True))
    out.append(Scenario([list(op) for op in STARTS["armed"]], _consumer("armed", "wait", "wait"),
                        [[list(PUT)], [list(PUT)]], preempt=1.0, lines=True, ops=True))
    # ... and two producers racing while the consumer is busy elsewhere, so that nothing
    # re-arms between them: one wakeup for both, however their lines interleave
    out.append(Scenario([list(op) for op in STARTS["armed"]], [list(LATE_WAIT)],
                        [[list(PUT)], [list(PUT)]], preempt=1.0, lines=True, ops=True))
    return out


def triples() -> list[Scenario]:
    """A loop-side call beside two producers, from each start; then the pairs of the
    other starts and calls at the learner's lines (the longer search)."""
    out = [Scenario([list(op) for op in setup], _consumer(start, call),
                    [[list(PUT)], [list(PUT)]], preempt=1.0)
           for start, setup in STARTS.items() for call in LOOP_CALLS]
    out += [Scenario([list(op) for op in setup], _consumer(start, call),
                     [[list(PUT) for _ in range(puts)]], preempt=1.0, lines=True)
            for start, setup in STARTS.items() for call in LOOP_CALLS for puts in (1, 2)
            if (start, call, puts) not in [(s, "wait", 1) for s in LINE_STARTS]]
    return out


def systematic() -> list[Scenario]:
    """Shapes chance rarely draws, each a dimension at its edge: a producer stalled in
    call_soon_threadsafe (before or after the self-pipe write) while the consumer goes back
    to sleep; stale wakeups in the middle of a timed wait; a busy loop thread beside a put;
    the hook handing its put to another thread; a consumer cancelled at the instant an item
    arrives; a closed loop; puts racing bind_loop; late loop turns; every bind style."""
    out: list[Scenario] = []
    wait, timed = LOOP_CALLS["wait"], ["get", "default", 1.0, 0, None]
    for start in ("armed", "taken"):
        setup = STARTS[start]
        for after in (False, True):
            for how in ("loop", "wrapper"):
                s = [list(op) for op in setup]
                s[0] = ["bind", how]
                out.append(Scenario(s, [list(wait), ["get", "default", 0, 0, None]],
                                    [[list(PUT)], [["put", "obj", 0.5]]],
                                    stall=0.5, stall_after=after, preempt=0.3))
        for hook in ("handoff", "put"):
            out.append(Scenario([list(op) for op in setup], [list(wait)], [], hook=hook))
        out.append(Scenario([list(op) for op in setup], [list(timed)], [], spurious=2,
                            spurious_after=0.5))
        out.append(Scenario([list(op) for op in setup], [list(timed)],
                            [[["put", "obj", 0.5]]], spurious=1, spurious_after=0.25))
        out.append(Scenario([list(op) for op in setup],
                            [["busy", 1.0], list(wait)], [[list(PUT)]]))
        for first in ([["get", "default", None, 0, 0.5]], [["get", "default", 1.0, 0, 0.5]]):
            for puts in ([], [[["put", "obj", 0.5]]]):  # cancelled alone, or as an item comes
                out.append(Scenario([list(op) for op in setup],
                                    first + [["get", "default", 0, 0, None]], puts))
        for puts in ([], [[["put", "obj", 0.5]]]):  # a wakeup held back past the deadline
            out.append(Scenario([list(op) for op in setup], [list(timed), list(timed)], puts,
                                defer=1.0))
            out.append(Scenario([list(op) for op in setup], [list(timed), list(timed)], puts,
                                hook="slow"))
        out.append(Scenario([["old_loop"]] + [list(op) for op in setup], [list(timed)],
                            [[["put", "obj", 0.5]]]))
        out.append(Scenario([list(op) for op in setup], [["get", "default", 0, 0, None]],
                            [[["put", "obj", 0.5]]], end="close"))
        out.append(Scenario([list(op) for op in setup], [list(timed)],
                            [[["put", "obj", 0.5]], [["put", "obj", 1.0]]], lag=0.5))
        for jump in (-100.0, 100.0):
            for puts in ([], [[["put", "obj", 0.5]]]):
                out.append(Scenario([list(op) for op in setup], [list(timed), list(timed)],
                                    puts, jump=jump))
    for how in BINDS:
        out.append(Scenario([["put", "obj"]], [["bind", how], list(wait)], [[list(PUT)]],
                            preempt=0.5, lines=True))
    # every edge value of each argument once: max_items on three queued items, the timeout
    # on an empty sink beside a put that comes at 0.5 s, the items
    for spec in dict.fromkeys(MAXES):
        out.append(Scenario([["bind", "running"], ["put", "obj"], ["put", "0"], ["put", "obj"]],
                            [["get", spec, 0, 0, None], ["get", spec, None, 0, None]], []))
    for spec in ITEMS:  # ... and each kind of item, first in the sink and last
        out.append(Scenario([["bind", "running"], ["put", spec], ["put", "obj"], ["put", spec]],
                            [["get", "default", 0, 0, None]], [[["put", spec, 0]]]))
    for spec in dict.fromkeys(TIMEOUTS):
        out.append(Scenario(list(STARTS["armed"]), [["get", "default", spec, 0, None]] * 2,
                            [[["put", "obj", 0.5]]]))
    return out


def reseed(sc: Scenario, seed: int) -> Scenario:
    return replace(sc, seed=seed)


def from_data(data: dict[str, Any]) -> Scenario:
    return Scenario(**data)


def candidates(sc: Scenario):
    """Smaller or plainer well-formed scenarios than ``sc``, most promising first."""
    def variant(**changes: Any) -> Scenario:
        data = {**sc.__dict__, **changes}
        data["producers"] = [[list(op) for op in ops] for ops in data["producers"]]
        data["consumer"] = [list(op) for op in data["consumer"]]
        data["setup"] = [list(op) for op in data["setup"]]
        data["script"] = None
        return Scenario(**data)

    def cut(ops: list, j: int) -> list:
        return ops[:j] + ops[j + 1:]

    out: list[Scenario] = []
    for i in range(len(sc.producers)):
        out.append(variant(producers=cut(sc.producers, i)))
    for i, ops in enumerate(sc.producers):
        for j in range(len(ops)):
            if len(ops) > 1:
                out.append(variant(producers=sc.producers[:i] + [cut(ops, j)] + sc.producers[i + 1:]))
    for j in range(len(sc.consumer)):
        out.append(variant(consumer=cut(sc.consumer, j)))
    for j in range(len(sc.setup)):
        out.append(variant(setup=cut(sc.setup, j)))
    for field, plain in (("fault", None), ("spurious", 0), ("stall", 0.0), ("lag", 0.0),
                         ("jump", 0.0), ("defer", 0.0),
                         ("ops", False), ("lines", False), ("preempt", 0.0), ("end", "drain"),
                         ("hook", "record")):
        if getattr(sc, field) != plain:
            out.append(variant(**{field: plain}))
    for i, ops in enumerate(sc.producers):
        for j, op in enumerate(ops):
            if op[2] or op[1] != "obj":
                plain = ["put", "obj", 0] if not op[2] else [op[0], op[1], 0]
                out.append(variant(producers=sc.producers[:i] + [ops[:j] + [plain] + ops[j + 1:]]
                                   + sc.producers[i + 1:]))
    for j, op in enumerate(sc.consumer):
        if op[0] == "get" and (op[3] or op[4] is not None or op[1] != "default"):
            plain = ["get", op[1], op[2], 0, None] if op[3] or op[4] is not None \
                else ["get", "default", op[2], 0, None]
            out.append(variant(consumer=sc.consumer[:j] + [plain] + sc.consumer[j + 1:]))
    for found in out:
        if well_formed(found):
            yield found


__all__ = ["Scenario", "scenarios", "systematic", "pairs", "triples", "candidates", "reseed",
           "from_data", "op_label", "get_args", "max_value", "timeout_value", "max_limit",
           "FINAL_MAX", "well_formed"]
