"""P04 exploration, the judgement of one run: the model of the contract (``p04_model``) runs
the same program along the run, its ``Driver`` (``p04_turns``) checking the events, sleeps and
wakeups as it goes; then what holds of the whole run:

- callbacks run in the order they were added, each in the first turn that begins after it
  was added (``_feasible``), from every thread;
- a waker write is made only by a call of another thread that found the list empty, and
  ``wakeups_scheduled`` counts exactly the writes add_callback made (``_writes``);
- add_callback from another thread returns, even on a closed loop, and a closed loop closes
  every descriptor it opened;
- every failing callback was logged.

After a BaseException (or an injected fault) has left a turn, the rest of the events are open;
``_relaxed`` checks what still holds then.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

from workbook.explore import p04_model as model
from workbook.explore.p04_model import Model
from workbook.explore.p04_program import Ctx, Passing, Relax
from workbook.explore.p04_threads import after_op, loop_body, make_loop
from workbook.explore.p04_turns import (Arrival, Driver, End, Mismatch, Observed, Seen,
                                        SeenWait, _Bug)


# ---- the judgement ------------------------------------------------------------------------------

def judge(sc: Any, obs: Observed) -> str | None:
    """What, if anything, no correct implementation would have done in this run."""
    try:
        return _judge(sc, obs)
    except _Bug as bug:
        raise bug.args[0]


def _judge(sc: Any, obs: Observed) -> str | None:
    if obs.closed_again:  # the root cause of whatever follows (an EBADF, say)
        return obs.closed_again
    first: Mismatch | None = None
    for reading in _readings(sc):
        try:
            driver = _exact(sc, obs, **reading)
            break
        except Mismatch as exc:
            first = first or exc
    else:
        return str(first)
    try:
        if not driver.relaxed:  # after a BaseException left a turn, its rest may be lost
            _feasible(driver)
        _writes(driver, obs)
        _resources(obs)
    except Mismatch as exc:
        return str(exc)
    return None


def _readings(sc: Any) -> list[dict[str, bool]]:
    """The readings of the contract a run may follow, tornado's first (``Model``'s flags).
    A BaseException from a callback may also be logged (as asyncio logs it); a NaN delay or
    timeout may also never fall due; run_sync's timeout falling due after main's Future is
    done may also leave the stop to that Future's callback."""
    import itertools
    import json
    text = json.dumps([sc.main, sc.subs, sc.threads, sc.pre, sc.timeout])
    choices = {"log_base": any(f'"{kind}"' in text for kind in ("KI", "SE", "BE")),
               "nan_never": '"nan"' in text,
               "done_stops_later": sc.timeout is not None}
    names = list(choices)
    return [dict(zip(names, flags)) for flags in itertools.product(
        *[(False, True) if choices[name] else (False,) for name in names])]


def _exact(sc: Any, obs: Observed, log_base: bool = False, nan_never: bool = False,
           done_stops_later: bool = False) -> Driver:
    """Run the model along the run (under one reading); raise Mismatch at the first
    difference."""
    for a in obs.arrivals.values():  # what an earlier reading matched them with
        a.entry = a.turn = None
    driver = Driver(obs)
    m = Model(driver)
    m.log_base, m.nan_never, m.done_stops_later = log_base, nan_never, done_stops_later
    driver.m = m
    ctx = Ctx(model, driver.rec, driver.lag, sc.subs, lambda: m.thread)
    driver.ctx = ctx
    previous, Model.active = Model.active, m
    try:
        try:
            _threads(sc, obs, ctx, m)
        except _Unmade:
            return driver
        m.thread = "loop"
        try:
            loop_body(ctx, sc)
        except End:
            pass
        except Relax as relax:
            _relaxed(sc, obs, driver, ctx, relax)
            return driver
        rest = driver._next()
        if rest is not None and obs.relax_at is not None and rest.step >= obs.relax_at[0]:
            _relaxed(sc, obs, driver, ctx, Relax(obs.relax_at[1]))
            return driver
        if rest is not None:
            raise Mismatch(f"the loop thread did more than the contract has it do: {rest.text}")
        _logs(driver, obs)
    finally:
        Model.active = previous
    return driver


class _Unmade(Passing):
    """The loop could not be made (a fault injected in an OS call of its constructor)."""


def _unmade(obs: Observed) -> None:
    """A fault in an OS call of the constructor comes out of IOLoop() as itself; then
    nothing else happens (the other threads find no loop)."""
    for who in ("setup", "loop"):
        first = [e.text for e in obs.events.get(who, [])[:2]]
        if first[:1] == ["IOLoop()"] and first[1:2] and first[1].startswith("IOLoop() raises"):
            if not first[1].endswith("injected"):
                raise Mismatch(f"{first[1]}: only an injected fault may stop IOLoop(), and "
                               "then it comes out as itself")
            raise _Unmade


def _threads(sc: Any, obs: Observed, ctx: Ctx, m: Model) -> None:
    """The setup and the other threads: what each must have recorded."""
    _unmade(obs)
    m.thread = "setup"
    if sc.made_by == "setup":
        got = [e.text for e in obs.events.get("setup", []) if e.log is None]
        make_loop(_Quiet(ctx))
        want = ["IOLoop()", "IOLoop() made the loop"] + _adds(sc.pre)
        _same("the setup thread", want, got, obs)
    for n, ops in enumerate(sc.threads, 1):
        name = f"T{n}"
        want = []
        seen_current = False
        for _, op in ops:
            if op[0] == "current":
                want.append("IOLoop.current() is " + ("its loop #1" if seen_current
                                                       else "a new loop (its #1)"))
                seen_current = True
            else:
                want += _adds([op])
        if seen_current:
            want.append("closes its own loop")
        got = [e.text for e in obs.events.get(name, []) if e.log is None]
        _same(name, want, got, obs)


class _Quiet:
    """A Ctx whose records are not compared (the setup's, compared as a whole instead)."""

    def __init__(self, ctx: Ctx) -> None:
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def rec(self, text: str) -> None:
        pass

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_ctx":
            object.__setattr__(self, name, value)
        else:
            setattr(self._ctx, name, value)


def _adds(ops: list[list[Any]]) -> list[str]:
    out = []
    for op in ops:
        args = op[2]
        shown = "" if not args else (f", {args[1]}" if args[0] == "v" else f", key={args[1]}")
        out += [f"add_callback(x{op[1]}{shown})", "add_callback returns"]
    return out


def _same(who: str, want: list[str], got: list[str], obs: Observed) -> None:
    for k, text in enumerate(want):
        if k >= len(got):
            raise Mismatch(f"{who} stopped before: {text} (the run ended with it waiting; "
                           f"last: {got[-1] if got else 'nothing'})")
        if got[k] != text:
            if got[k].startswith("add_callback raises"):
                raise Mismatch(f"{who}'s add_callback raised ({got[k][20:]}): from another "
                               "thread it must always return (on a closed loop the callback "
                               "is dropped)")
            raise Mismatch(f"{who}: the contract has: {text}; the run shows: {got[k]}")


def _logs(driver: Driver, obs: Observed) -> None:
    seen = Counter(e.log for e in obs.events.get("loop", []) if e.log is not None)
    anonymous = seen.pop("", 0)
    for label in driver.expect_logs:
        if seen[label] > 0:
            seen[label] -= 1
        elif anonymous > 0:
            anonymous -= 1
        else:
            raise Mismatch(f"{label} was raised by a callback and never logged: a failing "
                           "callback is logged (logging) and the loop goes on")


def _relaxed(sc: Any, obs: Observed, driver: Driver, ctx: Ctx, relax: Relax) -> None:
    """A BaseException (or an injected fault) left the loop: what follows is open, except
    that run_sync lets that very exception out (if any BaseException), the thread gets its
    current loop back, and the loop still works and closes."""
    driver.relaxed = True  # one way out is enough
    exc = relax.args[0] if relax.args else None
    events = driver.ev
    k = driver.i
    while k < len(events) and not events[k].text.startswith(("run_sync ", "IOLoop() raises")):
        k += 1
    if k < len(events) and exc is not None and not isinstance(exc, Exception):
        text = events[k].text
        want = ctx.show_exc(exc)
        if text.startswith("run_sync raises") and not text.endswith(want) \
                and _is_base(text):
            raise Mismatch(f"{want} was on its way out of the loop, but run_sync raised "
                           f"{text[16:]}")
    if k >= len(events) or (driver.faulted and ctx.phase >= 0):
        return  # (a fault in an after-step, in a constructor say: the model made what failed)
    driver.i = k + 1
    m = driver.m
    m.thread = "loop"
    driver.loose = True  # time and leftovers of the broken turn are open from here on
    loop = ctx.loop
    if loop is not None:
        loop.stopped = loop.running = False
        loop.pending.clear()
    try:
        for op in sc.after[ctx.phase + 1:]:
            if op[0] == "again":
                _again(driver, ctx, op)
            else:
                after_op(ctx, op)
    except Relax:  # the fault injected comes later: from there on, nothing is exact
        return


def _again(driver: Driver, ctx: Ctx, op: list[Any]) -> None:
    """run_sync again after a BaseException left the loop: what it returns is open (a
    callback or a timeout left over from the broken run may stop it early), but it runs a
    turn: main2 starts, or a leftover callback raises its BaseException, or a fault."""
    events = driver.ev
    k = driver.i + 1  # past its own "run_sync(main, ...)"
    ran = False
    while k < len(events) and not events[k].text.startswith("run_sync "):
        ran = ran or events[k].text.startswith("main2")
        k += 1
    text = events[k].text if k < len(events) else ""
    if ran or text.endswith("injected") or _is_base(text):
        driver.i = k + 1
        return
    raise Mismatch("after an exception left start(), run_sync did not run the loop again ("
                   + (text or "it never returned") + "): the loop must stay usable")


def _is_base(text: str) -> bool:
    return any(name in text for name in ("KeyboardInterrupt", "SystemExit", "Cancelled"))


def _feasible(driver: Driver) -> None:
    """Callbacks run first in first out, each in the first turn after it was added: some
    instant of each append and of each turn's start, inside what the run saw of them, puts
    them in the order they ran."""
    seq: list[tuple[str, float, float]] = []
    for n, turn in enumerate(driver.turns):
        for entry in turn.order:
            seq.append((entry.name or "a callback", entry.lo, entry.hi))
        seq.append((f"turn {n + 2}", turn.lo, turn.hi))
    ran = len(seq)
    loop = driver.loop
    for entry in (loop.pending if loop is not None else []):  # never ran: after every turn
        seq.append((entry.name or "a callback", entry.lo, entry.hi))
    for a in driver.obs.arrivals.values():
        if a.entry is None:
            seq.append((a.name, a.call, a.ret))
    for j in range(len(seq)):
        for i in range(min(j, ran)):  # those that never ran are in no order among themselves
            if seq[j][2] <= seq[i][1]:
                raise Mismatch(_order_message(seq[i][0], seq[j][0]))


def _order_message(first: str, second: str) -> str:
    if second.startswith("turn"):
        return (f"{first} was added after {second} had begun, yet ran in it (or earlier): a "
                "callback runs on a later turn, never in the turn that adds it")
    if first.startswith("turn"):
        return (f"{second} was added before {first} began, yet did not run in it: a turn "
                "runs every callback queued when it began")
    return (f"{second} was added before {first} but ran after it: callbacks run in the order "
            "they were added")


def _writes(driver: Driver, obs: Observed) -> None:
    """Only a call from another thread that found the list empty writes to the waker; each
    write counts in wakeups_scheduled; the loop thread's own calls never write."""
    ev = driver.ev
    for k, seen in enumerate(ev):
        if seen.log is None and seen.text.startswith("add_callback(cb"):
            end = next((e.step for e in ev[k + 1:] if e.log is None), math.inf)
            if any(seen.step < s <= end for s in obs.loop_sends):
                raise Mismatch(f"the loop thread's own {seen.text} wrote to the waker: calls "
                               "from the loop thread never write to it")
    for a in obs.arrivals.values():
        if not a.wrote or a.turn is None:
            continue
        before = a.turn.order[:a.turn.order.index(a.entry)]
        if any(e.visible or e.hi <= a.call for e in before):
            first = next(e.name for e in before if e.visible or e.hi <= a.call)
            raise Mismatch(f"{a.thread}'s add_callback({a.name}) wrote to the waker although "
                           f"{first} was already queued: a wakeup is written only when the "
                           "list was empty")
    # The writes seen inside add_callback calls count; the loop thread's other writes (its
    # own add_callback calls inside the loop, or a stop() that writes) may or may not.
    others = len(obs.loop_sends) - obs.loop_add_writes
    if obs.wakeups is not None and not obs.writes <= obs.wakeups <= obs.writes + others:
        raise Mismatch(f"wakeups_scheduled is {obs.wakeups!r}, but add_callback wrote to the "
                       f"waker {obs.writes} time(s): each write counts, and only writes")


def _resources(obs: Observed) -> None:
    if obs.all_closed and obs.open_fds:
        raise Mismatch("every loop was closed, but " + ", ".join(obs.open_fds)
                       + " still open: close() releases every descriptor the loop opened")


__all__ = ["judge", "Observed", "Seen", "Arrival", "SeenWait", "Mismatch"]
