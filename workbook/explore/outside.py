"""A controlled thread that does not hand control back: slow, busy, or blocked outside.

The controller waits for the running task to reach its next point.  Almost always that
takes microseconds.  When it takes ``WALL_LIMIT`` (a second), the thread is one of three
things, told apart by what the kernel says of it, never by the wall clock alone (a loaded
machine makes every thread slow):

- *slow*: it is running, or ready and waiting for a CPU -- its demand (CPU used plus time
  spent waiting for a CPU, ``procfs.thread_demand_seconds``) grows with the wall clock;
  wait on.
- *busy*: it has wanted ``BUSY_SECONDS`` of CPU without reaching a point: a loop that
  never waits on anything the explorer controls (the run cannot be explored).
- *blocked*: its demand stands still: it sleeps in the kernel on something the explorer
  does not control (a lock of another module, a real ``select``, a pipe) and will never
  come back on its own within the run.

``decide`` is the decision on samples taken a ``WINDOW`` apart, a pure function;
``wait_for`` takes the samples; ``where`` says, for the learner, what the thread is in.
"""
from __future__ import annotations

import linecache
import sys
import threading
import time
from typing import Any, Callable, NamedTuple

from workbook.stuck import procfs

#: Real seconds a thread may go without reaching a point before the kernel is asked why: a
#: controlled thread hands back within microseconds, and the kernel's answer, not this
#: figure, is what holds on a crowded machine.
WALL_LIMIT = 1.0
#: Seconds between two looks at the thread's demand once that limit has passed.
WINDOW = 0.5
#: A window in which the thread's demand grew by less than this share of the window is
#: parked: a thread that wants a CPU accrues demand at the wall clock's rate however
#: crowded the machine; one asleep in the kernel accrues (almost) none.
PARKED_SHARE = 0.25
#: Parked windows in a row that make the thread blocked.
PARKED_WINDOWS = 2
#: Seconds of demand without a point that make a running thread busy.
BUSY_SECONDS = 3.0
#: Real seconds after which the controller stops waiting whatever the samples say.
CAP_SECONDS = 30.0


class Sample(NamedTuple):
    """One look at the thread, ``WINDOW`` after the previous one."""
    grew: float | None  # demand seconds accrued since the previous look (None: unknown)
    window: float       # real seconds since the previous look
    state: str | None   # the kernel's one-letter state, None where /proc does not say


def decide(samples: list[Sample]) -> str:
    """"wait", "busy" or "blocked" for a thread that has not handed control back, from the
    looks taken so far (oldest first)."""
    parked_run, demand = 0, 0.0
    for s in samples:
        if s.grew is not None:
            parked = s.grew < PARKED_SHARE * s.window
            demand += s.grew
        else:  # no demand figures: what the kernel shows now ('R': running or runnable)
            parked = s.state != "R"
            demand += 0.0 if parked else s.window
        parked_run = parked_run + 1 if parked else 0
    if parked_run >= PARKED_WINDOWS:
        return "blocked"
    if demand >= BUSY_SECONDS:
        return "busy"
    return "wait"


def wait_for(back: Any, thread: threading.Thread | None) -> str:
    """Wait on ``back`` (released when the thread hands control back): "back", or once the
    thread has gone ``WALL_LIMIT`` seconds without, what ``decide`` makes of it ("busy" or
    "blocked"; with no thread to look at, "blocked" at once)."""
    if back.acquire(True, WALL_LIMIT):
        return "back"
    if thread is None:
        return "blocked"
    samples: list[Sample] = []
    started = time.monotonic()
    before, at = procfs.thread_demand_seconds(thread), started
    while True:
        if back.acquire(True, WINDOW):
            return "back"
        now, demand = time.monotonic(), procfs.thread_demand_seconds(thread)
        grew = None if demand is None or before is None else demand - before
        samples.append(Sample(grew, now - at, procfs.kernel_state(thread)))
        before, at = demand, now
        verdict = decide(samples)
        if verdict != "wait":
            return verdict
        if now - started > CAP_SECONDS:
            return "blocked" if samples[-1].grew == 0 else "busy"


def where(thread: threading.Thread | None, mine: Callable[[Any], Any]) -> str:
    """What ``thread`` is in, for the learner: the system call (when the kernel says), the
    innermost Python function outside the learner's file, and the innermost line of the
    learner's file (``mine(frame)`` is that frame's code when it is the learner's, else
    None).  Empty when the thread shows nothing."""
    if thread is None:
        return ""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    parts = []
    tid = procfs.kernel_tid(thread)
    call = procfs.syscall(tid) if tid is not None else None
    if call is not None:
        parts.append(f"in the system call {call.name}()")
    outer = None
    if frame is not None and mine(frame) is None:
        outer = frame
        file = frame.f_code.co_filename.rsplit("/", 1)[-1]
        parts.append(f"in {frame.f_code.co_name}() of {file} line {frame.f_lineno}")
    while frame is not None and mine(frame) is None:
        frame = frame.f_back
    if frame is not None:
        line = frame.f_lineno
        text = linecache.getline(frame.f_code.co_filename, line).strip()
        parts.append(("called from" if outer is not None else "at") +
                     f" line {line} of your file: {text}")
    return ", ".join(parts)


def explain(name: str, verdict: str, place: str, controlled: str) -> str:
    """The learner's sentence for thread ``name`` given up as ``verdict`` ("blocked" or
    "busy") while in ``place`` (``where``); ``controlled`` lists what the problem's explorer
    controls ("a lock, a wait or the clock")."""
    what = (f"waits outside {controlled} the explorer controls (a primitive of another "
            "module, such as a ready-made queue, or a real system call)"
            if verdict == "blocked" else
            f"kept running for {BUSY_SECONDS:g} s of CPU without reaching {controlled} the "
            "explorer controls (a loop that never waits on any of them?)")
    return f"{name} {what}" + (f": {place}" if place else "")
