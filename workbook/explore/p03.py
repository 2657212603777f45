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

import os
import sys
from dataclasses import replace
from typing import Any

from workbook.explore import driver, foreign, prims
from workbook.explore.bounded import Choices
from workbook.explore.driver import Outcome, Report
from workbook.explore.oracle import Call
from workbook.explore.p03_judge import judge, kept_alive
from workbook.explore.values import Item, OddEq
from workbook.explore.scenario import (BAD_CAPACITIES, Scenario, capacity_value, op_label,
                                       pairs, scenarios, systematic, timeout_value, triples)
from workbook.explore.sched import POLL_SPAN, POLL_WAKES, Abandon, Scheduler

PROBLEM = "p03"
#: The default exploration of ``./check.sh p03``: scenarios, and the seed they are drawn with.
DEFAULT_EXAMPLES = 150
DEFAULT_SEED = 3
#: Schedule seeds each systematic scenario (``scenario.systematic``) is run with.
SCHEDULES = 2


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

def run(module: Any, sc: Scenario, choices: Choices | None = None) -> Outcome:
    """Run ``sc`` once against ``module`` (a controlled copy, see ``load``) and judge it;
    with ``choices``, the scheduler's decisions come from them (a systematic run) and the
    outcome's scenario carries them, so that its token replays this very schedule."""
    if sc.capacity_as in BAD_CAPACITIES:
        return _refused(module, sc)
    learner = frozenset({module.__file__})
    fault = FAULT_TYPES.get(sc.fault or "")
    if choices is None and sc.script is not None:
        choices = Choices(list(sc.script), sc.bound)
    sched = Scheduler(sc.seed, preempt=sc.preempt, line_preempt=0.05 if sc.lines else 0.0,
                      faults=[lambda: fault("injected")] if fault else [],
                      spurious=sc.spurious, late=sc.late, jump=sc.jump,
                      fault_chance=1.0 if sc.late else 0.35,
                      learner_files=learner, choices=choices, polls=True, opcodes=sc.ops)
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
        before, locks_before = task.interrupted, task.locks_taken
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
        call.meta["locks_taken"] = task.locks_taken - locks_before
        call.ret = sched.record(shown, kind="return", where=False).step
        call.ret_time = sched.now
        del result
        sched.progress()

    def setup() -> None:
        try:
            box["q"] = module.BoundedBlockingQueue(capacity_value(sc))
        except (TypeError, ValueError) as exc:
            # The spec says "an int": a strict type check that refuses an int subclass
            # reads it one defensible way, so a refusal there is no error; a queue that
            # accepts one must work with it (the runs below judge that).
            if sc.capacity_as != "subclass":
                box["error"] = exc
            return
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc
            return
        _name_primitives(sched, box["q"])
        for spec in sc.preload:
            do(["put", spec, None, 0])

    def thread(ops: list[list[Any]]):
        def body() -> None:
            if "q" not in box:  # the constructor refused the capacity: nothing to call
                return
            for op in ops:
                do(op)
        return body

    bodies = [("setup", setup)] + [(f"T{n}", thread(ops)) for n, ops in enumerate(sc.threads, 1)]
    info = sched.run(bodies)
    if choices is not None:  # the decisions taken, to replay exactly this schedule
        sc = replace(sc, script=[c for c, _, _ in choices.trail], bound=choices.bound)
    out = _outcome(sc, events=sched.events,
                   names=foreign.columns(sched, [name for name, _ in bodies]))
    if "error" in box:
        out.error = box["error"]
        return out
    if "q" not in box:  # an int subclass refused by a strict type check: allowed
        return out
    if sched.crash is not None:
        out.error = sched.crash
        return out
    if info.ended == "uncontrolled":
        out.uncontrolled = info.uncontrolled("a lock, a wait or the clock")
        return out
    pending = {c.task for c in calls if c.ret is None}
    if info.ended == "spinning":
        out.problem = (f"{info.spinner} kept running without ever waiting: it spins (it "
                       "never parks while it cannot go on)")
        return out
    if info.ended == "polling":
        out.problem = (f"{info.spinner} woke up by itself {POLL_WAKES} times within "
                       f"{POLL_SPAN:g} s while nothing changed: it polls (sleeps a little "
                       "and looks again) instead of waiting until another thread wakes it")
        return out
    out.problem = judge(module, sc, calls, sched, pending)
    if out.problem is None:  # called here, where no local names an item any more
        out.problem = kept_alive(calls, _owned(module, box["q"]))
    return out


def _owned(module: Any, q: Any) -> list[Any]:
    """What the learner's code owns: the queue, and what its module and its classes keep
    (a class attribute or a module-level list is the queue's storage too)."""
    mine = [v for v in vars(module).values() if getattr(v, "__module__", None) == module.__name__]
    return [q] + [vars(v) if isinstance(v, type) else v for v in mine] + [
        v for k, v in vars(module).items()
        if not k.startswith("__") and isinstance(v, (list, dict, set, tuple))]


def _refused(module: Any, sc: Scenario) -> Outcome:
    """The constructor given a capacity that is not an int > 0 must refuse it."""
    out = _outcome(sc)
    try:
        module.BoundedBlockingQueue(capacity_value(sc))
    except (TypeError, ValueError):
        return out
    except NotImplementedError as exc:
        out.error = exc
        return out
    except BaseException as exc:  # noqa: BLE001 - any other outcome is the learner's
        out.problem = (f"BoundedBlockingQueue({sc.capacity_as}) raised {type(exc).__name__}; "
                       "a capacity that is not an int > 0 is refused with TypeError or "
                       "ValueError")
        return out
    out.problem = (f"BoundedBlockingQueue({sc.capacity_as}) was accepted: the capacity must "
                   "be an int > 0 (bool is not accepted)")
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


# ---- exploring (the driver's hooks) -------------------------------------------------------------

def probe(module: Any, report: Report) -> bool:
    """True when the extensions are implemented; NotImplementedError if the core is not."""
    core = run(module, Scenario(1, [], [[["put", "obj", None, 0], ["len", None, None, 0],
                                         ["take", None, None, 0]]], extensions=False))
    if not driver.core_ran(core, report):
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
    if sc.capacity_as == "subclass":
        yield variant(capacity_as="int")
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
