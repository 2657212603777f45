"""P04 exploration: what the judge knows of a run (``Observed``) and the ``Driver`` that
answers the model's questions about it -- which event comes next, whether and how long the
loop slept before a turn, which other thread's callback ran when -- checking each answer
against the contract as it goes: the next event is the model's; time moves on the loop thread
only while it sleeps (or when the program says it works a while); between two turns the loop
sleeps once in its selector, not at all with callbacks pending, until the next deadline
otherwise (a removed timeout may still wake it, a sleep of ``EARLY`` s or more is never
"early"), and not again after stop(); a callback another thread added while the loop slept
woke it at once (no lost wakeup)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from workbook.explore.p04_model import Entry, Model
from workbook.explore.p04_program import Ctx, Passing, Relax
from workbook.explore.sched import HORIZON, INSTANT

#: Seconds a sleep may overshoot a deadline (poll and epoll round up to whole milliseconds).
TOL = 1.5e-3
#: A sleep at least this long is never "waking early": a loop may cap its sleeps.
EARLY = 1.0
#: Seconds two virtual times may differ and still be one instant: each reading of the clock
#: moves it by ``prims.TICK`` (a nanosecond), and a turn reads it a few times.
EPS = INSTANT


class Mismatch(Passing):
    """The run did something no correct implementation does: the message says what."""


class End(Passing):
    """The run being judged ends here, with the loop asleep as the contract allows."""


class _Bug(Passing):
    """The driver itself failed: carried out of the model (which would log an Exception as a
    failing callback's) and raised again by ``judge``."""


def _guard(method: Any) -> Any:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (Passing, GeneratorExit):
            raise
        except Exception as exc:  # noqa: BLE001 - the explorer's own mistake
            raise _Bug(exc) from exc
    guarded.__name__ = method.__name__
    return guarded


@dataclass
class Seen:
    step: int
    time: float
    text: str
    log: str | None = None  # a log record: the label of its exception ("" if none)


@dataclass
class Arrival:
    """An add_callback made by a thread other than the loop's (the setup's included)."""
    name: str  # "x3"
    thread: str
    op: list[Any]
    call: int
    ret: float  # step of its return event (inf: it never returned)
    call_time: float
    ret_time: float
    wrote: int = 0  # waker writes it made
    entry: Entry | None = None
    turn: Any = None


@dataclass
class SeenWait:
    start: int
    end: int | None
    seconds: float | None
    ended: str
    start_time: float
    end_time: float | None


@dataclass
class Turn:
    lo: float
    hi: float = math.inf
    order: list[Entry] = field(default_factory=list)


@dataclass
class Observed:
    events: dict[str, list[Seen]]
    waits: list[SeenWait]
    arrivals: dict[str, Arrival]
    loop_sends: list[int]  # steps of the loop thread's writes
    wakeups: Any  # wakeups_scheduled at the end (None: unreadable)
    writes: int  # waker writes made inside add_callback calls, by anyone
    open_fds: list[str]  # descriptors still open at the end
    all_closed: bool  # every loop the program made was closed
    loop_end: str  # what the loop thread was doing when the run ended
    relax_at: tuple[int, BaseException] | None = None  # first fault injected in the loop
    faulted: bool = False  # some fault was injected
    loop_add_writes: int = 0  # writes made inside the loop thread's own add_callback calls
    closed_again: str = ""  # a raw descriptor closed a second time (io.again_sentence)


def _name(text: str) -> str:
    return text.split(" ")[0].split("(")[0]


class Driver:
    """Answers the model's questions from the run (see the module docstring)."""

    def __init__(self, obs: Observed) -> None:
        self.obs = obs
        self.ctx: Ctx = None  # type: ignore[assignment]  # the model's, set by judge()
        self.m: Model = None  # type: ignore[assignment]
        self.ev = obs.events.get("loop", [])
        self.i = 0
        self.w = 0
        self.last = -1.0
        self.open: list[Any] = []  # intervals whose upper end is the next thing seen
        self.turns: list[Turn] = []
        self.turn_now: Turn | None = None
        self.expect_logs: list[str] = []
        self.loop: Any = None
        self.windows: list[list[float]] = []  # [start, end] steps of each run of start()
        self.relaxed = False
        self.faulted = False  # the injected fault was reached
        self.loose = False  # after a relax: the clock is no longer followed

    # ---- the loop thread's events -----------------------------------------------------------

    def _next(self) -> Seen | None:
        while self.i < len(self.ev) and self.ev[self.i].log is not None:
            self.i += 1
        return self.ev[self.i] if self.i < len(self.ev) else None

    def _relax(self, step: float) -> None:
        """At the step where a fault was injected in the loop thread, leave the exact events."""
        if self.obs.relax_at is not None and not self.faulted and step >= self.obs.relax_at[0]:
            self.faulted = self.relaxed = True
            raise Relax(self.obs.relax_at[1])

    def _seen(self, hi: float) -> None:
        for item in self.open:
            item.hi = hi
        self.open.clear()

    def rec(self, text: str) -> None:
        """The model's loop thread records ``text``: it must be the run's next event."""
        seen = self._next()
        wait = self.waits_left()
        self._relax(min(seen.step if seen else math.inf, wait.start if wait else math.inf))
        if seen is None:
            raise Mismatch(f"the loop thread stopped ({self.obs.loop_end}) where the contract "
                           f"has it go on: {text}")
        slept = wait is not None and wait.start <= seen.step and self.m.thread == "loop" \
            and self.loop is not None and self.loop.running
        if seen.text != text:
            raise Mismatch(f"the contract has the loop thread do: {text}; the run shows: "
                           + ("(a sleep in its selector, then) " if slept else "") + seen.text)
        if slept:
            raise Mismatch(f"the loop went to sleep in its selector in the middle of a turn, "
                           f"where the contract has it go on: {text}")
        if abs(seen.time - self.m.now) > EPS and not self.loose:
            raise Mismatch(f"{seen.time - self.m.now:g} s passed on the loop thread outside "
                           f"its selector before: {text}")
        self.i += 1
        self._seen(seen.step)
        self.last = seen.step
        if text.startswith("run_sync ") and self.windows and self.windows[-1][1] == math.inf:
            self.windows[-1][1] = seen.step

    rec = _guard(rec)

    def waits_left(self) -> SeenWait | None:
        return self.obs.waits[self.w] if self.w < len(self.obs.waits) else None

    def log(self, exc: BaseException) -> None:
        self.expect_logs.append(self.ctx.show_exc(exc))

    def lag(self, seconds: float) -> None:
        self.m.now += seconds

    # ---- turns ------------------------------------------------------------------------------------

    def started(self, loop: Any) -> None:
        self.loop = loop
        self.windows.append([self.last, math.inf])

    def turn(self, loop: Any, first: bool) -> list[Entry]:
        slept = 0
        while True:
            seen, wait = self._next(), self.waits_left()
            upto = seen.step if seen is not None else math.inf
            self._relax(min(upto, wait.start if wait else math.inf))
            if wait is None or wait.start > upto:
                break
            if slept:
                unseen = loop.pending + self._due(loop)
                if unseen and not any(x.visible for x in unseen):
                    # What records nothing (run_sync's stop and timeout) may have run,
                    # unseen, between these two selector calls: this one ends their turn.
                    break
                self._empty_turn(loop, wait)
            self._sleep(loop, wait)
            slept += 1
        if not slept and not first:
            if seen is not None and seen.text.startswith("run_sync raises"):
                shortest, longest = loop.expected_sleep()
                due = ("for ever" if longest is None else f"until its next deadline, "
                       f"{longest:g} s away")
                raise Mismatch(f"{seen.text}, where the contract has the loop sleep in its "
                               f"selector {due} (a timeout of any size, inf included, must "
                               "not break the loop)")
            if seen is None:
                raise Mismatch(f"the loop thread stopped ({self.obs.loop_end}) where the "
                               "contract has it sleep in its selector and take another turn")
            if seen.text.startswith("t") and seen.text.endswith(" runs"):
                raise Mismatch(f"{_name(seen.text)} fell due during a turn and ran in it (the "
                               "loop did not sleep in its selector in between): a turn runs "
                               "only the timeouts due when it began")
            if loop.pending:
                raise Mismatch(f"the loop went on to '{seen.text}' in the same turn, without "
                               "sleeping in its selector first: what a turn adds (a callback, "
                               "a moment's resumption) waits for the next turn")
            raise Mismatch("the loop began a new turn without sleeping in its selector in "
                           f"between (a turn ends with one select()), before: {seen.text}")
        return []

    turn = _guard(turn)

    def _due(self, loop: Any) -> list[Any]:
        """The model's timeouts due now and not removed."""
        return [t for d, _, t in loop.timers if d <= self.m.now and not t.removed]

    def _empty_turn(self, loop: Any, wait: SeenWait) -> None:
        due = self._due(loop)
        if loop.pending or due:
            what = (f"{len(loop.pending)} callback(s) pending" if loop.pending else
                    " and ".join(f"{t.name} due since {t.deadline:g} s" for t in due))
            raise Mismatch(f"the loop took a turn at {self.m.now:g} s without running "
                           f"anything, with {what}: a turn runs what was due when it began")
        self.turns.append(Turn(self.last, wait.start))

    def _sleep(self, loop: Any, wait: SeenWait) -> None:
        self._seen(wait.start)
        shortest, longest = loop.expected_sleep()
        if any(a.entry is None and a.call < wait.start for a in self.obs.arrivals.values()):
            shortest = 0.0  # another thread's callback may be in the list already
        s = wait.seconds
        shown = "no timeout" if s is None else f"a timeout of {s:g} s"
        if longest == 0.0 and s != 0.0:
            why = (f"{len(loop.pending)} callback(s) pending" if loop.pending
                   else "a timeout already due")
            raise Mismatch(f"the loop went to sleep in its selector ({shown}) with {why}: it "
                           "must not wait then")
        if longest is not None and longest < HORIZON:
            if s is None or s > longest + TOL:
                raise Mismatch(f"the loop went to sleep in its selector ({shown}) although its "
                               f"next timeout was due in {longest:g} s")
        limit = min(EARLY, shortest if shortest is not None else EARLY)
        if s is not None and s < limit - TOL:
            raise Mismatch(f"the loop slept only {s:g} s in its selector with nothing to do "
                           f"for {limit:g} s: it wakes for nothing (it spins)")
        self._lost(wait)
        self.w += 1
        if wait.end is None:
            raise End
        self.m.now = wait.end_time  # type: ignore[assignment]
        self.last = wait.end - 1

    def _lost(self, wait: SeenWait) -> None:
        """While the loop slept, a callback added by another thread must wake it at once."""
        if wait.ended == "now":
            return
        end = wait.end if wait.end is not None else math.inf
        end_time = wait.end_time if wait.end_time is not None else math.inf
        for a in self.obs.arrivals.values():
            if a.entry is not None or a.ret >= end or a.ret_time >= end_time - EPS:
                continue
            if not self.windows or a.call <= self.windows[0][0]:
                continue  # added before the loop ran: the first turn takes it
            woke = ("never woke" if wait.end is None else
                    f"woke only at {end_time:g} s, when its timeout ran out")
            raise Mismatch(f"lost wakeup: {a.thread} added {a.name} at {a.ret_time:g} s while "
                           f"the loop slept in its selector, and the loop {woke}")

    def arrival(self, loop: Any, arrivals: Any, before: Entry | None) -> Entry | None:
        """The callback of another thread that the run ran next, if any, and if it may run
        before ``before`` (an entry of the batch): before an entry that records nothing, an
        arrival runs only if it may have been added before that entry was."""
        seen = self._next()
        a = self.obs.arrivals.get(_name(seen.text)) if seen is not None else None
        if a is None or a.entry is not None or seen.text.startswith("add_callback"):
            return None
        wait = self.waits_left()
        if wait is not None and wait.start <= seen.step:
            return None  # it ran after the loop slept: in a later turn
        if before is not None and not before.visible and before.hi <= a.call:
            return None
        _, n, args, inner = a.op
        a_, kw = self.ctx.args(args, label=f"{args[1]}@{a.name}" if args else None)
        fn = self.ctx.callback(a.name, inner)
        a.entry = Entry(lambda: fn(*a_, **kw), name=a.name, cross=a)
        a.entry.lo, a.entry.hi = a.call, a.ret
        a.turn = self.turn_now
        self.turn_now.order.append(a.entry)  # type: ignore[union-attr]
        return a.entry

    arrival = _guard(arrival)

    def drained(self, loop: Any, batch: list[Entry]) -> None:
        self.turn_now = Turn(self.last)
        self.turns.append(self.turn_now)
        self.open.append(self.turn_now)

    def running(self, loop: Any, entry: Entry) -> None:
        self.turn_now.order.append(entry)  # type: ignore[union-attr]

    def timeouts(self, loop: Any) -> None:
        pass

    def appended(self, loop: Any, entry: Entry) -> None:
        if entry.cross is None:
            entry.lo = self.last
            self.open.append(entry)

    def stopping(self, loop: Any) -> None:
        """After the turn that saw stop(): start() returns without sleeping again."""
        while True:
            seen, wait = self._next(), self.waits_left()
            if wait is None or (seen is not None and wait.start > seen.step):
                return
            if wait.end is None or (wait.seconds != 0 and wait.ended != "now"):
                raise Mismatch(f"the contract has start() return at the end of this turn "
                               f"({loop.why}), but the loop slept in its selector again")
            self.w += 1
