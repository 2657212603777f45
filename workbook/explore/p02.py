"""P02 exploration: the Cancel control channel and its selector loop under the scheduler.

``run`` executes one scenario (``p02_scenario``) with the learner's module loaded under
control -- threading and time from ``prims``, selectors, select, socket and os from ``io``
-- beside the explorer's network (``p02_net``), and judges it (``p02_judge``, ``p02_runs``
on the facts of ``p02_facts``): the control's state explained by some order of the calls,
every dial's result by what its connect did and by what was asked, deadlines kept, a cancel
seen without the clock moving, no thread asleep that could go on, no polling, at most one
bounded drain per wakeup, and every socket the loop owns unregistered, then closed.  The
driver's hooks (``probe``, ``strategy``, ``systematic``, ``pairs``, ``candidates``, ...)
let ``driver.explore`` search the space and ``driver.replay`` run one token again.
"""
from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from workbook.explore import bounded, driver, foreign, io, p02_net, prims
from workbook.explore.bounded import Choices
from workbook.explore.driver import Outcome, Report
from workbook.explore.oracle import Call
from workbook.explore.p02_judge import judge
from workbook.explore.p02_net import Dialled, Endpoints, late_dial
from workbook.explore.p02_scenario import (BAD_ADDRESSES, FLOOD, PRESSES, Scenario, candidates,
                                           from_data, op_label, pairs, reseed, scenarios,
                                           systematic, timeout_value, triples)
from workbook.explore.sched import DONE, READY, WAITING, Abandon, Scheduler

PROBLEM = "p02"
DEFAULT_EXAMPLES = 100
DEFAULT_SEED = 2
SCHEDULES = 1
#: Pairs and triples: one deviation from the default schedule at each point of the run
#: (a run of the loop has a hundred points; every schedule within one preemption would be
#: thousands), at most this many runs per scenario.
WALK = bounded.deviations
PER_SCENARIO = 12

strategy = scenarios
__all__ = ["PROBLEM", "load", "run", "probe", "explore", "replay", "strategy", "systematic",
           "pairs", "triples", "candidates", "reseed", "from_data"]


class Cancelled(BaseException):
    """A BaseException (not an Exception) raised inside a call, as a cancellation would be."""


def make_fault(kind: str, exc: str) -> Callable[[], BaseException]:
    if exc == "KeyboardInterrupt":
        return KeyboardInterrupt
    if exc == "Cancelled":
        return lambda: Cancelled("injected")
    return lambda: io.error(kind)


def load(path: str | os.PathLike) -> Any:
    """A private copy of the learner's module with threading, time and I/O controlled."""
    return driver.load(path, PROBLEM, patch=lambda ns: prims.patch(ns) + io.patch(ns))


# ---- one run ------------------------------------------------------------------------------------


@dataclass
class Record:
    """Everything the judge reads about one run."""
    sc: Scenario
    sched: Scheduler
    world: io.World
    calls: list[Call] = field(default_factory=list)
    dials: list[Dialled] = field(default_factory=list)
    spares: list[Dialled] = field(default_factory=list)
    twins: list[Any] = field(default_factory=list)
    control: Any = None
    reader: io.Resource | None = None
    writer: io.Resource | None = None
    eof: int | None = None  # step at which the writer was closed by a thread
    ended: str = "finished"
    final_stop: bool | None = None  # stop_requested once the run was over


def _short(value: Any) -> str:
    if isinstance(value, list) and all(hasattr(r, "status") for r in value):
        return "[" + ", ".join(f"{getattr(r, 'name', '?')}: {r.status}"
                               + (f" ({r.error})" if getattr(r, "error", None) else "")
                               for r in value) + "]"
    if hasattr(value, "sock") and hasattr(value, "name"):
        return f"Dial({value.name!r})"
    text = repr(value)
    if text.startswith("<"):
        return f"a {type(value).__name__}"
    return text if len(text) < 60 else text[:57] + "..."


class _History:
    def __init__(self, rec: Record) -> None:
        self.rec = rec
        self.s = rec.sched

    def call(self, kind: str, label: str, fn: Callable[[], Any], args: tuple = (),
             task: Any = None) -> Call:
        s = self.s
        task = task or s.task()
        event = s.record(f"calls {label}", task=task, kind="call", where=False)
        c = Call(task.index, label, kind, args, call=event.step, call_time=s.now)
        self.rec.calls.append(c)
        before = task.interrupted
        s.progress()
        try:
            result = fn()
            c.outcome = ("return", result)
            shown = f"{label} returns {_short(result)}" if result is not None else \
                f"{label} returns"
        except Abandon:
            raise
        except BaseException as exc:  # noqa: BLE001 - every outcome is judged
            if task.state == DONE:  # the run is over; whatever this is, it came later
                raise Abandon from None
            c.outcome = ("raise", exc)
            shown = f"{label} raises {type(exc).__name__}" + (f": {exc}" if str(exc) else "")
        if task.interrupted is not None and task.interrupted is not before:
            c.meta["injected"] = task.interrupted
        c.ret = s.record(shown, task=task, kind="return", where=False).step
        c.ret_time = s.now
        s.progress()
        return c


def run(module: Any, sc: Scenario, choices: Choices | None = None) -> Outcome:
    """Run ``sc`` once against ``module`` (a controlled copy, see ``load``) and judge it."""
    if choices is None and sc.script is not None:
        choices = Choices(list(sc.script), sc.bound)
    signal: dict[str, Any] = {}
    state: dict[str, Any] = {}
    rec_box: list[Record] = []

    def on_line(task: Any, frame: Any) -> None:
        for what, plan in (("signal", sc.signal), ("pause", sc.pause)):
            if plan is None or task.index != plan[0] or signal.get(what):
                continue
            if plan[2:] == [1] and not any(w.task == task.index and w.ended in ("ready", "timeout")
                                           for w in rec_box[0].world.waits):
                continue  # counted from the task's first wakeup
            signal[what + " lines"] = signal.get(what + " lines", 0) + 1
            if signal[what + " lines"] != plan[1] or not rec_box or rec_box[0].control is None:
                continue
            signal[what] = True  # once; what runs from here is not traced
            rec_box[0].sched.record("a signal lands before this line" if what == "signal" else
                                    "is stopped before this line", task=task, kind="fault")
            if what == "signal":
                _History(rec_box[0]).call("press", "request_stop() in a signal handler",
                                          rec_box[0].control.request_stop, task=task)
            else:
                _pause(rec_box[0], task, state)

    interrupt = {"KeyboardInterrupt": KeyboardInterrupt,
                 "Cancelled": lambda: Cancelled("injected")}.get(sc.interrupt or "")
    sched = Scheduler(sc.seed, preempt=sc.preempt, jump=sc.jump,
                      faults=[interrupt] if interrupt else [],
                      line_preempt=0.05 if sc.ops else 0.0, opcodes=sc.ops,
                      learner_files=frozenset({module.__file__}), choices=choices,
                      on_line=on_line if sc.signal or sc.pause else None,
                      lags={(sc.lag[0], sc.lag[1]): sc.lag[2]} if sc.lag else None,
                      slow={1: sc.slow} if sc.slow else None)
    faults = [io.Fault(sc.fault[0], sc.fault[1], sc.fault[2],
                       make_fault(sc.fault[1], sc.fault[3]))] if sc.fault else []
    world = io.attach(sched, faults)
    rec = Record(sc, sched, world)
    rec_box.append(rec)
    hist = _History(rec)
    runs_total = sum(op[0] in ("run", "after run") for ops in sc.threads for op in ops)
    state.update({"runs_done": 0, "token": object(), "paused": False, "pause": object()})
    net = p02_net.net()
    try:
        bodies = [("setup", lambda: _setup(module, sc, rec, hist, net))]
        bodies += [(f"T{n}", _thread(module, sc, rec, hist, ops, state, runs_total))
                   for n, ops in enumerate(sc.threads, 1)]
        info = sched.run(bodies)
        if choices is not None:  # the decisions taken, to replay exactly this schedule
            sc = replace(sc, script=[c for c, _, _ in choices.trail], bound=choices.bound)
            rec.sc = sc
        out = Outcome(sc, PROBLEM, events=sched.events,
                      names=foreign.columns(sched, [name for name, _ in bodies]))
        if sched.crash is not None:
            out.error = sched.crash
            return out
        ctor = next((c for c in rec.calls if c.kind == "Control"), None)
        if ctor is not None and ctor.outcome[:1] == ("raise",) \
                and isinstance(ctor.outcome[1], NotImplementedError):
            out.error = ctor.outcome[1]
            return out
        for c in rec.calls:
            if c.outcome[:1] == ("raise",) and isinstance(c.outcome[1], NotImplementedError):
                out.error = c.outcome[1]
                return out
        if info.ended == "uncontrolled":
            out.uncontrolled = info.uncontrolled(
                "a lock, a wait, the clock or a socket call")
            return out
        rec.ended = info.ended
        if info.ended == "spinning":
            out.problem = (f"{info.spinner} kept running without ever waiting: it spins "
                           "(it never sleeps while nothing it waits for is ready)")
            return out
        rec.final_stop = _final_stop(rec)
        out.problem = judge(rec)
        return out
    finally:
        for other in rec.twins:
            if other.fileno() >= 0:
                socket.socket.detach(other)  # the descriptor is its original's to close
        world.close_all()
        net.accept_all()


def _final_stop(rec: Record) -> bool | None:
    """``stop_requested`` once the run is over, read by the explorer (None if it cannot be
    read without waiting: a lock a stuck thread holds, say)."""
    try:
        return bool(rec.control.stop_requested) if rec.control is not None else None
    except Exception:  # noqa: BLE001 - the learner's property, read outside any thread
        return None


def _setup(module: Any, sc: Scenario, rec: Record, hist: _History, net: Endpoints) -> None:
    world = rec.world
    c = hist.call("Control", "Control()", module.Control)
    if c.outcome[0] != "return":
        return
    rec.control = control = c.outcome[1]
    for attr in ("reader", "writer"):
        end = getattr(control, attr, None)
        world.name(end, f"control.{attr}")
        setattr(rec, attr, io.resource(end))
    names = iter("abcdefgh")
    for kind in sc.dials:
        name = next(names)
        if kind == "late":
            rec.dials.append(late_dial(world, module, name))
            continue
        address = BAD_ADDRESSES[kind] if kind in BAD_ADDRESSES else getattr(net, kind)
        d = hist.call("dial", f"dial({name!r}, {address!r})",
                      lambda: module.dial(name, address), args=(kind,))
        sock = getattr(d.outcome[1], "sock", None) if d.outcome[0] == "return" else None
        if sock is not None:  # what the judge asks of a returned dial, as it was returned
            d.meta["open"] = sock.fileno() >= 0
            d.meta["blocking"] = d.meta["open"] and os.get_blocking(sock.fileno())
        if d.outcome[0] == "return" and kind not in BAD_ADDRESSES:
            dialled = Dialled(name, kind, d.outcome[1])
            world.name(getattr(d.outcome[1], "sock", None), f"dial {name!r}")
            if kind != "stuck":
                dialled.finished, dialled.status = -1, "connected" if kind == "up" else "failed"
                dialled.errno = None if kind == "up" else 111
            rec.dials.append(dialled)
    for _ in range(sc.early):
        hist.call("press", "request_stop()", control.request_stop)
    if sc.bad:
        _bad_run(module, sc, rec, hist)


def _bad_run(module: Any, sc: Scenario, rec: Record, hist: _History) -> None:
    dials = [d.obj for d in rec.dials]
    spare = late_dial(rec.world, module, "spare")
    rec.spares.append(spare)
    control, timeout = rec.control, timeout_value(sc.timeout)
    first = dials[0] if dials else spare.obj
    bad = sc.bad
    if bad.startswith("timeout "):
        args = (dials, control, timeout_value(bad[8:]))
    elif bad == "dials iterator":
        args = (iter(dials), control, timeout)
    elif bad == "dials str":
        args = ("ab", control, timeout)
    elif bad == "a None dial":
        args = (dials + [None], control, timeout)
    elif bad == "a duplicate name":
        args = (dials + [module.Dial(first.name, spare.obj.sock)] if dials else
                [spare.obj, module.Dial(spare.name, late_dial(rec.world, module, "x").obj.sock)],
                control, timeout)
    elif bad == "a shared socket":
        args = (dials + [module.Dial("shared", first.sock)] if dials else
                [spare.obj, module.Dial("shared", spare.obj.sock)], control, timeout)
    elif bad == "a closed socket":
        socket.socket.close(spare.obj.sock)
        rec.world.closed(io.resource(spare.obj.sock), "explorer")
        args = (dials + [spare.obj], control, timeout)
    elif bad == "a blocking socket":
        socket.socket.setblocking(spare.obj.sock, True)
        args = (dials + [spare.obj], control, timeout)
    elif bad == "a second object on one descriptor":
        other = p02_net.twin(rec.world, (first if dials else spare.obj).sock)
        rec.twins.append(other)
        args = (dials + [module.Dial("twin", other)] if dials else
                [spare.obj, module.Dial("twin", other)], control, timeout)
    elif bad == "control None":
        args = (dials, None, timeout)
    else:  # "control closed"
        other = hist.call("Control", "a second Control()", module.Control)
        if other.outcome[0] != "return":
            return
        closing = hist.call("close", "close() of the second control", other.outcome[1].close)
        if closing.outcome[0] != "return":
            return
        args = (dials, other.outcome[1], timeout)
    hist.call("run", f"run() with {bad}", lambda: module.run(*args), args=("bad", bad))


def _thread(module: Any, sc: Scenario, rec: Record, hist: _History, ops: list[list[Any]],
            state: dict[str, Any], runs_total: int) -> Callable[[], None]:
    def body() -> None:
        if rec.control is None:
            return
        s = rec.sched
        for kind, arg, delay in ops:
            task = s.task()
            if delay:
                s.record(f"lets {delay:g} s pass before its next call", where=False)
                s.point()
                s.block(task, "delay", s.now + delay, what="delay")
            if kind.startswith("after "):
                while state["runs_done"] < runs_total:
                    s.block(task, state["token"], None, what="waits for run() to end")
                kind = kind[6:]
            elif kind.startswith("at pause "):
                while not state["paused"]:
                    s.block(task, state["pause"], None, what="waits for T1 to stop")
                kind = kind[9:]
            _op(module, sc, rec, hist, kind, arg, state, runs_total)
    return body


def _pause(rec: Record, task: Any, state: dict[str, Any]) -> None:
    """``task`` stops here (between two of its lines) until no other thread can go on; the
    operations waiting for the pause run meanwhile."""
    s = rec.sched
    token = object()

    def resume() -> bool:  # asked when nobody can run: then the stopped thread goes on
        if task.state == WAITING and task.blocker is token:
            task.state, task.reason = READY, "woken"
            return True
        return False

    state["paused"] = True
    s.wake(state["pause"])
    s.on_idle.append(resume)
    try:
        s.block(task, token, None, what="a pause between two lines")
    finally:
        s.on_idle.remove(resume)


def _op(module: Any, sc: Scenario, rec: Record, hist: _History, kind: str, arg: Any,
        state: dict[str, Any], runs_total: int) -> None:
    control, world, s = rec.control, rec.world, rec.sched
    if kind == "run":
        main = not any(c.kind == "run" and c.args[:1] == ("main",) for c in rec.calls)
        if main:
            dials = [d.obj for d in rec.dials]
            args: tuple = ("main", dials)
            label = f"run({len(dials)} dial{'s' if len(dials) != 1 else ''}, " \
                    f"timeout={sc.timeout})"
            fn = lambda: module.run(dials, control, timeout_value(sc.timeout))  # noqa: E731
        else:
            spare = late_dial(world, module, f"again{len(rec.spares)}")
            rec.spares.append(spare)
            args, label = ("again", [spare.obj]), "run() again, same control"
            fn = lambda: module.run([spare.obj], control, None)  # noqa: E731
        try:
            hist.call("run", label, fn, args=args)
        finally:
            state["runs_done"] += 1
            s.wake(state["token"])
    elif kind == "press":
        hist.call("press", "request_stop()", control.request_stop)
    elif kind == "look":
        hist.call("look", "stop_requested", lambda: control.stop_requested)
    elif kind == "drain":
        hist.call("drain", "drain()", control.drain)
    elif kind == "close":
        hist.call("close", "control.close()", control.close)
    elif kind == "presses":
        def presses() -> int:
            for _ in range(PRESSES):
                control.request_stop()
                s.progress()
            return PRESSES
        hist.call("presses", f"{PRESSES} × request_stop()", presses)
    elif kind in ("connect", "refuse"):
        late = [d for d in rec.dials if d.kind == "late"]
        if late and late[arg % len(late)].finished is None:
            p02_net.finish(rec, late[arg % len(late)], kind)
    elif kind == "flood":
        def flood() -> int:
            seconds, chunk, most = FLOOD
            sent, until = 0, s.now + seconds
            for _ in range(most):
                if s.now >= until or state["runs_done"] >= runs_total:
                    break
                try:
                    sent += control.writer.send(b"f" * chunk, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    pass  # full: the loop has plenty to read
                except OSError:
                    break  # the run closed the control: the flood is over
                s.progress()
                s.point()
            return sent
        hist.call("flood", op_label(["flood", None, 0]), flood)
    elif kind == "stray":
        hist.call("stray", f"writer.send({arg} bytes)",
                  lambda: control.writer.send(b"s" * arg, socket.MSG_DONTWAIT))
    elif kind == "eof":
        c = hist.call("eof", "writer.close()", control.writer.close)
        if c.outcome[0] == "return" and rec.eof is None:
            rec.eof = c.call


# ---- exploring (the driver's hooks) -------------------------------------------------------------

def probe(module: Any, report: Report) -> bool:
    """No extensions; NotImplementedError (raised) if the core is not implemented."""
    out = run(module, Scenario(["late"], None, [[["run", None, 0]], [["press", None, 0]]]))
    driver.core_ran(out, report)
    return True


def explore(path: str | os.PathLike, *, examples: int = DEFAULT_EXAMPLES,
            seed: int = DEFAULT_SEED, seconds: float | None = None) -> Report:
    return driver.explore(sys.modules[__name__], path, examples=examples, seed=seed,
                          seconds=seconds)


def replay(path: str | os.PathLike, text: str) -> Outcome:
    return driver.replay(sys.modules[__name__], path, text)
