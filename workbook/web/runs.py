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
from workbook.tuning import WATCH_GROUP_MS, WATCH_QUIET_MS

_ids = itertools.count(1)


@dataclass
class Channel:
    """Every event of every run of one problem (``problem`` None: the channel of the pages
    that belong to no problem, which only hears of progress).  A subscriber follows the run
    going on, if any, from its start; a finished run is never replayed as if it were
    current: the page shows the last recorded result instead (``hello``'s ``last``)."""
    problem: manifest.Problem | None
    events: list[dict] = field(default_factory=list)
    run_start: int | None = None        # index in ``events`` of the latest run's start
    running: bool = False
    watching: bool = False
    rerun: bool = False                 # a save arrived during a run: run once more after it
    last_key: list | None = None        # the recorded check the pages were last sent
    _changed: asyncio.Event | None = None

    def changed(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def push(self, event: dict) -> None:
        """Append on the loop thread and wake the subscribers.  A ``transient`` event (the
        progress, a check recorded elsewhere) is for the pages open now: a page that
        subscribes later gets the state it describes in its ``hello``."""
        event = {**event, "sent_at": time.time()}
        if event["type"] == "start":
            self.run_start = len(self.events)
        if event["type"] in ("result", "last") and event.get("key") is not None:
            self.last_key = list(event["key"])
        self.events.append(event)
        old, self._changed = self.changed(), asyncio.Event()
        old.set()

    async def follow(self, snapshot: Callable[[], dict] | None = None
                     ) -> AsyncIterator[dict]:
        """A ``hello`` with the state now (``snapshot()``: the last recorded result, the
        progress), the events of the run going on (if one is) from its start, then
        everything that follows."""
        joined = len(self.events)
        i = self.run_start if self.running and self.run_start is not None else joined
        yield {"type": "hello", "running": self.running, "watching": self.watching,
               **(snapshot() if snapshot else {}), "sent_at": time.time()}
        while True:
            while i < len(self.events):
                event = self.events[i]
                i += 1
                if i <= joined and event.get("transient"):
                    continue  # older than the hello's snapshot
                yield event
            waiter = self.changed()
            try:
                await asyncio.wait_for(waiter.wait(), 15)
            except asyncio.TimeoutError:
                yield {"type": "ping", "sent_at": time.time()}


class Runs:
    """The server's runs: one channel per problem, at most one run per problem at a time.

    ``last_of(pid)``: the page's drawing of the problem's last recorded check (from the
    terminal or a page; None if none is recorded); ``cards_of()``: every problem's progress
    as the pages update it in place."""

    def __init__(self, file_of: Callable[[manifest.Problem], Path],
                 describe: Callable[[manifest.Problem, Result], dict], *,
                 last_of: Callable[[str], dict | None] = lambda pid: None,
                 cards_of: Callable[[], list[dict]] = list):
        self.file_of = file_of
        self.describe = describe
        self.last_of = last_of
        self.cards_of = cards_of
        self.channels = {pid: Channel(p) for pid, p in manifest.problems().items()}
        self.everywhere = Channel(None)      # the pages of no problem: progress only
        self.loop: asyncio.AbstractEventLoop | None = None
        self._watchers: dict[str, asyncio.Task] = {}
        self._progress_task: asyncio.Task | None = None
        self._cards = cards_of()
        data = progress.load()
        for pid, ch in self.channels.items():
            ch.last_key = _recorded_key(data, pid)
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
                    previous = progress.record_check(ch.problem.id, item, source="page")
                    advice = progress.repeat_advice(previous, item, ch.problem.id)
                    # The check just recorded, drawn as any last check is (its time, its
                    # source, the status it leaves), else the bare result.
                    shown = self.last_of(ch.problem.id) or self.describe(ch.problem, item)
                    post({"type": "result", **shown, "advice": advice})
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
        self.refresh()  # a check recorded elsewhere while this one ran
        if ch.rerun:
            ch.rerun = False
            self.start(ch.problem.id, why="saved during the last run")

    # -- progress: checks recorded elsewhere, saves, hints, done -----------------------------

    def refresh(self) -> None:
        """Progress or a learner file changed (a check in the terminal, a save, a hint
        opened): send every open page what changed, on the loop thread."""
        data = progress.load()
        for pid, ch in self.channels.items():
            key = _recorded_key(data, pid)
            if ch.running or key == ch.last_key:
                continue  # its own result is on the way, or nothing new was recorded
            ch.last_key = key
            last = self.last_of(pid)
            if last is not None:
                ch.push({"type": "last", "transient": True, **last})
        cards = self.cards_of()
        if cards != self._cards:
            self._cards = cards
            for ch in [*self.channels.values(), self.everywhere]:
                ch.push({"type": "progress", "transient": True, "cards": cards})

    def watch_progress(self, files: list[Path]) -> None:
        """Call ``refresh`` whenever one of ``files`` (the progress file, the learner files)
        changes; from the server's startup, on its loop."""
        from watchfiles import awatch
        wanted = {f.resolve() for f in files}
        folders = sorted({f.parent for f in wanted}, key=str)
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)

        async def follow() -> None:
            async for _changes in awatch(*folders, recursive=False, debounce=100, step=50,
                                         watch_filter=lambda _c, p: Path(p) in wanted):
                self.refresh()

        self._progress_task = asyncio.get_running_loop().create_task(follow())

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
                                     debounce=WATCH_GROUP_MS, step=WATCH_QUIET_MS):
            if ch.running:
                ch.rerun = True
            else:
                self.start(ch.problem.id, why="file saved")

    def stop(self) -> None:
        """Shutting down: stop watching, stop every run and its processes."""
        for task in [*self._watchers.values(), self._progress_task]:
            if task is not None:
                task.cancel()
        self._cancel.set()
        for t in self._threads:
            t.join(5)


def _recorded_key(data: dict, problem_id: str) -> list | None:
    """What tells the problem's last recorded check from another (JSON's list, as the
    events carry it)."""
    key = progress.check_key(progress.entry(data, problem_id))
    return list(key) if key else None
