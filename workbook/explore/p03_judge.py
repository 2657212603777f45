"""P03 exploration, the judgement of one run: its calls against a sequential model of the
bounded queue (linearizability), deadlines kept, nothing asleep that could go on, no taken
item kept alive.  ``p03.run`` records the calls; ``judge`` and ``kept_alive`` say what, if
anything, no correct queue would have done."""
from __future__ import annotations

import gc
import weakref
from typing import Any

from workbook.explore.oracle import Call, Undecided, linearize, reachable
from workbook.explore.scenario import Scenario
from workbook.explore.sched import HORIZON, Scheduler
from workbook.explore.sched import INSTANT as EPS  # times this close are one instant
from workbook.explore.values import Item


def _huge(timeout: float | None) -> bool:
    return timeout is not None and timeout >= HORIZON


def judge(module: Any, sc: Scenario, calls: list[Call], sched: Scheduler,
           pending: set[int]) -> str | None:
    shut_down = getattr(module, "ShutDown", None)
    for c in calls:
        injected = c.meta.get("injected")
        name = f"T{c.task}'s {c.label}" if c.task else f"the setup's {c.label}"
        if injected is not None:
            if c.ret is None:
                return (f"{type(injected).__name__} was raised inside the wait of {name}, but "
                        "the call went on waiting: the exception must propagate")
            if c.outcome[0] != "raise" or c.outcome[1] is not injected:
                got = (f"returned {c.outcome[1]!r}" if c.outcome[0] == "return"
                       else f"raised {type(c.outcome[1]).__name__}")
                return (f"{type(injected).__name__} was raised inside the wait of {name}, but "
                        f"the call {got}: the exception must propagate unchanged")
            continue
        if c.ret is None:
            continue
        value, timeout, spec = c.args
        if c.outcome[0] == "raise":
            exc = c.outcome[1]
            if isinstance(exc, NotImplementedError):
                raise exc
            allowed: tuple[type[BaseException], ...] = ()
            if shut_down is not None:
                allowed += (shut_down,)
            if c.kind in ("put", "offer") and value is None:
                allowed += (TypeError, ValueError)
                if isinstance(exc, (TypeError, ValueError)) and c.meta.get("locks_taken"):
                    return (f"{name} took a lock before it refused None: None is rejected "
                            "before any locking (a put(None) must not wait while another "
                            "thread holds the queue's lock)")
            if c.kind in ("offer", "poll") and timeout is not None and (timeout < 0 or _huge(timeout)):
                allowed += (ValueError, OverflowError)
            if not isinstance(exc, allowed):
                return f"{name} raised {type(exc).__name__}: {exc}"
        if c.kind in ("offer", "poll") and timeout is not None and not _huge(timeout):
            limit = c.call_time + max(timeout, 0.0)
            if c.ret_time > limit + EPS:  # type: ignore[operator]
                return (f"{name} returned at {c.ret_time - c.call_time:g} s, after its "
                        f"deadline of {max(timeout, 0):g} s")
            gave_up = c.outcome[0] == "return" and \
                c.outcome[1] is (False if c.kind == "offer" else None)
            if gave_up and timeout > 0:
                if c.ret_time < limit - EPS:  # type: ignore[operator]
                    return (f"{name} gave up at {c.ret_time - c.call_time:g} s, before its "
                            f"deadline of {timeout:g} s")
                c.lo = next((e.step for e in sched.events[c.call:]
                             if e.now >= limit - EPS), c.ret or 0)
    cap = sc.capacity
    index = {id(c): i for i, c in enumerate(calls)}

    def step(state: tuple, c: Call):
        items, closed = state
        value, timeout, spec = c.args
        kind = c.kind
        how, res = c.outcome
        if how == "raise" and c.meta.get("injected") is res:
            yield state
            return
        raised = how == "raise"
        if raised and not (shut_down is not None and isinstance(res, shut_down)):
            yield state  # a refused argument (checked above): no effect
            return
        if kind in ("put", "offer"):
            if value is None:
                return  # None must be refused
            if closed:
                if raised:
                    yield state
                return
            if raised:
                return
            if len(items) < cap and (kind == "put" or res is True):
                yield (items + (index[id(c)],), closed)
            elif kind == "offer" and res is False and len(items) >= cap and timeout is not None \
                    and not _huge(timeout):
                yield state
            return
        if kind in ("take", "poll"):
            if items:
                if not raised and res is calls[items[0]].args[0]:
                    yield (items[1:], closed)
                return
            if closed:
                if raised:
                    yield state
                return
            if kind == "poll" and not raised and res is None and timeout is not None \
                    and not _huge(timeout):
                yield state
            return
        if kind == "len":
            if not raised and res == len(items):
                yield state
            return
        if kind == "shutdown" and not raised:
            yield ((), True) if spec else (items, True)  # spec: immediate

    def blocked(state: tuple, c: Call) -> bool:
        items, closed = state
        value, timeout, spec = c.args
        if closed or c.meta.get("injected") is not None:
            return False
        forever = timeout is None or _huge(timeout)
        if c.kind == "put":
            return value is not None and len(items) >= cap
        if c.kind == "offer":
            return value is not None and forever and len(items) >= cap
        if c.kind == "take":
            return not items
        if c.kind == "poll":
            return forever and not items
        return False

    # take the setup's calls and those of the others apart in time: the setup ran alone
    final: list = []
    try:
        order = linearize(calls, ((), False), step, blocked, final=final)
    except Undecided:
        return None
    if order is None:
        return _explain(calls, cap)
    # items put, never taken and no longer queued were dropped by shutdown(immediate=True)
    kept = set(final[0][0]) if final else set()
    for i, c in enumerate(calls):
        if c.kind in ("put", "offer") and i not in kept and c.outcome[:1] == ("return",) \
                and c.outcome[1] is not False and isinstance(c.args[0], Item):
            c.meta["discarded"] = True
    return None


def _explain(calls: list[Call], cap: int) -> str:
    stuck = [c for c in calls if c.ret is None]
    results = "; ".join(
        f"T{c.task} {c.label} → " + ("still waiting" if c.ret is None else
                                    repr(c.outcome[1]) if c.outcome[0] == "return"
                                    else type(c.outcome[1]).__name__)
        for c in calls if c.task)
    if stuck:
        who = ", ".join((f"T{c.task}'s" if c.task else "the setup's") + f" {c.label}"
                        for c in stuck)
        return (f"no order of these calls on a bounded queue of capacity {cap} ends with "
                f"{who} still waiting: a thread sleeps that could go on, or the results "
                f"are wrong ({results})")
    return (f"no order of these calls, one at a time, on a bounded queue of capacity {cap} "
            f"gives these results ({results})")


def kept_alive(calls: list[Call], owned: list[Any]) -> str | None:
    """The first item a correct queue no longer holds that is still reachable from
    ``owned`` (the queue and the learner module's own objects): taken by take/poll, or
    discarded by ``shutdown(immediate=True)``.  An item kept alive by something else (an
    observer's snapshot of a finished call's frame, say) is not the queue's doing."""
    refs = []
    for c in calls:
        if c.kind in ("take", "poll") and c.outcome and c.outcome[0] == "return" \
                and isinstance(c.outcome[1], Item):
            refs.append((weakref.ref(c.outcome[1]), f"T{c.task}'s {c.label}", repr(c.outcome[1])))
    taken = {id(c.outcome[1]) for c in calls if c.kind in ("take", "poll") and c.outcome
             and c.outcome[0] == "return"}
    for c in calls:
        if c.meta.get("discarded") and id(c.args[0]) not in taken:
            refs.append((weakref.ref(c.args[0]), "shutdown(immediate=True)", repr(c.args[0])))
    for c in calls:  # drop the history's own references to the items
        c.outcome, c.args = (), (None, None, None)
    if not refs or all(r() is None for r, _, _ in refs):
        return None
    gc.collect()
    alive = {id(r()): (who, shown) for r, who, shown in refs if r() is not None}
    if not alive:
        return None
    for key in reachable(owned, set(alive)):
        who, shown = alive[key]
        if who.startswith("shutdown"):
            return (f"the queue still holds a reference to {shown}, which "
                    "shutdown(immediate=True) discarded: dropped items must be let go")
        return (f"the queue still holds a reference to {shown}, which {who} returned: "
                "a taken slot must be cleared")
    return None
