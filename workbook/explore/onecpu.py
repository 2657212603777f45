"""Keep one controlled run's threads on one CPU.

A run hands control from thread to thread a dozen times, and exactly one of them runs at any
moment.  When the two threads of a hand-off sit on different CPUs, each hand-off wakes the
other CPU (an interrupt, an exit from its idle state, a cold cache): a lock ping-pong
between two Python threads measured 57 us a round trip on this project's 2-core box, and
13 us with both threads on one CPU.  So each run pins its controller and its tasks to the
CPU the controller was on when the run began, and the controller lets go when the run ends:
between runs the kernel may move it, and the next run follows it there.

An exploration is thousands of runs in a row, and letting go after each one cost a twelfth
of its time (the kernel's work for two affinity changes a run).  Inside ``kept()`` the
controller keeps its CPU from one run to the next, and lets go only once it has held it for
``HOLD`` seconds (so the kernel can still move it on a busy machine) and when the block ends.

Linux only (``os.sched_setaffinity`` on a thread id, the CPU read by ``procfs.current_cpu``);
anywhere else, or when either is refused, nothing is pinned.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Iterator

from workbook.stuck.procfs import current_cpu

#: Seconds a controller inside ``kept()`` keeps its CPU across runs before it lets go.
HOLD = 0.05


def _read_allowed() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


#: The CPUs this process may use, read at import, before any thread of it is pinned (None:
#: affinity is not available here).
_ALLOWED: set[int] | None = _read_allowed()

#: Per thread: ``cpu`` it is kept on by ``pin`` (None: not pinned here), ``since`` when, and
#: ``kept``, how many ``kept()`` blocks it is in.
_mine = threading.local()


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Runs in a row: the calling controller keeps its CPU from one run to the next (for up
    to ``HOLD`` seconds at a time) and may run anywhere again when the block ends."""
    _mine.kept = getattr(_mine, "kept", 0) + 1
    try:
        yield
    finally:
        _mine.kept -= 1
        if not _mine.kept:
            _let_go()


def here() -> int | None:
    """The CPU the calling thread runs on now, or None when pinning would not help or
    cannot be done (one CPU allowed, no affinity calls, no ``/proc``)."""
    allowed = _ALLOWED
    if allowed is None or len(allowed) < 2:
        return None
    if getattr(_mine, "kept", 0) and getattr(_mine, "cpu", None) is not None:
        return _mine.cpu  # kept from the run before
    cpu = current_cpu()
    return cpu if cpu in allowed else None


def pin(cpu: int | None) -> None:
    """Keep the calling thread on ``cpu`` (nothing when ``cpu`` is None, or already there)."""
    if cpu is not None and getattr(_mine, "cpu", None) != cpu:
        try:
            os.sched_setaffinity(0, (cpu,))
        except OSError:
            return
        _mine.cpu, _mine.since = cpu, time.monotonic()


def release() -> None:
    """Let the calling thread run on every CPU this process may use again (inside
    ``kept()``, only once it has been kept on one for ``HOLD`` seconds)."""
    if getattr(_mine, "kept", 0) and getattr(_mine, "cpu", None) is not None \
            and time.monotonic() - _mine.since < HOLD:
        return
    _let_go()


def _let_go() -> None:
    _mine.cpu = None
    allowed = _ALLOWED
    if allowed is not None:
        try:
            os.sched_setaffinity(0, allowed)
        except OSError:
            pass
