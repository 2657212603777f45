"""P01 exploration, one controlled run (``Run``): the setup alone, then the event loop's
thread and the producer threads under the scheduler, every call and wakeup recorded for the
judge (``p01_judge``).  See ``p01`` for what a run consists of and how it is judged.
"""
from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from workbook.explore import foreign, p01_judge
from workbook.explore.bounded import Choices
from workbook.explore.driver import Outcome
from workbook.explore.oracle import Call
from workbook.explore.p01_judge import Wakeup
from workbook.explore.p01_loop import Loop, Resumed, Wrapper, awaiting_line, shut
from workbook.explore.p01_scenario import FINAL_MAX, Scenario, get_args, op_label
from workbook.explore.p03 import _name_primitives  # the sink's locks named as self.NAME
from workbook.explore.values import Item, OddEq
from workbook.explore.sched import BASE, Abandon, Event, Scheduler, Task

PROBLEM = "p01"


class Interrupted(Exception):
    """An ordinary exception raised inside a wait."""


class Cancelled(BaseException):
    """A BaseException that is not an Exception, raised inside a wait."""


class Touchy(Item):
    """An item that refuses to be compared, hashed or tested for truth, as a numpy array
    refuses ``bool()``: a sink that looks at its items fails on it."""
    __slots__ = ()

    def _refuse(self, *args: Any) -> Any:
        raise ValueError(f"{self!r} cannot be compared, hashed or tested for truth")

    __eq__ = __ne__ = __lt__ = __bool__ = __hash__ = __len__ = _refuse  # type: ignore[assignment]
    prefix = "touchy"


FAULT_TYPES: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt, "Interrupted": Interrupted, "Cancelled": Cancelled}

#: Virtual seconds a slow ``after_empty_drain`` works each time (``hook="slow"``).
SLOW_HOOK = 0.3
#: Harness waits (not the learner's): what a thread parked on one of these is doing.
DELAY, STALL, BUSY, JOIN, REQUEST, HANDOFF = ("delay", "stall", "busy", "join", "request",
                                              "handoff")
HARNESS = {DELAY, STALL, BUSY, JOIN, REQUEST, HANDOFF}


class Run:
    """One controlled run of one scenario (see the module docstring)."""

    def __init__(self, module: Any, sc: Scenario, choices: Choices | None) -> None:
        self.module, self.sc = module, sc
        fault = FAULT_TYPES.get(sc.fault or "")
        self.choices = choices
        self.sched = s = Scheduler(
            sc.seed, preempt=sc.preempt, line_preempt=0.05 if sc.lines else 0.0,
            faults=[lambda: fault("injected")] if fault else [], late=sc.late, jump=sc.jump,
            fault_chance=1.0 if sc.late else 0.35,
            learner_files=frozenset({module.__file__}), choices=choices, opcodes=sc.ops)
        s.lock_faults = fault is not None
        s.before_time_moves = self.before_time_moves
        self.loop = Loop(s)
        self.loop.selector.watcher = self
        self.calls: list[Call] = []
        self.stack: dict[int, list[Call]] = {}  # task index -> calls in progress
        self.wakeups: list[Wakeup] = []  # the calls of call_soon_threadsafe inside puts
        # where a wakeup cycle may have ended (the consumer armed): (from, to) steps; to None
        # for "before its thread records anything else"
        self.arms: list[tuple[int, int | None]] = []
        self.hook_returns: list[int] = []
        self.resumes: list[int] = []  # where in the record the consumer's get_batch resumed
        self.selects: set[int] = set()  # where in the record the loop went to sleep in select()
        self.stale: tuple[Call, int] | None = None  # the get a stale wakeup reached, and when
        self.lags: list[tuple[float, float]] = []  # (when, how much) a loop turn started late
        self.first_callback: tuple[Any, tuple] | None = None
        self.turn = 0  # select() calls of the loop so far: its turns
        self.delivered: list[int] = []  # turns in which a wakeup (or a stale one) arrived
        self.deferred = 0  # wakeups whose delivery is held back (``sc.defer``), not yet in
        self.spurious_left = sc.spurious
        self.spurious_due: float | None = None
        self.bound_as = ""  # how bind_loop was last called, and the step it returned at
        self.bound_step = -1
        self.sink: Any = None
        self.error: BaseException | None = None
        self.problem: str | None = None
        self.count0: Any = 0
        self.get_task: Any = None
        self.getting: Call | None = None  # the consumer's get_batch in progress
        self.hooked = 0
        self.request = ""
        self.handoff_done = False
        self.producers_left = len(sc.producers)
        self.counter = 0
        self.over = False  # the scheduler's run has returned: nothing more is recorded

    # ---- values and the record ------------------------------------------------------------

    def make(self, spec: str) -> Any:
        if spec in ("obj", "odd", "touchy"):
            self.counter += 1
            return {"obj": Item, "odd": OddEq, "touchy": Touchy}[spec](self.counter)
        return {"0": 0, "''": "", "None": None, "False": False}[spec]

    def _mine(self) -> Task:
        """The calling controlled thread; the run's end (Abandon) for any other, such as
        the clean-up after the run, where nothing is recorded any more."""
        task = self.sched.task()
        if task is None or self.over:
            raise Abandon
        return task

    def begin(self, kind: str, label: str, args: tuple) -> Call:
        s = self.sched
        task = self._mine()
        # the hook is called by the learner's code: name the line that calls it
        event = s.record(f"calls {label}", kind="call", where=kind == "hook")
        call = Call(task.index, label, kind, args, call=event.step, call_time=s.now)
        call.meta["before"] = task.interrupted
        self.calls.append(call)
        self.stack.setdefault(task.index, []).append(call)
        if kind != "hook":  # an operation began (the hook runs inside one)
            s.progress()
        return call

    def end(self, call: Call, how: str, value: Any) -> None:
        s = self.sched
        task = self._mine()
        if how == "raise":
            if task.state == "done":
                raise Abandon from None  # the run is over; whatever this is, it came later
            if isinstance(value, NotImplementedError) and self.error is None:
                self.error = value  # (its traceback names the method not written yet)
            else:
                value.__traceback__ = None
            shown = f"{call.label} raises {type(value).__name__}" + (f": {value}" if str(value) else "")
        else:
            shown = f"{call.label} returns" + ("" if call.kind in ("put", "bind", "hook")
                                               else f" {value!r}")
        call.outcome = (how, value)
        if task.interrupted is not None and task.interrupted is not call.meta.get("before"):
            call.meta["injected"] = task.interrupted
        call.ret = s.record(shown, kind="return", where=False).step
        call.ret_time = s.now
        self.stack.get(call.task, [call]).remove(call)
        if call.kind != "hook":
            s.progress()

    def park(self, blocker: str, seconds: float | None, what: str) -> Any:
        s = self.sched
        return s.block(s.task(), blocker, None if seconds is None else s.now + seconds, what=what)

    # ---- the calls ---------------------------------------------------------------------------

    def _do(self, call: Call, act: Any) -> bool:
        """Run the learner's synchronous call ``act()`` and record how it ended (True: it
        returned)."""
        try:
            act()
        except Abandon:
            raise
        except BaseException as exc:  # noqa: BLE001 - judged
            self.end(call, "raise", exc)
            return False
        self.end(call, "return", None)
        return True

    def put(self, spec: str) -> None:
        value = self.make(spec)
        call = self.begin("put", op_label(["put", spec], repr(value)), (value,))
        self._do(call, lambda: self.sink.put(value))

    def bind(self, how: str) -> None:
        target = {"running": None, "loop": self.loop, "wrapper": Wrapper(self.loop)}[how]
        call = self.begin("bind", op_label(["bind", how]), (how,))
        if self._do(call, lambda: self.sink.bind_loop() if target is None
                    else self.sink.bind_loop(target)):
            self.bound_as, self.bound_step = how, call.ret
            self.arms.append((call.call, call.ret))  # a bind may reset the cycle meanwhile

    async def get(self, op: list[Any], final: bool = False) -> Any:
        self._mine()
        if op[3]:
            self.sched.record(f"lets {op[3]:g} s pass (asyncio.sleep)", where=False)
            await asyncio.sleep(op[3])
        kwargs = get_args(op)
        box: list[Any] = []

        async def one() -> None:
            call = self.begin("get", op_label(["get", op[1], op[2]]),
                              (kwargs.get("max_items", 1024), kwargs.get("timeout"), op[1],
                               op[2]))
            call.meta["final"] = final
            self.getting = call
            try:
                coro = self.sink.get_batch(**kwargs)
                result = await (Resumed(coro, self._resumed)
                                if hasattr(type(coro), "__await__") else coro)
            except Abandon:
                raise
            except BaseException as exc:  # noqa: BLE001 - judged
                self.end(call, "raise", exc)  # (Abandon once the run is over)
                self.getting = None
                return
            self.end(call, "return", result)
            self.getting = None
            box.append(result)

        task = self.get_task = self.loop.create_task(one())
        timer = None
        if op[4] is not None:
            timer = self.loop.call_later(op[4], self.cancel, task)
        try:
            await task
        except Abandon:
            raise
        except BaseException:  # noqa: BLE001 - cancelled before it began: nothing to judge
            pass
        if timer is not None:
            timer.cancel()
        return box[0] if box else None

    def _resumed(self) -> None:
        self.resumes.append(len(self.sched.events))

    def cancel(self, task: Any) -> None:
        if not task.done():
            self.sched.record("⚡ the task running get_batch is cancelled", kind="fault",
                              where=False)
            if self.getting is not None:
                self.getting.meta["cancelled"] = True
                self.getting.meta["cancel_turn"] = self.turn
            task.cancel()

    def hook(self) -> None:
        """``after_empty_drain``: recorded (the sink must be empty just before); what it
        does besides comes from the scenario (the first time, on the loop's thread)."""
        s = self.sched
        task = s.task()
        get = self.getting
        start = get.call if get is not None else None
        prev = [m for m in self.hook_returns if start is not None and m > start]
        call = self.begin("hook", "after_empty_drain()", ())
        call.meta["since"] = max(prev) if prev else (start if start is not None else call.call)
        in_loop = task is not None and task.index == 1
        if in_loop and self.sc.hook == "slow":  # work that takes time: the clock moves on
            s.now += SLOW_HOOK
            s.record(f"the hook works for {SLOW_HOOK:g} s", kind="fault", where=False)
        if in_loop and self.hooked == 0 and self.sc.hook == "put":
            self.hooked += 1
            self.put("obj")
        elif in_loop and self.hooked == 0 and self.sc.hook == "handoff":
            self.hooked += 1
            self.request = "put"
            s.wake(REQUEST)
            while not self.handoff_done:
                self.park(HANDOFF, None, "waits, inside the hook, for another thread's put")
        self.end(call, "return", None)
        self.hook_returns.append(call.ret)  # type: ignore[arg-type]
        self.arms.append((call.ret, None))  # type: ignore[arg-type]

    # ---- the threads ---------------------------------------------------------------------------

    def setup(self) -> None:
        try:
            self.sink = self.module.OutputSink()
            self.count0 = self.sink.wakeups_scheduled
        except BaseException as exc:  # noqa: BLE001
            self.error = exc
            return
        _name_primitives(self.sched, self.sink)
        if self.sc.hook is not None:
            self.sink.after_empty_drain = self.hook
        for op in self.sc.setup:
            if self.error is not None:
                return
            if op[0] == "put":
                self.put(op[1])
            elif op[0] == "old_loop":
                self._earlier_loop()
            elif op[0] == "bind" and op[1] == "running":
                self.loop.run_until_complete(self._bind_inside(op[1]))
            elif op[0] == "bind":
                self.bind(op[1])
            else:
                self.loop.run_until_complete(self.get(["get", op[1], op[2], 0, None]))

    async def _bind_inside(self, how: str) -> None:
        self.bind(how)

    def _earlier_loop(self) -> None:
        """The sink served another loop first: bind_loop() and a timed wait there, then that
        loop is closed (the run goes on with its own loop, bound again)."""
        main = self.loop
        self.loop = Loop(self.sched)
        self.loop.selector.watcher = self
        self.sched.record("an earlier event loop starts", where=False)
        try:
            self.loop.run_until_complete(self._bind_inside("running"))
            self.loop.run_until_complete(self.get(["get", "default", 0.25, 0, None]))
        finally:
            shut(self.loop)
            self.loop = main
            self.sched.record("the earlier loop is closed", where=False)

    def consumer(self) -> None:
        self.sched.task().faultable = False  # nothing is injected into the loop's thread
        if self.sink is None or self.error is not None:
            return
        try:
            self.loop.run_until_complete(self.main())
            if self.sc.end == "close":
                self.sched.record("closes the loop", where=False)
                self.loop.close()
                self.put("obj")
        finally:
            if self.request == "":
                self.request = "stop"
                self.sched.wake(REQUEST)

    async def main(self) -> None:
        for op in self.sc.consumer:
            if self.error is not None:
                return
            if op[0] == "bind":
                self.bind(op[1])
            elif op[0] == "busy":
                self.sched.record(f"is busy outside the loop for {op[1]:g} s", where=False)
                self.park(BUSY, op[1], "busy outside the loop")
            else:
                await self.get(op)
        if self.sc.end != "drain":
            return
        while self.producers_left > 0:
            self.park(JOIN, None, "waits for the producers to finish")
        for _ in range(FINAL_MAX):
            got = await self.get(["get", FINAL_MAX, 0, 0, None], final=True)
            if not got:
                break

    def producer(self, ops: list[list[Any]]):
        def body() -> None:
            if self.sink is None or self.error is not None:
                return
            for op in ops:
                if op[2]:
                    self.sched.record(f"lets {op[2]:g} s pass", where=False)
                    self.sched.point()
                    self.park(DELAY, op[2], "a delay")
                self.put(op[1])
            self.producers_left -= 1
            self.sched.wake(JOIN)
        return body

    def helper(self) -> None:
        """The thread the hook hands its put to (scenarios with ``hook="handoff"``)."""
        while self.request == "":
            self.park(REQUEST, None, "waits for the hook to ask for a put")
        if self.request == "put":
            self.put("obj")
            self.handoff_done = True
            self.sched.wake(HANDOFF)

    # ---- what the loop tells (p01_loop.Watcher) ----------------------------------------------

    def before_call(self, loop: Loop, callback: Any, args: tuple, wrapped: bool) -> tuple | None:
        s = self.sched
        task = s.task()
        inside = self.stack.get(task.index) if task is not None else None
        put = inside[-1] if inside and inside[-1].kind == "put" else None
        name = getattr(callback, "__qualname__", None) or type(callback).__name__
        event = s.record(f"calls call_soon_threadsafe({name})", kind="notify")
        if put is not None:
            direct = loop is self.loop and not wrapped and self.bound_as == "wrapper" \
                and put.call > self.bound_step  # the put began after the wrapper was bound
            self.wakeups.append(Wakeup(event.step, direct, put))
            if self.first_callback is None:
                self.first_callback = (callback, args)
        if self._stalls(task, after=False):
            self._stall()
        s.point()
        if not self.sc.defer or put is None:
            self.delivered.append(self.turn + 1)  # it runs in the loop's next turn
            return None
        self.deferred += 1
        return self._deliver_later, (s.now + self.sc.defer, callback, args)

    def _deliver_later(self, due: float, callback: Any, args: tuple) -> None:
        """On the loop's thread: hold a wakeup back until ``due`` (``sc.defer``)."""
        self.loop.call_at(BASE + due, self._delivered, callback, args)

    def _delivered(self, callback: Any, args: tuple) -> None:
        self.deferred -= 1
        self.delivered.append(self.turn)
        self.sched.record("the held-back wakeup arrives", kind="fault", where=False)
        callback(*args)

    def after_call(self, raised: BaseException | None) -> None:
        s = self.sched
        task = s.task()
        if raised is not None:
            inside = self.stack.get(task.index) if task is not None else None
            if self.wakeups and inside and self.wakeups[-1].put is inside[-1]:
                self.wakeups[-1].raised = True
            s.record(f"call_soon_threadsafe raises {type(raised).__name__}: {raised}",
                     kind="info")
        elif self._stalls(task, after=True):
            self._stall()
        s.point()

    def _stalls(self, task: Any, *, after: bool) -> bool:
        """Whether the scenario's stall lands in this call (before or ``after`` the write): a
        stall is a fault, so only in a producer, never in a task that is not ``faultable`` (the
        setup, the loop's thread, a thread the learner's file started)."""
        return bool(self.sc.stall) and self.sc.stall_after == after and task is not None \
            and task.faultable

    def _stall(self) -> None:
        self.sched.record(f"stalls {self.sc.stall:g} s inside call_soon_threadsafe",
                          kind="block", where=False)
        self.park(STALL, self.sc.stall, "stalled inside call_soon_threadsafe")

    def selecting(self, deadline: float | None) -> float | None:
        s = self.sched
        if self.spurious_left and self.first_callback is not None:
            due = s.now + self.sc.spurious_after
            if deadline is None or due <= deadline:
                self.spurious_due, deadline = due, due
        self.problem = self.problem or p01_judge.asleep_again(self)
        line, source = awaiting_line(self.get_task if self.getting else None,
                                     s.learner_files)
        until = "" if deadline is None else f" until {deadline:g}"
        event = s.record(f"the loop sleeps in select(){until}", kind="block", where=False)
        event.line, event.source = line, source
        self.selects.add(event.step)
        return deadline

    def selected(self, reason: Any) -> None:
        self.turn += 1
        if reason is None:
            return
        s = self.sched
        due, self.spurious_due = self.spurious_due, None
        if reason == "timeout" and due is not None and s.now >= due and self.first_callback:
            self.spurious_left -= 1
            callback, args = self.first_callback
            event = s.record("a stale wakeup arrives: the first call_soon_threadsafe callback "
                             "runs again, with nothing new queued", kind="fault", where=False)
            if self.getting is not None:
                self.stale = (self.getting, event.step)
            self.loop.call_soon(callback, *args)
            self.delivered.append(self.turn)
        if self.sc.lag and s.rng.random() < 0.5:
            s.now += self.sc.lag
            self.lags.append((s.now, self.sc.lag))
            s.record(f"the loop's turn starts {self.sc.lag:g} s late", kind="fault", where=False)

    # ---- whenever nobody can run -----------------------------------------------------------

    def before_time_moves(self, soonest: float | None) -> bool:
        if self.loop.selector.wake_if_ready():
            return True
        problem = p01_judge.idle(self, soonest)
        if problem:
            self.problem = problem
            self.sched.info.ended = "stopped"
            return True
        return False

    def waiting_on_learner(self, task: Task) -> bool:
        return task.state == "waiting" and task.blocker is not self.loop.selector \
            and task.blocker not in HARNESS

    # ---- the run -------------------------------------------------------------------------------

    def go(self) -> Outcome:
        bodies = [("setup", self.setup), ("loop", self.consumer)]
        bodies += [(f"P{n}", self.producer(ops)) for n, ops in enumerate(self.sc.producers, 1)]
        if self.sc.hook == "handoff":
            bodies.append(("helper", self.helper))
        try:
            info = self.sched.run(bodies)
        finally:
            self.over = True
            shut(self.loop)
        sc = self.sc
        choices = self.choices
        if choices is not None:  # the decisions taken, to replay exactly this schedule
            sc = replace(sc, script=[c for c, _, _ in choices.trail], bound=choices.bound)
        out = Outcome(sc, PROBLEM, events=_shown(self.sched.events),
                      names=foreign.columns(self.sched, [n for n, _ in bodies]))
        if self.error is not None:
            out.error = self.error
            return out
        if self.sched.crash is not None:
            out.error = self.sched.crash
            return out
        if info.ended == "uncontrolled":
            out.uncontrolled = info.uncontrolled(
                "a lock, a wait, the clock or the event loop")
            return out
        out.problem = self.problem or p01_judge.judge(self, info)
        return out


#: The most events a counterexample's timeline shows: the first ones and the last ones
#: (a spinning loop records thousands).
SHOWN_HEAD, SHOWN_TAIL = 24, 12


def _shown(events: list[Event]) -> list[Event]:
    if len(events) <= SHOWN_HEAD + SHOWN_TAIL + 1:
        return events
    head, tail = events[:SHOWN_HEAD], events[-SHOWN_TAIL:]
    cut = len(events) - SHOWN_HEAD - SHOWN_TAIL
    gap = Event(head[-1].step, tail[0].task, tail[0].now, f"... {cut} more steps like these ...")
    return head + [gap] + tail


