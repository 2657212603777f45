"""A cooperative scheduler: real threads, exactly one of them running at a time.

Every controlled thread (a ``Task``) runs until it reaches a *point*: a call into one of the
fake primitives of ``prims`` (acquiring or releasing a lock, waiting on or notifying a
condition, reading the clock, sleeping) or, when line preemption is on, a line of the
learner's own file.  At a point it may go on or hand control back; when it must wait it
always hands control back.  The controller (the thread that called ``Scheduler.run``)
then picks the next thread, lands an injected fault in a waiting one, or -- when nobody
can run -- moves the virtual clock to the earliest deadline.  Every choice comes from one
``random.Random(seed)``: the same seed and the same scenario give the same run.

Nothing here sleeps for real: a timed wait ends when the virtual clock reaches its
deadline, which happens only once every thread is waiting.  A thread that reaches no point
(``outside``: blocked in something the fakes do not control, or busy in code they do not
see) makes the run ``uncontrolled``: it is given up, and the exploration with it.
"""
from __future__ import annotations

import _thread
import gc
import linecache
import random
import sys
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from workbook.explore import midline, onecpu, outside
from workbook.explore.workers import Worker

_real_lock = _thread.allocate_lock
_get_ident = _thread.get_ident
#: Every controlled thread by its ident, across runs: a thread of a run that is over must
#: end (``Abandon``) at its next point, not carry on with uncontrolled primitives.
TASKS: dict[int, "Task"] = {}

#: The virtual clock's reading when a run starts (``time.monotonic()`` in the learner file).
BASE = 1000.0
#: Deadlines further away than this (virtual seconds) never fire within a run: a thread
#: waiting with one is as blocked as a thread waiting with no timeout.
HORIZON = 1e6
#: Deadlines this close (virtual seconds) are one instant: clock readings shift them by ticks.
INSTANT = 1e-6
#: Virtual seconds without any operation starting or ending after which a run stops: what
#: is still waiting then (even with a safety-net timed wait) waits for good.  A scenario's
#: delays and finite timeouts are at most 1 s, so a correct run is never idle this long.
IDLE = 3.0
#: Points without the virtual clock moving and without an operation ending: spinning.
SPIN_STEPS = 4000
#: With ``polls``: a thread woken by its own deadline this many times in ``POLL_SPAN`` virtual
#: seconds, nothing starting or ending between, polls (every 5 ms or more often; the acceptance
#: sets reject that too).  Not spinning, as the clock moves, yet each run is thousands of points.
POLL_WAKES = 100
POLL_SPAN = 0.5

#: CPython 3.10 copies a traced frame's variables into ``f_locals`` before each call of a
#: Python trace function and back after it, cells and free variables included: a switch to
#: another thread inside the trace function would have that thread's writes to a shared
#: closure variable overwritten by the stale copy.  There, closures' lines are not switch
#: points.
_STALE_CELLS = sys.version_info < (3, 11)

READY, RUNNING, WAITING, DONE, IDLE_TASK = "ready", "running", "waiting", "done", "not started"


class Abandon(BaseException):
    """Raised in a controlled thread at its next point to end it (the run is over)."""


@dataclass
class Event:
    """One line of the run's record: who did what, when, at which learner line."""
    step: int
    task: int  # index of the task, -1 for the controller
    now: float
    text: str
    line: int | None = None
    source: str = ""
    kind: str = "info"


class Task:
    """One controlled thread running ``body``."""

    def __init__(self, sched: "Scheduler", index: int, name: str, body: Callable[[], Any]):
        self.sched, self.index, self.name, self.body = sched, index, name, body
        self.go = _real_lock()
        self.go.acquire()
        self.state = IDLE_TASK
        self.blocker: Any = None  # the object waited on (a lock, a condition waiter, "sleep")
        self.deadline: float | None = None  # virtual time at which the wait ends by itself
        self.reason: Any = None  # why it was woken: "woken" | "timeout" | "spurious" | exc
        self.interruptible = False  # an injected exception may land in this wait
        self.spurious_ok = False  # a spurious wake-up may end this wait (a learner Condition)
        self.waiting_what = ""
        self.interrupted: BaseException | None = None  # the exception injected in it
        self.abandon_count = 0
        self.ident: int | None = None
        self.thread: Any = None  # the worker's threading.Thread, once started
        # Task 0 is the setup, and a thread the learner's code starts (``foreign``) is its
        # own: nothing is injected into either.
        self.faultable = index > 0
        self.points = 0  # points reached so far (``Scheduler.lags`` counts them)
        self.locks_taken = 0  # acquires of a learner's Lock, RLock or Semaphore so far

    def start(self) -> None:
        """Hand this task to an idle worker thread; it waits for its first turn."""
        worker = Worker.take()
        self.ident, self.thread = worker.ident, worker.thread
        self.sched._by_ident[worker.ident] = self
        TASKS[worker.ident] = self
        worker.thread.name = f"explore-{self.name}"
        worker.give(self)

    def _main(self) -> None:
        onecpu.pin(self.sched.cpu)  # before its first turn, so the hand-off lands there
        self.go.acquire()
        try:
            if self.state != DONE:  # not ended before it ever ran
                tracer = self.sched._tracer
                if tracer is not None:
                    sys.settrace(tracer)
                self.body()
        except Abandon:
            pass
        except BaseException as exc:  # noqa: BLE001 - bodies catch their own; a safety net
            self.sched.crash = exc
        finally:
            sys.settrace(None)
            self.state = DONE
            TASKS.pop(self.ident, None)
            self.sched.wake(self)  # threads joining it
            self.sched._signal()


@dataclass
class RunInfo:
    """How a run ended, besides what its operations returned."""
    ended: str = "finished"  # finished | blocked | idle | spinning | polling | uncontrolled
    steps: int = 0
    spinner: str = ""
    outside: str = ""  # uncontrolled: "blocked" or "busy" (``outside.decide``)
    where: str = ""  # uncontrolled: what the thread was in (``outside.where``)

    def uncontrolled(self, controlled: str) -> str:
        """Why an ``uncontrolled`` run was given up: ``controlled`` lists what the problem's
        explorer controls ("a lock, a wait or the clock")."""
        return outside.explain(self.spinner, self.outside, self.where, controlled)


class Scheduler:
    """Runs a few bodies as controlled threads under one seed (see the module docstring)."""

    active: "Scheduler | None" = None

    def __init__(self, seed: int, *, preempt: float = 0.0, line_preempt: float = 0.0,
                 faults: list[Callable[[], BaseException]] | None = None,
                 spurious: int = 0, fault_chance: float = 0.35, late: bool = False,
                 jump: float = 0.0,
                 learner_files: frozenset[str] = frozenset(),
                 choices: Any = None,
                 on_line: Callable[[Task, Any], None] | None = None,
                 lags: dict[tuple[int, int], float] | None = None,
                 slow: dict[int, float] | None = None, polls: bool = False,
                 opcodes: bool = False) -> None:
        # Every decision of a run: a seeded Random, or a ``bounded.Choices`` that takes
        # them from a script (systematic exploration); both offer random() and randrange().
        self.rng = choices if choices is not None else random.Random(seed)
        self._seeded = choices is None
        self.preempt = preempt
        self.line_preempt = line_preempt
        self.faults = list(faults or [])
        self.spurious = spurious
        self.fault_chance = fault_chance
        self.late = late  # faults land only in threads woken and not yet running
        self.jump = jump  # added to the wall clock once virtual time has moved
        self.learner_files = learner_files
        self.now = 0.0
        self.tasks: list[Task] = []
        self.events: list[Event] = []
        self._by_ident: dict[int, Task] = {}
        self._back = _real_lock()
        self._back.acquire()
        self.info = RunInfo()
        self.crash: BaseException | None = None
        self._still = 0  # points since the clock last moved or an operation ended
        self._last_progress = 0.0  # virtual time of the last operation start or end
        self.polls = polls  # and per task, its latest wake-ups by deadline since progress:
        self._wakes: dict[int, deque[float]] = {}
        # Called at every line of the learner's files a task runs (before any preemption
        # there): a signal handler landing between two lines, say.  Tracing costs, so only
        # with line preemption or this hook.
        self.on_line = on_line
        self._tracer = self._trace if ((line_preempt > 0 or on_line is not None)
                                       and learner_files) else None
        # With line preemption, also switch inside a line, just after a read of shared state
        # (``midline``): ``self.n += 1`` is a read, an add and a write.
        self.opcodes = opcodes and self._tracer is not None and line_preempt > 0
        self.names: dict[int, str] = {}  # id(primitive) -> the learner's name for it
        # Time passing while a thread runs: (task index, its n-th point) -> virtual seconds
        # the clock moves there (a slow turn, a thread descheduled at an awkward moment).
        self.lags = dict(lags or {})
        # A thread on a loaded machine: task index -> virtual seconds each of its points costs
        self.slow = dict(slow or {})
        # Asked, when no task can run, before the clock moves or the run is called blocked:
        # each may make waiting tasks ready (readiness that comes from outside the run, such
        # as the kernel finishing a connect) and says whether it did.
        self.on_idle: list[Callable[[], bool]] = []
        # Asked whenever no task can run (after ``on_idle``), before the clock moves to
        # ``soonest`` (None: no timed wait left, the run is about to end): a problem's judge
        # looks at the run there (who sleeps while what waits) and may make a task ready
        # (True: look again) or end the run (``info.ended`` set to anything but "finished").
        self.before_time_moves: Callable[[float | None], bool] | None = None
        # Whether an injected exception may also land in a wait for a lock (a thread
        # parked in ``Lock.acquire``), as a signal handler's exception does on POSIX.
        self.lock_faults = False
        self.cpu: int | None = None  # the CPU this run's threads are kept on (``run``)
        self._preempted: Task | None = None  # preempted in a scripted run, not yet re-picked
        # Stopped inside a line (``_midline``) and not run since: picked after every other
        # ready task by default, as a descheduled thread waits at the back of the run queue,
        # so one deviation (the stop) lets the others run whole operations meanwhile.
        self._behind: list[Task] = []

    # ---- the record ------------------------------------------------------------------

    def task(self) -> Task | None:
        return self._by_ident.get(_get_ident())

    def learner_line(self) -> tuple[int | None, str]:
        """The innermost line of the learner's file on the calling thread's stack."""
        frame = sys._getframe(1)
        while frame is not None:
            code = self._learner_code(frame)
            if code is not None:
                line = frame.f_lineno
                return line, linecache.getline(code.co_filename, line).strip()
            frame = frame.f_back
        return None, ""

    def _learner_code(self, frame) -> Any:
        """``frame``'s code if it is the learner's, else None.  Reading ``f_code`` (and
        calling ``id``) is an audit event, which a graded run's hook sees (600 000 in one
        P01 exploration, from ``_trace``), so a frame is first sorted by its module's file
        name, read from its globals (not audited): only a learner module's is read further."""
        file = frame.f_globals.get("__file__")
        if type(file) is not str or file not in self.learner_files:
            return None
        code = frame.f_code
        return code if code.co_filename in self.learner_files else None

    def record(self, text: str, *, task: Task | None = None, kind: str = "info",
               where: bool = True) -> Event:
        if task is None:
            task = self.task()
        line, source = self.learner_line() if where else (None, "")
        event = Event(len(self.events), task.index if task else -1, self.now, text, line,
                      source, kind)
        if task is None or task.state != DONE:  # nothing after a run is over is recorded
            self.events.append(event)
        return event

    def progress(self) -> None:
        """An operation started or ended: the run is not idle nor spinning."""
        self._still = 0
        self._last_progress = self.now
        self._wakes.clear()

    def name_of(self, obj: Any, default: str) -> str:
        return self.names.get(id(obj), default)

    # ---- called in controlled threads ----------------------------------------------------

    def _signal(self) -> None:
        try:
            self._back.release()
        except RuntimeError:  # already signalled (a run given up)
            pass

    def _switch(self, task: Task) -> None:
        """Hand control to the controller; return when this task is chosen again."""
        self._signal()
        task.go.acquire()
        if task.state == DONE:  # abandoned: the run is over
            self._abandon(task)
        task.state = RUNNING

    def _abandon(self, task: Task) -> None:
        task.abandon_count += 1
        if task.abandon_count > 50:  # the learner's code keeps catching Abandon: park for good
            self._signal()
            parked = _real_lock()
            parked.acquire()
            parked.acquire()
        raise Abandon

    def _count(self, task: Task) -> None:
        if task.state == DONE:
            self._abandon(task)
        self._still += 1
        self.info.steps += 1
        task.points += 1
        if self.slow:
            self.now += self.slow.get(task.index, 0.0)
        if self.lags:
            lag = self.lags.pop((task.index, task.points), None)
            if lag:
                self.now += lag
                self._still = 0
                self.record(f"⏱ {lag:g} s pass while it runs", task=task, kind="fault")
        if self._still > SPIN_STEPS:
            self.info.ended = "spinning"
            self.info.spinner = task.name
            task.state = DONE
            self._abandon(task)

    def point(self, what: str = "") -> None:
        """A place where another thread may run first."""
        task = self.task()
        if task is None:
            return
        self._count(task)
        if self.preempt and self._may_switch(task) and self.rng.random() < self.preempt:
            self._preempt(task)

    def _preempt(self, task: Task) -> None:
        """Hand control back although ``task`` could go on.  In a scripted run the pick that
        follows is among the *other* ready tasks: picking ``task`` again would repeat the run
        without this preemption, a whole subtree of schedules already walked."""
        task.state = READY
        if not self._seeded:
            self._preempted = task
        self._switch(task)

    def _may_switch(self, task: Task) -> bool:
        """Whether a preemption here could change anything.  Always asked of a seeded run
        (its stream of random numbers stays as it was); a scripted one branches only where
        another thread is ready to run, so its runs are not spent on no-op switches."""
        return self._seeded or any(t.state == READY and t is not task for t in self.tasks)

    def _trace(self, frame, event, arg):
        if event != "call":  # called for every function every controlled thread calls
            return None
        code = self._learner_code(frame)
        if code is None:
            return None
        if _STALE_CELLS and (code.co_freevars or code.co_cellvars):
            return self._trace_count
        if self.opcodes:
            return midline.watch(frame, code, self._trace_line)
        return self._trace_line

    def _trace_count(self, frame, event, arg):
        """Lines of a closure on 3.10: counted, never a switch (see ``_STALE_CELLS``)."""
        if event == "line":
            task = self.task()
            if task is not None:
                self._count(task)
        return self._trace_count

    def _trace_line(self, frame, event, arg):
        if event == "line":
            task = self.task()
            if task is not None:
                self._count(task)
                if self.on_line is not None:
                    self.on_line(task, frame)
                if self.line_preempt > 0 and self._may_switch(task) \
                        and self.rng.random() < self.line_preempt:
                    self._preempt(task)
        return self._trace_line

    def _midline(self, what: str) -> None:
        """At a mid-line point, holding ``what`` it read: another thread may run first."""
        task = self.task()
        if task is None:
            return
        self._count(task)
        if self._may_switch(task) and self.rng.random() < self.line_preempt:
            self.record(f"stops inside this line, just after reading {what}", task=task,
                        kind="switch")
            self._behind.append(task)
            self._preempt(task)

    def block(self, task: Task, blocker: Any, deadline: float | None, *, what: str,
              interruptible: bool = False, spurious_ok: bool = False) -> Any:
        """Wait until woken (``wake``), timed out, interrupted or spuriously woken; return
        the reason: "woken", "timeout", "spurious", or the injected exception."""
        task.state = WAITING
        task.blocker, task.deadline, task.reason = blocker, deadline, None
        task.interruptible = interruptible and task.interrupted is None
        task.spurious_ok = spurious_ok
        task.waiting_what = what
        self._switch(task)
        task.blocker = None
        task.interruptible = task.spurious_ok = False
        return task.reason

    def wake(self, blocker: Any, reason: str = "woken") -> list[Task]:
        """Make every task waiting on ``blocker`` ready."""
        woken = []
        for t in self.tasks:
            if t.state == WAITING and t.blocker is blocker:
                t.state, t.reason = READY, reason
                woken.append(t)
        return woken

    # ---- the controller ------------------------------------------------------------------

    def run(self, bodies: list[tuple[str, Callable[[], Any]]], *,
            first_alone: bool = True) -> RunInfo:
        """Run ``bodies`` as controlled threads; the first (a setup) alone before the others."""
        # One thread runs at a time: on one CPU every hand-off is cheaper (see onecpu).
        self.cpu = onecpu.here()
        onecpu.pin(self.cpu)
        self.tasks = [Task(self, i, name, body) for i, (name, body) in enumerate(bodies)]
        for t in self.tasks:
            t.start()
        # No collection inside a run: one would call finalizers (a learner's __del__ or
        # weakref.finalize, of objects left by earlier runs) in whichever controlled thread
        # allocated, making their lines extra points, so a scenario's schedule would depend
        # on the process's history.  The garbage waits for the first allocation after it.
        collecting = gc.isenabled()
        gc.disable()
        Scheduler.active = self
        midline.start(self._midline if self.opcodes else None)
        try:
            self._loop(first_alone)
        finally:
            self._finish()
            if collecting:
                gc.enable()
            Scheduler.active = None
            midline.stop()
            onecpu.release()
        return self.info

    def _start(self, t: Task) -> None:
        if t.state == IDLE_TASK:
            t.state = READY

    def _loop(self, first_alone: bool) -> None:
        if first_alone and self.tasks:
            self._start(self.tasks[0])
        else:
            for t in self.tasks:
                self._start(t)
        while True:
            if first_alone and self.tasks[0].state == DONE:
                for t in self.tasks[1:]:
                    self._start(t)
            if self.info.ended in ("spinning", "uncontrolled"):
                return
            self._maybe_fault()
            ready = [t for t in self.tasks if t.state == READY]
            if not ready and any([hook() for hook in self.on_idle]):
                continue  # a hook made a waiting task ready
            if not ready:
                timed = [t for t in self.tasks if t.state == WAITING and t.deadline is not None
                         and t.deadline < HORIZON]
                if self.before_time_moves is not None:
                    soonest = min((t.deadline for t in timed), default=None)  # type: ignore[type-var]
                    if soonest is None or soonest > self.now:
                        if self.before_time_moves(soonest):
                            if self.info.ended != "finished":
                                return
                            continue
                if not timed:
                    left = [t for t in self.tasks if t.state not in (DONE, IDLE_TASK)]
                    self.info.ended = "blocked" if left else "finished"
                    return
                soonest = min(t.deadline for t in timed)  # type: ignore[type-var]
                if soonest - self._last_progress > IDLE:
                    self.info.ended = "idle"
                    return
                if soonest > self.now:  # to the last deadline of the instant, all of it due
                    self.now = max(d for d in (t.deadline for t in timed) if d <= soonest + INSTANT)
                    self._still = 0
                for t in timed:
                    if t.deadline <= self.now:  # type: ignore[operator]
                        t.state, t.reason = READY, "timeout"
                        if self._polling(t):
                            return
                continue
            if self._preempted is not None:
                if len(ready) > 1 and self._preempted in ready:
                    ready.remove(self._preempted)
                self._preempted = None
            if self._behind:
                ready.sort(key=lambda t: t in self._behind)
            task = ready[self.rng.randrange(len(ready))]
            if task in self._behind:
                self._behind.remove(task)
            task.state = RUNNING
            task.go.release()
            verdict = outside.wait_for(self._back, task.thread)
            if verdict != "back":
                self.info.ended, self.info.outside = "uncontrolled", verdict
                self.info.spinner = task.name
                self.info.where = outside.where(task.thread, self._learner_code)
                return
            if self.crash is not None:
                return

    def _polling(self, task: Task) -> bool:
        """Count ``task``'s wake-up by its deadline; True once it polls (``POLL_WAKES``)."""
        if not self.polls:
            return False
        wakes = self._wakes.setdefault(task.index, deque(maxlen=POLL_WAKES))
        wakes.append(self.now)
        if len(wakes) == POLL_WAKES and self.now - wakes[0] <= POLL_SPAN:
            self.info.ended, self.info.spinner = "polling", task.name
        return self.info.ended == "polling"

    def _maybe_fault(self) -> None:
        if self.faults:
            victims = [t for t in self.tasks if t.faultable and t.interruptible
                       and t.interrupted is None
                       and t.state in (WAITING, READY)
                       and t.reason in (("woken",) if self.late else (None, "woken"))]
            if victims and self.rng.random() < self.fault_chance:
                victim = victims[self.rng.randrange(len(victims))]
                exc = self.faults.pop(0)()
                late = victim.reason == "woken"
                victim.interrupted = exc
                victim.state, victim.reason = READY, exc
                self.record(f"⚡ {type(exc).__name__} raised in {victim.name}"
                            + (" just after it was woken" if late else " while it waits")
                            + f" ({victim.waiting_what})", task=victim, kind="fault",
                            where=False)
        if self.spurious:
            sleepers = [t for t in self.tasks if t.state == WAITING and t.spurious_ok]
            if sleepers and self.rng.random() < 0.25:
                victim = sleepers[self.rng.randrange(len(sleepers))]
                self.spurious -= 1
                victim.state, victim.reason = READY, "spurious"
                self.record(f"spurious wake-up of {victim.name} ({victim.waiting_what})",
                            task=victim, kind="fault", where=False)

    def _finish(self) -> None:
        """End every thread still inside the run (each raises Abandon at its point)."""
        for t in self.tasks:
            if t.state == DONE or t.ident is None:
                continue
            t.state = DONE
            try:
                t.go.release()
            except RuntimeError:  # it is running (blocked outside the fakes): leave it
                continue
            self._back.acquire(True, 0.5)
