"""The watch over the learner file's import.

The import runs in the main thread of the test process, before any test and outside every
bounded wait, so nothing else would notice a module that never finishes importing (a
``while True`` at module level, an ``asyncio.run(demo())`` left at the bottom of the file).
``ImportWatch`` is a daemon thread that looks at the main thread while the import runs, as
the stuck detector looks at a test's threads: its per-thread CPU clock and the kernel's
state decide (spinning: the clock moved at nearly every look; blocked: asleep in the kernel,
the clock standing still); the frames only say where and on what.  A correct file imports
in milliseconds, so a whole ``IMPORT_PATIENCE`` still importing is far beyond any slowness a
busy machine adds.  On a verdict ``report`` is called with one sentence, once.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable

from workbook.stuck import frames as fr
from workbook.stuck.code import code_only, shown
from workbook.stuck.decide import spins
from workbook.stuck.procfs import (SELECT_CALLS, SLEEP_CALLS, kernel_state, thread_cpu_seconds,
                                   thread_demand_seconds, thread_syscall)
from workbook.tuning import IMPORT_GIVE_UP, IMPORT_PATIENCE, LOOK_INTERVAL, STILL_CPU


class ImportWatch:
    """Watches the calling (main) thread while it imports ``target``; call ``finish()`` when
    the import returns.  ``report(sentence)`` runs in the watch's thread on a verdict."""

    def __init__(self, target: str, report: Callable[[str], None], *,
                 patience: float = IMPORT_PATIENCE, give_up: float = IMPORT_GIVE_UP) -> None:
        self.target = os.path.realpath(target)
        self.report = report
        self.patience = patience
        self.give_up = give_up
        self.main = threading.current_thread()
        self.lock = threading.Lock()  # guards done and fired
        self.done = False
        self.fired = False
        self.thread = threading.Thread(target=self._run, name="workbook-import-watch",
                                       daemon=True)
        self.started = 0.0

    def start(self) -> "ImportWatch":
        self.started = time.monotonic()
        self.thread.start()
        return self

    def finish(self) -> bool:
        """The import returned: stop watching.  False if a verdict was already reported
        (the caller must not go on: the process is being ended)."""
        with self.lock:
            self.done = True
            return not self.fired

    # -- looking ------------------------------------------------------------------------------

    def _is_learner(self, filename: str) -> bool:
        return os.path.realpath(filename) == self.target

    def _run(self) -> None:
        # looks taken; at how many it wanted a CPU; in time.sleep; still in a row
        looks = moved = slept = still = 0
        first_cpu = last_cpu = thread_cpu_seconds(self.main)
        # CPU used plus time runnable waiting for a CPU: what a spinner keeps wanting however
        # crowded the machine (its CPU alone grows only with its share)
        first_demand = last_demand = thread_demand_seconds(self.main)
        hot: dict[tuple[str, int], int] = {}
        where = None  # the innermost frame at the last look
        asleep_in = ""  # the system call seen during the current still run, if any
        while True:
            time.sleep(LOOK_INTERVAL)
            with self.lock:
                if self.done:
                    return
            cpu = thread_cpu_seconds(self.main)
            demand = thread_demand_seconds(self.main)
            if None in (cpu, first_cpu, last_cpu, demand, first_demand, last_demand):
                return
            looks += 1
            stack = fr.stacks({self.main.ident}).get(self.main.ident, [])
            learner = [f for f in stack if self._is_learner(f.f_code.co_filename)]
            call = thread_syscall(self.main)
            slept += call is not None and call.name in SLEEP_CALLS
            if demand - last_demand > STILL_CPU:
                moved += 1
                if learner:
                    key = (learner[0].f_code.co_filename, learner[0].f_lineno)
                    hot[key] = hot.get(key, 0) + 1
            # Still is judged by the CPU clock alone: a thread in a short sleep loop waits
            # for a CPU at each wake-up on a crowded machine (its demand moves), yet runs
            # for microseconds and is asleep in the kernel at the same line at every look.
            if cpu - last_cpu <= STILL_CPU and kernel_state(self.main) in ("S", "D") and \
                    stack and (id(stack[0].f_code), stack[0].f_lineno) == where:
                still += 1  # asleep in the kernel, its clock still, at the same frame
                # A sleep loop is awake for microseconds between sleeps: what it is asleep
                # in is read at the looks, not again at the verdict, when it may be awake.
                asleep_in = call.name if call is not None else asleep_in
            else:
                still, asleep_in = 0, ""
            where = (id(stack[0].f_code), stack[0].f_lineno) if stack else None
            last_demand, last_cpu = demand, cpu
            elapsed = time.monotonic() - self.started
            if elapsed < self.patience:
                continue
            sentence = None
            used = cpu - first_cpu
            wanted = demand - first_demand
            if hot and spins(used=used, wanted=wanted, elapsed=elapsed, moved=moved,
                             looks=looks, slept=slept):
                sentence = self._spinning(hot, used, elapsed)
            elif still >= 3 and learner:
                sentence = self._blocked(stack, learner, elapsed, asleep_in)
            elif elapsed >= self.give_up and learner:
                sentence = (f"importing the file did not finish in {elapsed:.1f} s: it is "
                            f"still running {self._at(learner[0])} ({used:.1f} s of CPU)")
            if sentence is None:
                continue
            with self.lock:
                if self.done:
                    return
                self.fired = True
            self.report(sentence)
            return

    # -- the sentences ------------------------------------------------------------------------

    @staticmethod
    def _at(frame) -> str:
        name = fr.qualname(frame)
        where = "" if name == "<module>" else f" in {name}()"
        src = code_only(frame.f_code.co_filename, frame.f_lineno)
        return f"at {fr.site(frame)}{where}: `{src}`"

    def _spinning(self, hot: dict, used: float, elapsed: float) -> str:
        (filename, line), _ = max(hot.items(), key=lambda kv: kv[1])
        src = code_only(filename, line)
        return (f"importing the file did not finish: it is spinning at "
                f"{shown(filename)}:{line}: `{src}` ({used:.1f} s of CPU in "
                f"{elapsed:.1f} s; code at module level runs on import)")

    def _blocked(self, stack: list, learner: list, elapsed: float, name: str) -> str:
        """``name``: the system call the thread was seen asleep in ("" if none was seen)."""
        inner = learner[0]
        head = f"importing the file did not finish: after {elapsed:.1f} s it is "
        if name in ("clock_nanosleep", "nanosleep"):
            return head + f"asleep in time.sleep {self._at(inner)}"
        loop = fr.asyncio_loop(stack)
        if loop is not None and name in SELECT_CALLS:
            waiting = self._task_sites(loop)
            text = head + f"blocked {self._at(inner)}: its event loop has nothing left to run"
            if waiting:
                text += " and never will; " + "; ".join(waiting)
            return text + " (code at module level runs on import)"
        lock = fr.lock_waited(stack, self._is_learner)
        if lock is not None:
            mine = any(held is lock for held, *_ in fr.held(stack, self._is_learner))
            return head + (f"blocked {self._at(inner)}, waiting for a lock "
                           + ("it holds itself" if mine else "nobody releases"))
        return head + f"blocked {self._at(inner)}" + (f" (in the system call {name})"
                                                       if name else "")

    def _task_sites(self, loop) -> list[str]:
        """Where each of the loop's tasks waits, at its innermost learner line."""
        import asyncio
        for _ in range(3):  # the task set may change while it is read: try again
            try:
                tasks = list(asyncio.all_tasks(loop))
                break
            except RuntimeError:
                continue
        else:
            return []
        out = []
        for task in tasks:
            try:
                frames = [f for f in task.get_stack() if self._is_learner(f.f_code.co_filename)]
            except Exception:  # noqa: BLE001 - a task we cannot read: say less
                continue
            if frames:
                out.append(f"task {task.get_name()} waits {self._at(frames[-1])}")
        return sorted(out)
