"""The real threads controlled tasks run on, kept and reused across runs.

Thousands of runs of three tasks each: starting a thread per task cost about a third of an
exploration's time.  A worker goes back to the idle list only once its task has ended; one
that never comes back (its task parked for good, or blocked outside the fakes) is simply not
reused."""
from __future__ import annotations

import _thread
import threading
from typing import Any

from workbook.stuck import procfs

_real_lock = _thread.allocate_lock


class Worker:
    """A real thread that runs one task (anything with ``_main()``) after another."""

    _idle: list["Worker"] = []
    _idle_lock = _real_lock()  # guards _idle (the controller takes, workers give back)

    def __init__(self) -> None:
        self.job = _real_lock()  # released when a task is given
        self.job.acquire()
        self.task: Any = None
        ready = _real_lock()
        ready.acquire()
        self.ident = 0
        self.thread = threading.Thread(target=self._loop, args=(ready,), daemon=True,
                                       name="explore-idle")
        self.thread.start()
        ready.acquire()  # its ident is known before any task is handed to it

    @classmethod
    def take(cls) -> "Worker":
        with cls._idle_lock:
            if cls._idle:
                return cls._idle.pop()
        return cls()

    def give(self, task: Any) -> None:
        self.task = task
        self.job.release()

    def _loop(self, ready: Any) -> None:
        procfs.note_tid(self.thread)  # its kernel id, for ``outside``, as the harness saw it
        self.ident = _thread.get_ident()
        ready.release()
        while True:
            self.job.acquire()
            task, self.task = self.task, None
            task._main()
            del task
            with self._idle_lock:
                self._idle.append(self)
