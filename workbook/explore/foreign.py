"""Threads the learner's file starts itself during a controlled run.

A thread the code under test starts (a ``threading.Timer`` for a deadline, a helper that
polls, one started only to hide a mistake) is scheduled like the scenario's own threads: its
``start()`` inside a run makes it one more controlled task (``_spawn``), on the
virtual clock, so what it does is explored and judged with the rest.  ``join()`` waits for
that task and ``is_alive()`` reads its state; ``prims.Timer`` waits on a controlled ``Event``.
Outside a run (at import, say) a thread starts as usual.
"""
from __future__ import annotations

import _thread
import re
import threading
from typing import Any, Callable

from workbook.explore.sched import DONE, READY, TASKS, Abandon, Scheduler, Task


def running_task() -> Task | None:
    """The controlled task calling, if a run is on and it belongs to that run."""
    task = TASKS.get(_thread.get_ident())
    return task if task is not None and task.sched is Scheduler.active else None


def _spawn(sched: Scheduler, name: str, body: Callable[[], Any]) -> Task:
    """One more controlled task, ready at once.  Not ``faultable``: faults (and P01's stalls)
    land in the scenario's threads only, since a helper killed by one would be the
    explorer's doing, not the learner's."""
    def thread_body() -> None:
        try:
            body()
        except Abandon:
            raise
        except BaseException as exc:  # noqa: BLE001 - as in a real thread: it ends, alone
            sched.record(f"its thread ends with {type(exc).__name__}: {exc}", task=task)

    task = Task(sched, len(sched.tasks), name, thread_body)
    task.faultable = False
    sched.tasks.append(task)
    sched.record(f"starts a thread of its own ({name})")
    task.start()
    task.state = READY
    return task


def columns(sched: Scheduler, names: list[str]) -> list[str]:
    """A run's timeline columns: ``names`` (the scenario's tasks, in order), then each thread
    the learner's code started in the run, by its name, so that its steps are drawn in a
    column of their own rather than in another thread's (up to the last one that did
    something recorded: a thread that did nothing to see takes no room)."""
    last = max((e.task for e in sched.events), default=-1)
    return list(names) + [t.name for t in sched.tasks[len(names):last + 1]]


def _name(thread: threading.Thread) -> str:
    """The thread's own name, or for a default one (``Thread-N``, where N counts every thread
    the process has made, so it changes from run to run) its class and function."""
    if not re.fullmatch(r"Thread-\d+(?: \(.*\))?", thread.name):
        return thread.name
    fn = getattr(thread, "function", None) or getattr(thread, "_target", None)
    return f"{type(thread).__name__}({getattr(fn, '__qualname__', '?')})"


class _Scheduled:
    _task: Task | None = None  # the controlled task running it, once started inside a run

    def start(self) -> None:
        caller = running_task()
        if caller is None:
            super().start()  # type: ignore[misc]
            return
        self._task = _spawn(caller.sched, _name(self), self.run)  # type: ignore[attr-defined]

    def join(self, timeout: float | None = None) -> None:
        mine = self._task
        if mine is None:
            super().join(timeout)  # type: ignore[misc]
            return
        caller = running_task()
        if caller is None or caller.sched is not mine.sched:
            return  # its run is over: the task ended with it
        sched = mine.sched
        sched.point()
        deadline = None if timeout is None else sched.now + max(timeout, 0.0)
        while mine.state != DONE:
            if deadline is not None and sched.now >= deadline:
                return
            reason = sched.block(caller, mine, deadline, what=f"join of {mine.name}")
            if isinstance(reason, BaseException):
                raise reason

    def is_alive(self) -> bool:
        if self._task is None:
            return super().is_alive()  # type: ignore[misc]
        return self._task.state != DONE


class Thread(_Scheduled, threading.Thread):
    pass


class Timer(_Scheduled, threading.Timer):
    pass  # ``prims.Timer`` gives it a controlled Event inside a run
