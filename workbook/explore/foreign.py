"""Threads the learner's file starts itself during a controlled run.

The scheduler runs only the threads of a scenario, on a virtual clock.  A thread the code
under test starts (a ``threading.Timer`` for a deadline, a helper that polls) would run
beside it on the real clock, so the explorer cannot say what such a run shows.  Inside a run
its ``start()`` is noted and does nothing; the driver then stops exploring with a note
instead of judging (a correct design must never be rejected for being unschedulable).
Outside a run (at import, say) it starts as usual.
"""
from __future__ import annotations

import _thread
import threading

from workbook.explore.sched import TASKS, Scheduler

_STARTED: list[str] = []  # class names, since the driver last took them


def take() -> list[str]:
    """The threads the learner's code tried to start since the last call (then forgotten)."""
    taken = _STARTED[:]
    _STARTED.clear()
    return taken


class _Unscheduled:
    def start(self) -> None:
        task = TASKS.get(_thread.get_ident())
        if task is not None and task.sched is Scheduler.active:
            _STARTED.append(type(self).__name__)
            return
        super().start()  # type: ignore[misc]


class Thread(_Unscheduled, threading.Thread):
    pass


class Timer(_Unscheduled, threading.Timer):
    pass
