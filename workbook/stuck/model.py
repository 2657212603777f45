"""Plain data the stuck detector decides on: one look at one thread, a snapshot of the
process, and the verdict.

``decide`` reads only the plain fields (numbers, strings, ids).  The references kept beside
them (``thread``, ``frames``, ``loop``, ``learner``) are for the verdict's text and the
problems' explanation hooks only, so a unit test can build a snapshot by hand.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbook.stuck.procfs import Call

#: What a thread is doing at a look, as far as waking it goes.
#:   parked  -- asleep in the kernel in a wait only another thread can end (or one that ends
#:              after the check's bound);
#:   moving  -- running, runnable, or in a call we do not understand;
#:   timed   -- in a wait that ends by itself in time (a timeout, a ready fd, a timer due);
#:   bound   -- in a test's own timed wait (``event.wait(BOUND)``): a deadline, not progress;
#:   asleep  -- an event loop asleep in its selector with nothing due and no fd ready.
STATES = ("parked", "moving", "timed", "bound", "asleep")


@dataclass(frozen=True)
class Held:
    """A lock a thread's learner code holds."""
    lock: int  # id() of the lock really taken (a Condition's own lock)
    text: str  # how the source names it: ``self._lock``
    first: int  # the line that took it
    where: str  # the function that took it (its qualified name)
    owner: Any  # the frame that holds it: compared by identity only, never read by decide
    with_block: bool = True  # taken by a ``with`` block (False: a bare ``acquire()``)


@dataclass
class ThreadLook:
    """What one thread was doing at one look."""
    ident: int
    name: str
    cpu: float | None  # its CPU clock, seconds (None: it ended)
    kstate: str | None  # the kernel's one-letter state
    syscall: Call | None  # the system call it is blocked in, None when it runs
    state: str  # one of STATES
    detail: str = ""  # why not parked, or what a sleeping loop has pending
    guard_only: bool = False  # a sleeping asyncio loop whose only timers are harness bounds
    position: tuple = (None, None)  # (id of the innermost code object, its line)
    in_learner: bool = False  # learner code is on its stack
    held: tuple[Held, ...] = ()  # locks its learner frames hold, innermost frame first
    waits_for: int | None = None  # id() of the lock a parked learner line waits to acquire
    waits_reentrant: bool = False  # ... and that lock is an RLock
    in_loop: bool = False  # it runs an asyncio loop's ``_run_once``
    loop_ready: int = 0  # callbacks ready on that loop (it was not woken for them)
    read_at: float = 0.0  # time.monotonic() when its system call was read
    # -- for explanations only ---------------------------------------------------------------
    thread: Any = None
    frames: list = field(default_factory=list)
    loop: Any = None
    learner: Any = None  # the innermost learner frame

    @property
    def key(self) -> tuple:
        """Identifies the state: the same thread, state, system call and line."""
        return (self.ident, self.state, self.syscall and self.syscall[0], *self.position)


@dataclass
class Snapshot:
    """A look at every thread that could move, and what else could still move the check."""
    looks: list[ThreadLook]
    at: float  # time.monotonic() of the look
    why: str = ""  # why the check could still move ("" when nothing can)
    sooner: bool = False  # another bounded wait ends sooner (its own detector decides)
    children: bool = False  # a child process is alive (something outside may wake us);
    #                         read only when it can matter (see observe, detector)
    cycle: set = field(default_factory=set)  # idents of threads in a lock cycle

    def learner_threads(self) -> list[ThreadLook]:
        return [look for look in self.looks if look.in_learner or look.in_loop]


@dataclass
class Verdict:
    """A stuck check: ``lines`` explain it; ``sites`` (learner file:line) identify the cause."""
    what: str
    lines: list[str]
    sites: tuple[str, ...]
    cycle: bool = False  # threads wait for locks held inside their own cycle: certain

    @property
    def text(self) -> str:
        return "\n".join(self.lines)
