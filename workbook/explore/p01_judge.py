"""P01 exploration, the judgement: what no correct sink would have done in a run.

``idle`` looks at a run whenever no thread can run, before virtual time moves on (or the
run ends): that is when a sleeper sleeps for real.  ``judge`` looks at the whole history
once the run is over.  Both read only what the run recorded (calls, returns, the calls of
``call_soon_threadsafe``, the hook's calls) and the threads' states in the scheduler --
never the sink's internals.
"""
from __future__ import annotations

import asyncio
import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbook.explore.oracle import Call, Undecided, linearize
from workbook.explore.p01_scenario import max_limit
from workbook.explore.sched import HORIZON, RunInfo
from workbook.explore.sched import INSTANT as EPS  # times this close are one instant

if TYPE_CHECKING:
    from workbook.explore.p01_run import Run

#: Loop turns after a wakeup is delivered during which a cancel may be lost by asyncio itself:
#: ``asyncio.wait_for`` on 3.10 and 3.11 returns the inner result, swallowing the outer
#: cancel, when the awaited future completed in the same turn (bpo-42130); the inner task
#: finishes a turn or two after the callback that sets the event.
RACE_TURNS = 3


@dataclass
class Wakeup:
    """One call of ``call_soon_threadsafe`` made inside a put."""
    step: int
    # to the loop itself, although the put began after bind_loop was given a wrapper of it
    bypassed: bool
    put: Call
    raised: bool = False  # the loop was closed


_OWNERS = {"setup": "the setup", "loop": "the loop's thread", "helper": "the hook's helper"}


def thread_name(name: str) -> str:
    return _OWNERS.get(name, name)


def who(run: "Run", c: Call) -> str:
    name = run.sched.tasks[c.task].name if c.task < len(run.sched.tasks) else "?"
    return f"{thread_name(name)}'s {c.label}"


def _forever(timeout: Any) -> bool:
    return timeout is None or (isinstance(timeout, (int, float)) and timeout >= HORIZON)


def _nan(timeout: Any) -> bool:
    return isinstance(timeout, float) and math.isnan(timeout)


def deadline(run: "Run", c: Call, late: bool = True) -> float | None:
    """Virtual time by which a get_batch must have returned (None: never); with ``late``,
    plus the time its thread lost meanwhile to late turns and inside its hook -- without,
    the instant it must no longer be asleep."""
    timeout = c.args[1]
    if _forever(timeout) or _nan(timeout) or isinstance(timeout, bool):
        return None
    lag = 0.0
    if late:  # late turns, and the time its hook took (which may wait for another put)
        lag = sum(d for when, d in run.lags if when >= c.call_time - EPS
                  and (c.ret_time is None or when <= c.ret_time + EPS))
        lag += sum(h.ret_time - h.call_time for h in run.calls
                   if h.kind == "hook" and h.ret is not None and h.call >= c.call
                   and (c.ret is None or h.ret <= c.ret))  # type: ignore[operator]
    return c.call_time + max(timeout, 0.0) + lag


def available(run: "Run") -> list[Call]:
    """The puts that returned (not interrupted) whose item no returned batch holds."""
    out_count: Counter = Counter()
    for c in run.calls:
        if c.kind == "get" and c.outcome[:1] == ("return",) and isinstance(c.outcome[1], list):
            out_count.update(id(x) for x in c.outcome[1])
    left = []
    for c in run.calls:
        if c.kind == "put" and c.ret is not None and c.outcome[:1] == ("return",):
            key = id(c.args[0])
            if out_count[key] > 0:
                out_count[key] -= 1
            else:
                left.append(c)
    return left


def _doing(run: "Run", task: Any) -> str:
    """What a thread is doing, in words, for a message."""
    if task is None:
        return ""
    if task.state == "waiting":
        if task.blocker is run.loop.selector:
            return "sleeps in select()"
        return f"waits ({task.waiting_what})"
    inside = run.stack.get(task.index)
    if inside:
        return f"is inside {inside[-1].label}"
    return task.state


def _holder(run: "Run", task: Any) -> str:
    holder = getattr(task.blocker, "_holder", None)
    if holder is None or not hasattr(holder, "index"):
        return ""
    if holder is task:
        return ", which its own thread holds"
    return f", which {thread_name(holder.name)} holds while it {_doing(run, holder)}"


def idle(run: "Run", soonest: float | None) -> str | None:
    """The problem with the run right now, when nobody can run and time is about to move."""
    s = run.sched
    for t in s.tasks:
        inside = run.stack.get(t.index)
        if inside and inside[-1].kind == "put" and run.waiting_on_learner(t):
            c = inside[-1]
            return (f"{who(run, c)} waits ({t.waiting_what}{_holder(run, t)}) and nothing "
                    "that could end the wait is running: put() must never block on the "
                    "consumer (hold a lock only for a check-and-set, call "
                    "call_soon_threadsafe and the hook outside it)")
    loop = s.tasks[1]
    if run.waiting_on_learner(loop):
        return (f"the event loop's thread is parked ({loop.waiting_what}{_holder(run, loop)}) "
                "and nothing that could end the wait is running: the loop side must never "
                "wait for a producer (a lock held around a call out, or taken in opposite "
                "orders)")
    c = run.getting
    if c is None or not run.loop.selector.asleep or _nan(c.args[1]):
        return None
    if max_limit(c.args[0]) is None:
        return (f"{who(run, c)} went to sleep instead of raising ValueError: max_items < 1 "
                "raises ValueError")
    # a wakeup may still be on its way: held back, or from a put not yet returned (stalled
    # inside call_soon_threadsafe, say)
    busy = any(c.kind == "put" and c.ret is None for c in run.calls)
    left = available(run) if not run.deferred and not busy else []
    if left:
        items = ", ".join(repr(p.args[0]) for p in left)
        puts = "; ".join(f"{who(run, p)} returned at step {p.ret}" for p in left)
        return (f"the consumer sleeps in select() inside {who(run, c)} while {items} "
                f"wait{'s' if len(left) == 1 else ''} in the sink ({puts}): a lost wakeup -- "
                "get_batch returns as soon as any item is available")
    end = deadline(run, c, late=False)
    if end is not None and (soonest is None or soonest > end + EPS):
        limit = max(c.args[1], 0.0)
        return (f"{who(run, c)} is still asleep at its deadline ({limit:g} s after the call, "
                f"at {end:g})" + ("" if soonest is None else
                                  f" and would sleep until {soonest:g}")
                + ": the timeout is one deadline, computed on entry" +
                (" (timeout <= 0 is one non-blocking look)" if limit == 0 else ""))
    return None


# ---- the history ---------------------------------------------------------------------------

def judge(run: "Run", info: RunInfo) -> str | None:
    if info.ended == "spinning":
        c = run.getting
        if c is not None and _nan(c.args[1]):
            return None  # timeout=nan: the contract says nothing; busy looping is allowed
        return (f"{thread_name(info.spinner)} kept "
                "running without ever sleeping (thousands of steps, no call ending, the "
                "clock standing still): an empty wait must sleep, not spin")
    for c in run.calls:
        problem = _call_problem(run, c)
        if problem:
            return problem
    problem = _linearizable(run)
    if problem:
        return problem
    return _wakeups(run)


def _call_problem(run: "Run", c: Call) -> str | None:
    if c.ret is None:
        return None
    how, value = c.outcome
    injected = c.meta.get("injected")
    if c.kind == "put":
        if injected is not None and how == "raise" and value is not injected:
            return (f"{type(injected).__name__} was raised inside the wait of {who(run, c)}, "
                    f"but the call raised {type(value).__name__}: it must propagate unchanged")
        if how == "raise" and value is not injected:
            hint = (" (a RuntimeError from a closed loop's call_soon_threadsafe is ignored)"
                    if isinstance(value, RuntimeError) else "")
            return f"{who(run, c)} raised {type(value).__name__}: {value}{hint}"
        return None
    if c.kind in ("bind", "hook"):
        if how == "raise":
            return f"{who(run, c)} raised {type(value).__name__}: {value}"
        return None
    if c.kind != "get":
        return None
    max_items, timeout = c.args[0], c.args[1]
    limit = max_limit(max_items)
    cancelled = c.meta.get("cancelled")
    turn = c.meta.get("cancel_turn", 0)
    if cancelled and not (how == "raise" and isinstance(value, asyncio.CancelledError)) \
            and not any(turn - RACE_TURNS <= t <= turn for t in run.delivered):
        got = (f"returned {value!r}" if how == "return" else f"raised {type(value).__name__}")
        return (f"{who(run, c)} was cancelled while it waited, and {got}: a cancelled "
                "get_batch ends with CancelledError (it is a BaseException: an except clause "
                "for timeouts must not catch it)")
    if how == "raise":
        if isinstance(value, asyncio.CancelledError) and cancelled:
            return None
        if isinstance(value, ValueError) and limit is None:
            return None
        plain = isinstance(max_items, int) and not isinstance(max_items, bool)
        if isinstance(value, (TypeError, ValueError)) and not plain:
            return None  # a bool or a float is not an int: refusing it is allowed
        need = " (max_items < 1 raises ValueError)" if limit is None else ""
        return f"{who(run, c)} raised {type(value).__name__}: {value}{need}"
    if limit is None:
        return f"{who(run, c)} returned {value!r}: max_items < 1 must raise ValueError"
    if not isinstance(value, list):
        return f"{who(run, c)} returned {type(value).__name__} {value!r}, not a list"
    if len(value) > limit:
        return (f"{who(run, c)} returned {len(value)} items, more than max_items="
                f"{max_items!r}")
    if _nan(timeout):
        return None
    if not value and _forever(timeout):
        return (f"{who(run, c)} returned [] although its timeout ({timeout!r}) never passes: "
                "[] only when the timeout has passed with nothing available")
    if not value and timeout > 0 and c.ret_time < c.call_time + timeout - EPS:  # type: ignore[operator]
        return (f"{who(run, c)} returned [] after {c.ret_time - c.call_time:g} s, before "  # type: ignore[operator]
                f"its deadline of {timeout:g} s: [] only once the timeout has passed")
    end = deadline(run, c)
    if end is not None and c.ret_time > end + EPS:  # type: ignore[operator]
        return (f"{who(run, c)} returned at {c.ret_time - c.call_time:g} s, after its "  # type: ignore[operator]
                f"deadline of {max(timeout, 0):g} s")
    return None


def _oracle_calls(run: "Run") -> list[Call]:
    """The history for the linearizability search: puts, get_batch calls, and each hook
    call as a look that found the sink empty somewhere since the last one."""
    out = []
    for c in run.calls:
        if c.kind in ("put", "get"):
            out.append(c)
        elif c.kind == "hook":
            out.append(Call(c.task, c.label, "empty", (), call=c.meta["since"], ret=c.call,
                            outcome=("return", None)))
    return out


def _linearizable(run: "Run") -> str | None:
    calls = _oracle_calls(run)
    for c in calls:
        if c.kind == "get" and c.ret is not None and c.outcome[:1] == ("return",) \
                and c.outcome[1] == [] and not _nan(c.args[1]) and c.args[1] > 0:
            limit = c.call_time + c.args[1]
            c.lo = next((e.step for e in run.sched.events[c.call:] if e.now >= limit - EPS),
                        c.ret)
    try:
        if fifo_order(calls) is not None:
            return None
    except Undecided:
        return None
    return _explain(run, calls)


def fifo_order(calls: list[Call]) -> list[Call] | None:
    """An order, one call at a time, in which a FIFO queue of items explains ``calls``
    (None: there is none).  ``put`` (args: the item) appends -- one interrupted by an
    injected exception may or may not have; ``get`` (args: max_items, timeout) returning a
    list takes the oldest items, ``[]`` only from an empty queue (any time for a NaN
    timeout), raising takes nothing; ``empty`` (after_empty_drain's call) needs an empty
    queue.  A ``get`` still waiting at the end must wait forever on an empty queue."""
    index = {id(c): i for i, c in enumerate(calls)}

    def step(state: tuple, c: Call):
        how, res = c.outcome
        if c.kind == "empty":
            if not state:
                yield state
            return
        if c.kind == "put":
            if how == "return":
                yield state + (index[id(c)],)
            elif c.meta.get("injected") is not None:
                yield state  # interrupted: it took effect or it did not
                yield state + (index[id(c)],)
            else:
                yield state
            return
        if how == "raise":
            yield state
            return
        if not res:
            if not state or _nan(c.args[1]):
                yield state
            return
        if len(res) <= len(state) and all(x is calls[i].args[0] for x, i in zip(res, state)):
            yield state[len(res):]

    def blocked(state: tuple, c: Call) -> bool:
        if c.kind != "get":
            return False
        timeout = c.args[1]
        return (_forever(timeout) or _nan(timeout)) and not state

    return linearize(calls, (), step, blocked)


def _explain(run: "Run", calls: list[Call]) -> str:
    gets = [c for c in calls if c.kind == "get" and c.outcome[:1] == ("return",)
            and isinstance(c.outcome[1], list)]
    seen: Counter = Counter(id(x) for c in gets for x in c.outcome[1])
    puts = [c for c in calls if c.kind == "put"]
    put_ids = Counter(id(c.args[0]) for c in puts)
    for c in gets:
        for x in c.outcome[1]:
            if seen[id(x)] > put_ids[id(x)]:
                return f"{x!r} came out more often than it was put (again in {who(run, c)})"
    order: dict[int, int] = {}
    for c in gets:
        for x in c.outcome[1]:
            order.setdefault(id(x), c.ret or 0)
    by_task: dict[int, list[Call]] = {}
    for p in puts:
        by_task.setdefault(p.task, []).append(p)
    pos = {id(x): (k, j) for k, c in enumerate(gets) for j, x in enumerate(c.outcome[1])}
    for mine in by_task.values():
        out = [p for p in mine if id(p.args[0]) in pos and put_ids[id(p.args[0])] == 1]
        for a, b in zip(out, out[1:]):
            if pos[id(b.args[0])] < pos[id(a.args[0])]:
                return (f"{who(run, a)} and then {who(run, b)} came out in the other order: "
                        "items of one producer come out in the order it put them")
    for c in calls:  # a look that found nothing while an item sat in the sink throughout
        if c.kind == "empty" or (c in gets and c.outcome[1] == []):
            for p in puts:
                if _queued_throughout(p, c, gets, put_ids):
                    item = (f"{p.args[0]!r} ({who(run, p)}, returned at step {p.ret}) had "
                            "come out of no batch")
                    if c.kind == "empty":
                        return (f"after_empty_drain was called although {item}: the hook "
                                "runs only after a drain that found the sink empty")
                    return (f"{who(run, c)} returned [] although {item}: each item comes "
                            "out exactly once, and [] only when nothing is available")
    final = [c for c in gets if c.meta.get("final") and c.outcome[1] == []]
    if final:
        lost = [p for p in puts if p.outcome[:1] == ("return",) and id(p.args[0]) not in pos
                and put_ids[id(p.args[0])] == 1]
        if lost:
            return (f"{lost[0].args[0]!r} ({who(run, lost[0])}) never came out: after the "
                    "producers finished, the sink said it was empty")
    results = "; ".join(f"{who(run, c)} → " + (
        "still waiting" if c.ret is None else repr(c.outcome[1]) if c.outcome[0] == "return"
        else type(c.outcome[1]).__name__) for c in calls if c.kind == "get")
    return ("no order of these calls, one at a time, on a FIFO queue gives these results "
            f"({results}): each batch is the oldest 1..max_items items, [] only when nothing "
            "is there")


def _queued_throughout(p: Call, c: Call, gets: list[Call], put_ids: Counter) -> bool:
    """Whether the item of put ``p`` was in the sink during all of call ``c`` could take
    effect: put before then, and taken by no batch that began before ``c`` ended."""
    x = p.args[0]
    start = max(c.call, c.lo)  # a [] with a timeout takes effect at its deadline at the earliest
    if p.outcome[:1] != ("return",) or put_ids[id(x)] != 1 or p.ret is None or p.ret >= start:
        return False
    end = c.ret if c.ret is not None else math.inf
    return not any(g.call <= end and any(y is x for y in g.outcome[1]) for g in gets)


def _wakeups(run: "Run") -> str | None:
    if run.count0 != 0:
        return f"wakeups_scheduled is {run.count0!r} on a new sink: it starts at 0"
    made = run.wakeups
    for w in made:
        if w.bypassed:
            return (f"{who(run, w.put)} called the event loop's own call_soon_threadsafe, not "
                    "that of the object given to bind_loop: wakeups go through the given object")
    if run.sc.hook is not None:
        problem = _one_per_cycle(run, made) or _cycle_opened(run, made)
        if problem:
            return problem
    if any(c.kind == "put" and c.ret is None for c in run.calls):
        return None
    try:
        count = run.sink.wakeups_scheduled
    except BaseException as exc:  # noqa: BLE001
        return f"reading wakeups_scheduled raised {type(exc).__name__}: {exc}"
    ok = sum(1 for w in made if not w.raised)
    if not (isinstance(count, int) and ok <= count <= len(made)):
        return (f"wakeups_scheduled is {count!r} but put() called call_soon_threadsafe "
                f"{len(made)} time(s): it counts the wakeups scheduled")
    return None


def asleep_again(run: "Run") -> str | None:
    """The loop is about to sleep.  A consumer that a stale wakeup woke, and that found
    nothing, must have called the hook again before it sleeps again: the hook follows every
    empty drain, on every turn of get_batch's loop."""
    if run.sc.hook is None or run.stale is None or run.getting is not run.stale[0]:
        return None
    get, stale = run.stale
    woke = next((r for r in run.resumes if r > stale), None)
    if woke is None or any(c.kind == "hook" and c.call >= woke for c in run.calls):
        return None
    return (f"a stale wakeup woke {who(run, get)} with nothing queued, and it went back to "
            "sleep without calling after_empty_drain again: the hook runs after every empty "
            "drain, on each turn of the loop, not only the first")


def _one_per_cycle(run: "Run", made: list[Wakeup]) -> str | None:
    pair = same_cycle(made, _arm_intervals(run, run.arms))
    if pair is None:
        return None
    a, b = pair
    return (f"{who(run, a.put)} and {who(run, b.put)} each called call_soon_threadsafe, and "
            "no after_empty_drain call (the consumer getting ready to sleep again) can lie "
            "between their decisions: at most one wakeup per cycle")


def _arm_intervals(run: "Run", arms: list[tuple[int, int | None]]) -> list[tuple[int, float]]:
    """Where each arm lies, in steps: ``hi`` None means "until its thread shows the arm is
    done": it calls or returns from something, or its loop sleeps in select().  Waiting for
    a lock shows nothing: an arm made under a lock waits there before it marks "no wakeup
    in flight", and a put may take that lock first, append and find a wakeup still in
    flight -- its item is then in the arm's second drain."""
    events = run.sched.events
    out: list[tuple[int, float]] = []
    for lo, hi in arms:
        if hi is None:
            task = events[lo].task
            hi = next((e.step for e in events[lo + 1:] if e.task == task and (
                e.kind in ("call", "return") or e.step in run.selects)), math.inf)
        out.append((lo, hi))
    return out


def _cycle_opened(run: "Run", made: list[Wakeup]) -> str | None:
    """A put that began after the consumer armed (which follows every return of the hook;
    a bind_loop only may) found "no wakeup in flight" unless another put had marked one
    since: either way some put called call_soon_threadsafe after the arm began.  None did:
    a lost wakeup, even if no consumer happened to be asleep to show it.  Not asked where
    a loop is closed: a put may then skip a call it knows would fail."""
    if run.sc.end == "close" or any(op[0] == "old_loop" for op in run.sc.setup):
        return None
    # not in a get_batch that then raised (a cancel may land before its arm) or never ended
    broken = [(g.call, math.inf if g.ret is None else g.ret) for g in run.calls
              if g.kind == "get" and g.outcome[:1] != ("return",)]
    arms = _arm_intervals(run, [(ret, None) for ret in run.hook_returns
                                if not any(lo <= ret <= hi for lo, hi in broken)])
    for p in run.calls:
        if p.kind != "put" or p.outcome[:1] != ("return",) or p.ret is None:
            continue
        if any(lo < p.ret and hi > p.call for lo, hi in arms):
            continue  # an arm under way meanwhile may still show the old cycle to this put,
            # and then that arm's second drain has its item
        before = [lo for lo, hi in arms if hi < p.call]
        if before and not any(w.step > max(before) for w in made):
            return (f"{who(run, p)} put an item after the consumer had armed, and no put "
                    "called call_soon_threadsafe since: the first put after an arm finds no "
                    "wakeup in flight, marks one and schedules it (a check and a mark split "
                    "across two steps let two puts each leave it to the other)")
    return None


def same_cycle(made: list[Wakeup], arms: list[tuple[int, float]]) -> tuple[Wakeup, Wakeup] | None:
    """Two wakeups whose puts decided to wake the consumer within one wakeup cycle.

    A put decides somewhere between its start and its call of ``call_soon_threadsafe``; a
    cycle ends when the consumer arms, somewhere in an interval of ``arms`` (after
    ``after_empty_drain`` returns and before its thread records anything else, or when
    ``bind_loop`` returns).  Two decisions share a cycle only if no placement of them and
    of an arm puts the arm between."""
    def apart(first: Wakeup, then: Wakeup) -> bool:
        return any(lo < then.step and hi > first.put.call for lo, hi in arms)

    for i, a in enumerate(made):
        for b in made[i + 1:]:
            if not apart(a, b) and not apart(b, a):
                return a, b
    return None
