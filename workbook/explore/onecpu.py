"""Keep one controlled run's threads on one CPU.

A run hands control from thread to thread a dozen times, and exactly one of them runs at any
moment.  When the two threads of a hand-off sit on different CPUs, each hand-off wakes the
other CPU (an interrupt, an exit from its idle state, a cold cache): a lock ping-pong
between two Python threads measured 57 us a round trip on this project's 2-core box, and
13 us with both threads on one CPU.  So each run pins its controller and its tasks to the
CPU the controller was on when the run began, and the controller lets go when the run ends:
between runs the kernel may move it, and the next run follows it there.

Linux only (``os.sched_setaffinity`` on a thread id, the CPU read by ``procfs.current_cpu``);
anywhere else, or when either is refused, nothing is pinned.
"""
from __future__ import annotations

import os

from workbook.stuck.procfs import current_cpu


def _read_allowed() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


#: The CPUs this process may use, read at import, before any thread of it is pinned (None:
#: affinity is not available here).
_ALLOWED: set[int] | None = _read_allowed()


def here() -> int | None:
    """The CPU the calling thread runs on now, or None when pinning would not help or
    cannot be done (one CPU allowed, no affinity calls, no ``/proc``)."""
    allowed = _ALLOWED
    if allowed is None or len(allowed) < 2:
        return None
    cpu = current_cpu()
    return cpu if cpu in allowed else None


def pin(cpu: int | None) -> None:
    """Keep the calling thread on ``cpu`` (nothing when ``cpu`` is None)."""
    if cpu is not None:
        try:
            os.sched_setaffinity(0, (cpu,))
        except OSError:
            pass


def release() -> None:
    """Let the calling thread run on every CPU this process may use again."""
    allowed = _ALLOWED
    if allowed is not None:
        try:
            os.sched_setaffinity(0, allowed)
        except OSError:
            pass
