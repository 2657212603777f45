"""P04 exploration: scenarios of the loop thread and other threads, run under control and
judged against a model of the contract.

``run`` executes one scenario: the setup thread (alone, first), the loop thread running
``run_sync(main, timeout)`` and its after-steps, and the other threads calling
``add_callback`` -- real threads, one at a time, under the explorer's scheduler, with the
virtual clock, the controlled selectors and descriptors of ``explore.io`` (the loop really
sleeps in its selector and a waker byte really wakes it), faults planned in OS calls.  The
run's events, sleeps, waker writes and descriptors are then judged by ``p04_judge``.
``explore`` draws scenarios (systematic shapes, every pair and triple of calls under every
schedule with one preemption, then Hypothesis from a fixed seed) and shrinks the first
failing one; ``replay`` runs the scenario of a token again.
"""
from __future__ import annotations

import logging
import os
import sys
import types
from dataclasses import replace
from typing import Any

from workbook.explore import driver, foreign, io
from workbook.explore.bounded import Choices
from workbook.explore.driver import Outcome, Report
from workbook.explore.oracle import reachable
from workbook.explore.p04_draw import candidates, pairs, strategy, systematic, triples
from workbook.explore.p04_env import Logged, patch
from workbook.explore.p04_judge import Arrival, Observed, Seen, SeenWait, judge
from workbook.explore.p04_program import Ctx, _passes
from workbook.explore.p04_threads import cross_close, cross_op, loop_body, setup_body
from workbook.explore.p04_scenario import Scenario
from workbook.explore.sched import DONE, WAITING, Abandon, Scheduler

PROBLEM = "p04"
DEFAULT_EXAMPLES = 120
DEFAULT_SEED = 4
SCHEDULES = 2

#: The readiness waits a loop sleeps in (``io``'s names for them).
READINESS = ("select()", "select.select()", "poll()", "epoll.poll()")


class Fault(Exception):
    """An ordinary exception planned in an OS call."""


FAULTS = {"OSError": lambda: OSError(12, "Cannot allocate memory"),
          "KeyboardInterrupt": KeyboardInterrupt, "Fault": lambda: Fault("injected")}


def load(path: str | os.PathLike) -> Any:
    """A private copy of the learner's module: threads' identity, locks, clock, selectors
    and descriptors controlled."""
    return driver.load(path, PROBLEM, patch=patch)


def _outcome(sc: Scenario, **fields: Any) -> Outcome:
    return Outcome(sc, PROBLEM, **fields)


class _Scheduler(Scheduler):
    """The explorer's scheduler, where only a call of another thread into the learner's file
    stops inside its lines (``opcodes``: looking up ``self._callbacks`` and appending to
    what it found are one line).  The loop thread keeps its usual points (locks, clock,
    selector): what is searched is where the other thread stops."""

    def _trace(self, frame, event, arg):  # type: ignore[no-untyped-def]
        if self.opcodes:
            task = self.task()
            if task is None or task.index < 2:
                return None
        return super()._trace(frame, event, arg)

    def _midline(self, what: str) -> None:
        task = self.task()  # (on 3.12+ the points are the code's, whichever thread runs it)
        if task is not None and task.index >= 2:
            super()._midline(what)


def run(module: Any, sc: Scenario, choices: Choices | None = None) -> Outcome:
    """Run ``sc`` once against ``module`` (a controlled copy, see ``load``) and judge it."""
    if choices is None and sc.script is not None:
        choices = Choices(list(sc.script), sc.bound)
    sched = _Scheduler(sc.seed, preempt=sc.preempt,
                       line_preempt=0.05 if sc.lines or sc.opcodes else 0.0, jump=sc.jump,
                       learner_files=frozenset({module.__file__}), choices=choices,
                       opcodes=sc.opcodes)
    names = ["setup", "loop"] + [f"T{n}" for n in range(1, len(sc.threads) + 1)]
    index = {name: i for i, name in enumerate(names)}
    planned = []
    for who, kind, n, exc in sc.faults:
        made = FAULTS[exc]

        def make(made: Any = made, label: str = f"{exc} (injected)") -> BaseException:
            got = made()
            got._p04_label = "injected"
            return got
        planned.append(io.Fault(index.get(who, -1), kind, n, make))
    world = io.attach(sched, planned)
    events: dict[str, list[Seen]] = {name: [] for name in names}
    token = object()  # the other threads wait on it until the loop exists

    def who() -> str:
        task = sched.task()
        return task.name if task is not None else "controller"

    def rec(text: str, kind: str = "info") -> None:
        task = sched.task()
        if task is None or task.state == DONE:
            raise Abandon
        if text.startswith(("IOLoop()", "add_callback(x")) and task.index != 1:
            kind = "call"
        event = sched.record(text, kind=kind)
        events[task.name].append(Seen(event.step, sched.now, text))
        sched.progress()

    def lag(seconds: float) -> None:
        sched.now += seconds

    ctx = Ctx(module, rec, lag, sc.subs, who)

    def logged(record: logging.LogRecord) -> None:
        task = sched.task()
        if task is None or record.levelno < logging.WARNING:
            return
        exc = record.exc_info[1] if record.exc_info else None
        label = ctx.show_exc(exc) if exc is not None else ""
        event = sched.record(f"logs {label or record.getMessage()[:40]}", kind="info")
        events[task.name].append(Seen(event.step, sched.now, event.text, label))

    def guarded(body: Any) -> Any:
        def run_body() -> None:
            try:
                body()
            except Abandon:
                raise
            except BaseException as exc:  # noqa: BLE001 - the harness's own mistake
                if _passes(exc):
                    raise
                sched.crash = exc
        return run_body

    def named() -> None:
        """Name the loop's descriptors, so that the timeline shows what moves on them."""
        for r in world.resources:
            if r.closed is None and not r.named:
                label = "loop's selector" if r.kind in ("selector", "epoll", "poll") \
                    else f"the loop's {r.kind} fd {r.fd}"
                r.name, r.named = label, True

    def setup() -> None:
        setup_body(ctx, sc.made_by, sc.pre)
        named()

    ready = [sc.made_by != "loop"]  # the loop exists (or failed to be made)

    def made() -> None:
        named()
        ready[0] = True
        sched.wake(token)

    def loop_thread() -> None:
        try:
            loop_body(ctx, sc, made)
        finally:
            made()

    def other(ops: list[list[Any]]) -> Any:
        def body() -> None:
            task = sched.task()
            while not ready[0]:
                sched.block(task, token, None, what="waits for the loop")
            if ctx.loop is None:
                return
            for delay, op in ops:
                if delay:
                    sched.record(f"lets {delay:g} s pass", where=False)
                    sched.point()
                    sched.block(task, "delay", sched.now + delay, what="delay")
                cross_op(ctx, op)
            cross_close(ctx)
        return body

    bodies = [("setup", guarded(setup)), ("loop", guarded(loop_thread))] + [
        (f"T{n}", guarded(other(ops))) for n, ops in enumerate(sc.threads, 1)]
    with Logged(logged):
        info = sched.run(bodies)
    if choices is not None:
        sc = replace(sc, script=[c for c, _, _ in choices.trail], bound=choices.bound)
    out = _outcome(sc, events=sched.events, names=foreign.columns(sched, names))
    try:
        if sched.crash is not None:
            out.error = sched.crash
            return out
        if isinstance(_raised_not_implemented(events), NotImplementedError):
            out.error = NotImplementedError("not implemented")
            return out
        if info.ended == "uncontrolled":
            out.uncontrolled = info.uncontrolled("a lock, a wait, a selector or the clock")
            return out
        if info.ended == "spinning":
            out.problem = (f"the {info.spinner} thread kept running without ever sleeping: "
                           "it spins (a loop with nothing to do sleeps in its selector)")
            return out
        out.problem = judge(sc, _observed(sc, sched, world, ctx, events))
        if out.problem is None:
            out.problem = _released(ctx)
    finally:
        world.close_all()
    return out


def _released(ctx: Ctx) -> str | None:
    """A callback that has run is let go: a Future releases its callback list once it has
    run it, and a loop keeps no callback it has run."""
    ran = {id(c): c.__name__ for c in (r() for r in ctx.ran) if c is not None}
    if not ran:
        return None
    futures = list(ctx.futures.values())
    loops = [x for x in [ctx.loop, ctx.loop2] + [x for own in ctx.own.values() for x in own]
             if x is not None]
    saved = dict(vars(ctx))  # the program's own state (handles, ...) is not the learner's:
    vars(ctx).clear()        # a generator's frame that names it must not lead into it
    try:
        for roots, holder in ((futures, "a Future"), (loops, "the loop")):
            # not through frames and tracebacks: an exception kept in a Future keeps the
            # frames it left, which is Python's doing, not the loop's
            found = reachable(roots, set(ran), (types.FrameType, types.TracebackType))
            if found:
                name = ran[found[0]]
                what = ("its callback list is released after it has run"
                        if holder == "a Future" else "a callback is let go once it has run")
                return f"{name} has run, but {holder} still holds it: {what}"
    finally:
        vars(ctx).update(saved)
    return None


def _raised_not_implemented(events: dict[str, list[Seen]]) -> Any:
    for seen in events.values():
        for e in seen:
            if "NotImplementedError" in e.text:
                return NotImplementedError()
    return None


def _observed(sc: Scenario, sched: Scheduler, world: Any, ctx: Ctx,
              events: dict[str, list[Seen]]) -> Observed:
    """What the run did, for the judge: events, sleeps, additions, writes, descriptors."""
    waits = [SeenWait(w.start, w.end, w.seconds, w.ended, w.start_time, w.end_time)
             for w in world.waits if w.task == 1 and w.what in READINESS]
    arrivals: dict[str, Arrival] = {}
    writes = 0
    sends = [t for t in world.transfers if t.op == "send"]
    for name, seen in events.items():
        if name == "loop":
            continue
        for k, e in enumerate(seen):
            if not e.text.startswith("add_callback(x"):
                continue
            ret = next((r for r in seen[k + 1:] if r.log is None), None)
            x = e.text[len("add_callback("):].split(",")[0].rstrip(")")
            a = Arrival(x, name, _op_of(sc, name, x), e.step,
                        ret.step if ret is not None else float("inf"), e.time,
                        ret.time if ret is not None else float("inf"))
            index = sched.tasks[[t.name for t in sched.tasks].index(name)].index
            a.wrote = sum(1 for t in sends if t.task == index and e.step < t.step <= a.ret)
            writes += a.wrote
            arrivals[x] = a
    loop_sends = [t.step for t in sends if t.task == 1]
    loop_events = events.get("loop", [])
    loop_add_writes = 0
    for k, e in enumerate(loop_events):  # the loop thread's own add_callback calls
        if e.log is None and e.text.startswith("add_callback(cb"):
            end = next((r.step for r in loop_events[k + 1:] if r.log is None), float("inf"))
            loop_add_writes += sum(1 for s in loop_sends if e.step < s <= end)
    writes += loop_add_writes
    wakeups = None
    if ctx.loop is not None:
        try:
            wakeups = ctx.loop.wakeups_scheduled
        except Exception:  # noqa: BLE001 - unreadable: not judged
            wakeups = None
    texts = [e.text for seen in events.values() for e in seen]
    # a constructor that failed (an injected fault) may leave what it opened: not judged
    unmade = any(" raises " in t and t.startswith(("IOLoop()", "IOLoop.current()"))
                 for t in texts)
    all_closed = bool(ctx.made) and all(id(x) in ctx.closed for x in ctx.made) and not unmade
    open_fds = [f"{r.name} (opened by {sched.tasks[r.task].name})" for r in world.open()
                if r.task >= 0]
    return Observed(events, waits, arrivals, loop_sends, wakeups, writes, open_fds,
                    all_closed, _where(sched.tasks[1]),
                    _fault_in_loop(world, sched), bool(world.injected), loop_add_writes,
                    world.again_sentence(sched, "a second close() of the loop"))


def _op_of(sc: Scenario, thread: str, name: str) -> list[Any]:
    ops = sc.pre if thread == "setup" else [op for _, op in sc.threads[int(thread[1:]) - 1]]
    for op in ops:
        if op[0] == "add" and f"x{op[1]}" == name:
            return op
    raise KeyError(name)


def _where(task: Any) -> str:
    if task.state == WAITING:
        return f"it waits: {task.waiting_what}"
    if task.state == DONE:
        return "its work was over"
    return f"it was {task.state}"


def _fault_in_loop(world: Any, sched: Scheduler) -> tuple[int, BaseException] | None:
    for fault, exc, step in world.injected:
        if fault.task == 1:
            return step, exc
    return None


# ---- exploring (the driver's hooks) -------------------------------------------------------------

def probe(module: Any, report: Report) -> bool:
    """NotImplementedError while the core is not written; True (no extensions in P04)."""
    out = run(module, Scenario([["cb", 1, [], None], ["yield", ["moment"], True],
                                ["return", "0", "return"]]))
    driver.core_ran(out, report)
    return True


def reseed(sc: Scenario, seed: int) -> Scenario:
    return replace(sc, seed=seed, script=None, bound=0)


def from_data(data: dict[str, Any]) -> Scenario:
    return Scenario(**data)


def explore(path: str | os.PathLike, *, examples: int = DEFAULT_EXAMPLES,
            seed: int = DEFAULT_SEED, seconds: float | None = None) -> Report:
    return driver.explore(sys.modules[__name__], path, examples=examples, seed=seed,
                          seconds=seconds)


def replay(path: str | os.PathLike, text: str) -> Outcome:
    return driver.replay(sys.modules[__name__], path, text)


__all__ = ["PROBLEM", "run", "load", "probe", "explore", "replay", "strategy", "systematic",
           "pairs", "triples", "candidates", "reseed", "from_data"]
