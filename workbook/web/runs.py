"""Checks started from the page: one run at a time per problem, its results streamed.

A run goes through ``workbook.run.iter_check`` (the runner behind ``./check.sh pNN``) in a
worker thread; every event it produces is appended to the problem's ``Channel`` on the event
loop, and every page subscribed to the channel (server-sent events) receives it.  The
learner's file is only read, never written; progress is recorded as the CLI records it
(``progress.record_check``).
"""
from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Callable

from workbook import manifest, progress
from workbook.render import shown_path
from workbook.errors import UsageError
from workbook.run import Result, Tally, iter_check

_ids = itertools.count(1)


@dataclass
class Channel:
    """Every event of every run of one problem; subscribers follow it from the latest run."""
    problem: manifest.Problem
    events: list[dict] = field(default_factory=list)
    run_start: int | None = None        # index in ``events`` of the latest run's start
    running: bool = False
    watching: bool = False
    rerun: bool = False                 # a save arrived during a run: run once more after it
    _changed: asyncio.Event | None = None

    def changed(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def push(self, event: dict) -> None:
        """Append on the loop thread and wake the subscribers."""
        event = {**event, "sent_at": time.time()}
        if event["type"] == "start":
            self.run_start = len(self.events)
        self.events.append(event)
        old, self._changed = self.changed(), asyncio.Event()
        old.set()

    async def follow(self) -> AsyncIterator[dict]:
        """The latest run's events so far, then everything that follows."""
        i = self.run_start if self.run_start is not None else len(self.events)
        yield {"type": "hello", "running": self.running, "watching": self.watching,
               "sent_at": time.time()}
        while True:
            while i < len(self.events):
                yield self.events[i]
                i += 1
            waiter = self.changed()
            try:
                await asyncio.wait_for(waiter.wait(), 15)
            except asyncio.TimeoutError:
                yield {"type": "ping", "sent_at": time.time()}


class Runs:
    """The server's runs: one channel per problem, at most one run per problem at a time."""

    def __init__(self, file_of: Callable[[manifest.Problem], Path],
                 describe: Callable[[manifest.Problem, Result], dict]):
        self.file_of = file_of
        self.describe = describe
        self.channels = {pid: Channel(p) for pid, p in manifest.problems().items()}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._watchers: dict[str, asyncio.Task] = {}
        self._cancel = threading.Event()     # set on shutdown: stop every run
        self._threads: list[threading.Thread] = []

    def channel(self, problem_id: str) -> Channel:
        return self.channels[problem_id]

    def start(self, problem_id: str, why: str = "button") -> tuple[bool, str]:
        """Start a run on the loop thread; (False, reason) if one is already running."""
        ch = self.channels[problem_id]
        if ch.running:
            return False, f"a check of {problem_id} is already running; wait for it to finish"
        self.loop = asyncio.get_running_loop()
        ch.running = True
        run_id = next(_ids)
        target = self.file_of(ch.problem)
        ch.push({"type": "start", "run": run_id, "why": why, "file": shown_path(target),
                 "checkpoints": [cp.id for cp in ch.problem.checkpoints]})
        worker = threading.Thread(target=self._work, args=(ch, run_id, target), daemon=True,
                                  name=f"check-{problem_id}-{run_id}")
        self._threads = [t for t in self._threads if t.is_alive()] + [worker]
        worker.start()
        return True, f"run {run_id} started"

    def _work(self, ch: Channel, run_id: int, target: Path) -> None:
        loop = self.loop
        assert loop is not None
        def post(event: dict) -> None:
            try:
                loop.call_soon_threadsafe(ch.push, {**event, "run": run_id})
            except RuntimeError:  # the server is shutting down and its loop is closed
                pass

        tally = Tally(ch.problem)
        sent: set[str] = set()
        try:
            for item in iter_check(ch.problem, target, cancel=self._cancel):
                if isinstance(item, Result):
                    if self._cancel.is_set():
                        break  # stopped by the shutdown: not the learner's attempt
                    progress.record_check(ch.problem.id, item, source="page")
                    post({"type": "result", **self.describe(ch.problem, item)})
                    break
                record = item.record
                tally.add(record)
                if record.event == "import_error":
                    post({"type": "import_error", "message": record.message,
                          "reported_at": item.at})
                if record.event != "test":
                    continue
                for cp_id, cp in tally.finished(limit=ch.problem.time_limit).items():
                    if cp_id not in sent:
                        sent.add(cp_id)
                        post({"type": "checkpoint", "id": cp.id, "status": cp.status,
                              "seconds": cp.seconds, "reported_at": item.at})
        except UsageError as exc:
            post({"type": "error", "message": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a harness failure must reach the page
            post({"type": "error", "message": f"the check itself failed: "
                                              f"{type(exc).__name__}: {exc}"})
        finally:
            try:
                loop.call_soon_threadsafe(self._finished, ch)
            except RuntimeError:
                pass

    def _finished(self, ch: Channel) -> None:
        ch.running = False
        ch.push({"type": "idle"})
        if ch.rerun:
            ch.rerun = False
            self.start(ch.problem.id, why="saved during the last run")

    # -- watch: re-run on save --------------------------------------------------------------

    def set_watch(self, problem_id: str, on: bool) -> None:
        ch = self.channels[problem_id]
        ch.watching = on
        task = self._watchers.pop(problem_id, None)
        if task is not None:
            task.cancel()
        if on:
            self._watchers[problem_id] = asyncio.get_running_loop().create_task(
                self._watch(ch))
        ch.push({"type": "watch", "on": on})

    async def _watch(self, ch: Channel) -> None:
        from watchfiles import awatch
        target = self.file_of(ch.problem).resolve()

        def only_target(_change, path: str) -> bool:
            return Path(path).resolve() == target

        async for _changes in awatch(target.parent, watch_filter=only_target,
                                     debounce=200, step=50):
            if ch.running:
                ch.rerun = True
            else:
                self.start(ch.problem.id, why="file saved")

    def stop(self) -> None:
        """Shutting down: stop watching, stop every run and its processes."""
        for task in self._watchers.values():
            task.cancel()
        self._cancel.set()
        for t in self._threads:
            t.join(5)
