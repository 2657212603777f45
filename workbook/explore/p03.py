"""P03 exploration: scenarios against a model of the bounded queue.

``run`` executes one scenario under the scheduler and judges it; ``explore`` lets
Hypothesis draw scenarios from a fixed seed and shrink the first failing one; ``replay``
runs the scenario of a token again.  What a run must satisfy (the P03 contract):

- linearizability against the sequential queue below (FIFO, capacity, shutdown of both
  kinds, ``offer``/``poll`` timeouts, ``len``), each call taking effect at one instant
  between its call and its return, a timed-out call not before its deadline;
- every call still waiting at the end is one the model says cannot go on (no thread asleep
  that could go on), and no call waits past its deadline or gives up before it;
- an exception raised inside a wait leaves its call, unchanged, with that very exception;
- ``put(None)``/``offer(None)`` are refused without waiting; a taken item is not kept alive.
"""
from __future__ import annotations

import gc
import os
import sys
import weakref
from dataclasses import replace
from typing import Any

from workbook.explore import driver, prims
from workbook.explore.driver import Outcome, Report
from workbook.explore.oracle import Call, Undecided, linearize
from workbook.explore.scenario import Scenario, op_label, scenarios, systematic, timeout_value
from workbook.explore.sched import HORIZON, Abandon, Scheduler

PROBLEM = "p03"
#: The default exploration of ``./check.sh p03``: scenarios, and the seed they are drawn with.
DEFAULT_EXAMPLES = 150
DEFAULT_SEED = 3
#: Schedule seeds each systematic scenario (``scenario.systematic``) is run with.
SCHEDULES = 2
EPS = 1e-6


class Item:
    """A queue item that can be weakly referenced (to see whether the queue keeps it)."""
    __slots__ = ("n", "__weakref__")

    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return f"obj{self.n}"


class OddEq(Item):
    """An item equal to everything: a queue must hand back *this* object, not an equal one."""
    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"odd{self.n}"


class Interrupted(Exception):
    """An ordinary exception raised inside a wait."""


class Cancelled(BaseException):
    """A BaseException (not an Exception) raised inside a wait, as a cancellation would be."""


FAULT_TYPES: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt, "Interrupted": Interrupted, "Cancelled": Cancelled}


# ---- loading the learner's file under control ----------------------------------------------------

def load(path: str | os.PathLike) -> Any:
    """A private copy of the learner's module whose threading/time names are controlled."""
    return driver.load(path, PROBLEM)


def _outcome(sc: Scenario, **fields: Any) -> Outcome:
    return Outcome(sc, PROBLEM, **fields)


# ---- one run ----------------------------------------------------------------------------------

def run(module: Any, sc: Scenario) -> Outcome:
    """Run ``sc`` once against ``module`` (a controlled copy, see ``load``) and judge it."""
    learner = frozenset({module.__file__})
    fault = FAULT_TYPES.get(sc.fault or "")
    sched = Scheduler(sc.seed, preempt=sc.preempt, line_preempt=0.05 if sc.lines else 0.0,
                      faults=[lambda: fault("injected")] if fault else [],
                      spurious=sc.spurious, late=sc.late, jump=sc.jump,
                      fault_chance=1.0 if sc.late else 0.35,
                      learner_files=learner)
    calls: list[Call] = []
    box: dict[str, Any] = {}
    counter = [0]

    def make(spec: str) -> Any:
        if spec in ("obj", "odd"):
            counter[0] += 1
            return (Item if spec == "obj" else OddEq)(counter[0])
        return {"0": 0, "False": False, "''": "", "None": None}[spec]

    def do(op: list[Any]) -> None:
        task = sched.task()
        kind, arg, timeout_spec, delay = op
        if delay:
            sched.record(f"lets {delay:g} s pass before its next call", where=False)
            sched.point()
            sched.block(task, "delay", sched.now + delay, what="delay")
        value = make(arg) if kind in ("put", "offer") else None
        timeout = timeout_value(timeout_spec)
        label = op_label([kind, arg, timeout_spec, 0], item_name=repr(value))
        event = sched.record(f"calls {label}", kind="call", where=False)
        call = Call(task.index, label, kind, (value, timeout, arg), call=event.step,
                    call_time=sched.now)
        calls.append(call)
        before = task.interrupted
        sched.progress()
        q = box["q"]
        try:
            if kind == "put":
                result = q.put(value)
            elif kind == "take":
                result = q.take()
            elif kind == "offer":
                result = q.offer(value, timeout)
            elif kind == "poll":
                result = q.poll(timeout)
            elif kind == "shutdown":
                result = q.shutdown(immediate=bool(arg))
            else:
                result = len(q)
            call.outcome = ("return", result)
            shown = f"{label} returns {result!r}"
        except Abandon:
            raise
        except BaseException as exc:  # noqa: BLE001 - every outcome is judged by the model
            if task.state == "done":  # the run is over; whatever this is, it came later
                raise Abandon from None
            exc.__traceback__ = None
            call.outcome = ("raise", exc)
            shown = f"{label} raises {type(exc).__name__}" + (f": {exc}" if str(exc) else "")
            result = None
        if task.interrupted is not None and task.interrupted is not before:
            call.meta["injected"] = task.interrupted
        call.ret = sched.record(shown, kind="return", where=False).step
        call.ret_time = sched.now
        del result
        sched.progress()

    def setup() -> None:
        try:
            box["q"] = module.BoundedBlockingQueue(sc.capacity)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc
            return
        _name_primitives(sched, box["q"])
        for spec in sc.preload:
            do(["put", spec, None, 0])

    def thread(ops: list[list[Any]]):
        def body() -> None:
            for op in ops:
                do(op)
        return body

    bodies = [("setup", setup)] + [(f"T{n}", thread(ops)) for n, ops in enumerate(sc.threads, 1)]
    info = sched.run(bodies)
    out = _outcome(sc, events=sched.events, names=[name for name, _ in bodies])
    if "error" in box:
        out.error = box["error"]
        return out
    if sched.crash is not None:
        out.error = sched.crash
        return out
    if info.ended == "uncontrolled":
        out.uncontrolled = (f"{info.spinner} ran for {3:g} s without reaching a lock, a wait "
                            "or the clock the explorer controls")
        return out
    pending = {c.task for c in calls if c.ret is None}
    if info.ended == "spinning":
        out.problem = (f"{info.spinner} kept running without ever waiting: it spins (it "
                       "never parks while it cannot go on)")
        return out
    out.problem = _judge(module, sc, calls, sched, pending)
    if out.problem is None:  # called here, where no local names an item any more
        out.problem = _kept_alive(calls)
    return out


def _name_primitives(sched: Scheduler, q: Any) -> None:
    fields = getattr(q, "__dict__", {})
    for attr, value in fields.items():
        if isinstance(value, prims.Lock):
            sched.names[id(value)] = f"self.{attr}"
    for attr, value in fields.items():
        if prims.is_controlled(value) and id(value) not in sched.names:
            sched.names[id(value)] = f"self.{attr}"
            inner = getattr(value, "_lock", None)
            if inner is not None and id(inner) not in sched.names:
                sched.names[id(inner)] = f"self.{attr}"


# ---- the judgement ------------------------------------------------------------------------------

def _huge(timeout: float | None) -> bool:
    return timeout is not None and timeout >= HORIZON


def _judge(module: Any, sc: Scenario, calls: list[Call], sched: Scheduler,
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
        who = ", ".join(f"T{c.task}'s {c.label}" for c in stuck)
        return (f"no order of these calls on a bounded queue of capacity {cap} ends with "
                f"{who} still waiting: a thread sleeps that could go on, or the results "
                f"are wrong ({results})")
    return (f"no order of these calls, one at a time, on a bounded queue of capacity {cap} "
            f"gives these results ({results})")


def _kept_alive(calls: list[Call]) -> str | None:
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
    for r, who, shown in refs:
        if r() is not None:
            if who.startswith("shutdown"):
                return (f"the queue still holds a reference to {shown}, which "
                        "shutdown(immediate=True) discarded: dropped items must be let go")
            return (f"the queue still holds a reference to {shown}, which {who} returned: "
                    "a taken slot must be cleared")
    return None


# ---- exploring (the driver's hooks) -------------------------------------------------------------

def probe(module: Any, report: Report) -> bool:
    """True when the extensions are implemented; NotImplementedError if the core is not."""
    core = run(module, Scenario(1, [], [[["put", "obj", None, 0], ["len", None, None, 0],
                                         ["take", None, None, 0]]], extensions=False))
    if isinstance(core.error, NotImplementedError):
        raise core.error
    if core.uncontrolled:
        report.uncontrolled = core.uncontrolled
        return False
    for op in (["offer", "obj", 0, 0], ["poll", None, 0, 0], ["shutdown", False, None, 0]):
        try:
            out = run(module, Scenario(1, [], [[op]]))
        except NotImplementedError:  # an extension not attempted yet: explore the core
            return False
        if any("raises NotImplementedError" in e.text for e in out.events):
            return False
    return True


strategy = scenarios


def reseed(sc: Scenario, seed: int) -> Scenario:
    return replace(sc, seed=seed)


def from_data(data: dict[str, Any]) -> Scenario:
    return Scenario(**data)


def explore(path: str | os.PathLike, *, examples: int = DEFAULT_EXAMPLES,
            seed: int = DEFAULT_SEED, seconds: float | None = None) -> Report:
    """Draw up to ``examples`` scenarios (or for ``seconds``) from ``seed``; stop at the first
    counterexample and shrink it."""
    return driver.explore(sys.modules[__name__], path, examples=examples, seed=seed,
                          seconds=seconds)


def replay(path: str | os.PathLike, text: str) -> Outcome:
    return driver.replay(sys.modules[__name__], path, text)


def candidates(sc: Scenario):
    """Smaller or plainer scenarios than ``sc``, most promising first."""
    def variant(**changes: Any) -> Scenario:
        data = {**sc.__dict__, **changes}
        data["threads"] = [[list(op) for op in ops] for ops in data["threads"]]
        data["preload"] = list(data["preload"])
        return Scenario(**data)

    if len(sc.threads) > 1:
        for i in range(len(sc.threads)):
            yield variant(threads=sc.threads[:i] + sc.threads[i + 1:])
    for i, ops in enumerate(sc.threads):
        if len(ops) > 1:
            for j in range(len(ops)):
                yield variant(threads=sc.threads[:i] + [ops[:j] + ops[j + 1:]] + sc.threads[i + 1:])
    for j in range(len(sc.preload)):
        yield variant(preload=sc.preload[:j] + sc.preload[j + 1:])
    if sc.fault:
        yield variant(fault=None, late=False)
    if sc.spurious:
        yield variant(spurious=0)
    if sc.jump:
        yield variant(jump=0.0)
    if sc.lines:
        yield variant(lines=False)
    if sc.preempt:
        yield variant(preempt=0.0)
    if sc.capacity > 1:
        yield variant(capacity=1, preload=sc.preload[:1])
    for i, ops in enumerate(sc.threads):
        for j, op in enumerate(ops):
            plain = list(op)
            if plain[3]:
                plain[3] = 0
            elif plain[0] in ("put", "offer") and plain[1] not in ("obj", "None"):
                plain[1] = "obj"
            else:
                continue
            yield variant(threads=sc.threads[:i] + [ops[:j] + [plain] + ops[j + 1:]]
                          + sc.threads[i + 1:])
    for j, spec in enumerate(sc.preload):
        if spec != "obj":
            yield variant(preload=sc.preload[:j] + ["obj"] + sc.preload[j + 1:])
