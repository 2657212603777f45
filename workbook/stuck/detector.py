"""The stuck detector of one test session: everything it keeps between looks, in one object
(``DETECTOR``), and the watch each bounded wait runs (observe, decide, explain).

Every bounded wait of the harness (join, wait_until, wait_event, LoopThread.wait, ...) runs a
``Watch``: between short blocks it looks at the other threads of the process.  The check is
*stuck* when, over several consecutive looks, every thread that could make progress is
parked -- asleep in the kernel (state S) in a wait with no timeout, its CPU clock standing
still, the same frame each time -- and nothing pending could wake one: no timed wait, no
ready callback or learner timer of a sleeping asyncio loop, no readable fd of a sleeping
selector, no child process, no other harness wait that ends sooner.  Anything not
understood counts as "could move": the bound then decides.  Frames only explain.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from workbook.stuck import frames as fr
from workbook.stuck.code import is_kit, is_stdlib, real, source_line
from workbook.stuck.decide import Progress, decide, gil_starved, ready_for_python, spins
from workbook.stuck.explain import (asleep_in_sleep, diagnose, gil_sentence, sleep_seconds,
                                    slow_sentence)
from workbook.stuck.model import Snapshot, Verdict
from workbook.stuck.observe import take_snapshot
from workbook.stuck.procfs import children_alive, thread_cpu_seconds, thread_demand_seconds
from workbook.tuning import HOLD_CONFIRM, LOOK_INTERVAL, STILL_CPU


@dataclass
class CheckLog:
    """What the detector found during one check (one test): its stuck verdicts, in order.
    The plugin keeps it in the test's ``item.stash``."""
    verdicts: list[Verdict] = field(default_factory=list)
    #: What ``testkit.honest`` found lying among the values the submission returned.
    lies: list[str] = field(default_factory=list)


class Detector:
    """The detector's state for one test session (one process)."""

    def __init__(self) -> None:
        self.learner_files: set[str] = set()
        self.watchers: dict[int, float] = {}  # thread ident -> deadline of its bounded wait
        self.watchers_lock = threading.Lock()  # guards watchers
        self.excluded: set[int] = set()  # idents of harness threads that never count
        #: The threads alive when the current check began (by ``id``, each kept so its id
        #: stays its own): never by ident, which a thread of this check may get once an old
        #: one has ended -- it would then be left out of every look.
        self.background: dict[int, threading.Thread] = {}
        self.guards: set = set()  # pending asyncio bounds set by ``testkit.bounded``
        self.guards_lock = threading.Lock()  # guards guards
        self.hooks: list[Callable[[Snapshot], list[str]]] = []
        #: Thread states already judged stuck in this process: key -> CPU clock then.  The
        #: same thread seen again in the same state with the same clock needs no new streak.
        self.known: dict[tuple, float] = {}
        #: Exceptions the detector raised while looking (each one made it skip that look).
        self.faults: list[BaseException] = []
        self.check = CheckLog()

    def set_learner_file(self, path: str) -> None:
        """Which file is the learner's (frames there are 'learner lines')."""
        self.learner_files.add(os.path.realpath(path))

    def is_learner(self, filename: str) -> bool:
        return bool(self.learner_files) and real(filename) in self.learner_files

    def begin_check(self) -> CheckLog:
        """A check starts: threads alive now belong to earlier checks.  Its fresh log."""
        self.check = CheckLog()
        main = threading.main_thread()
        self.background = {id(t): t for t in threading.enumerate()
                           if t.ident is not None and t is not main}
        with self.guards_lock:
            self.guards.clear()
        return self.check

    def record(self, verdict: Verdict) -> None:
        """Keep ``verdict`` in the current check's log (for the report's diagnosis)."""
        self.check.verdicts.append(verdict)

    def add_hook(self, hook: Callable[[Snapshot], list[str]]) -> None:
        if hook not in self.hooks:
            self.hooks.append(hook)


#: The session's detector.
DETECTOR = Detector()

#: Standard-library functions that block until woken or timed out (``threading``,
#: ``queue``, ``selectors``): a thread inside one is in a wait of its own, not the GIL's.
_WAITS = frozenset({"wait", "wait_for", "acquire", "join", "get", "put", "select",
                    "_wait_for_tstate_lock"})


class Watch:
    """The stuck detector of one bounded wait, and where CPU went while it waited."""

    def __init__(self, what: str, deadline: float, detector: Detector = DETECTOR) -> None:
        self.what = what
        self.deadline = deadline
        self.detector = detector
        self.me = threading.get_ident()
        self.started = time.monotonic()
        self.progress = Progress()
        # Per thread -- the Thread object, never its ident, which a thread started later
        # may reuse: its CPU clock at the first look and the last, the learner lines it was
        # seen running, how many looks saw it and at how many its clock had moved.
        self.cpu_start: dict[threading.Thread, float] = {}
        self.last_cpu: dict[threading.Thread, float] = {}
        # ... and its demand (CPU used plus time runnable waiting for a CPU, ``procfs``)
        self.demand_start: dict[threading.Thread, float] = {}
        self.last_demand: dict[threading.Thread, float] = {}
        self.hot: dict[threading.Thread, dict[str, int]] = {}
        self.looks_at: dict[threading.Thread, int] = {}
        self.moved: dict[threading.Thread, int] = {}
        self.interval = LOOK_INTERVAL  # until the next look: shorter while confirming a cycle
        # Per thread: the looks that saw it, and per learner line how many saw it asleep in
        # time.sleep there (with the seconds that call asks for): slowness, not a hang.
        self.seen: dict[threading.Thread, int] = {}
        self.sleeps: dict[threading.Thread, dict[str, int]] = {}
        self.sleep_asks: dict[str, float | None] = {}
        # ... and per learner line how many saw it ready to run Python there (running, or
        # waiting for the GIL): with little CPU got, the GIL was held by someone else.
        self.ready: dict[threading.Thread, dict[str, int]] = {}

    def step(self) -> tuple[str, Any] | None:
        """One look.  ("stuck", Verdict) or ("guard", (guard, Verdict)) once confirmed."""
        self.interval = LOOK_INTERVAL
        self._sample_cpu()
        d = self.detector
        snap = take_snapshot(d, self.me, self.deadline)
        self._sample_sleeps(snap)
        if snap.why and self.progress.hog is not None \
                and snap.at - self.progress.hog_at >= HOLD_CONFIRM:
            snap.children = children_alive()  # only a hog about to be called needs to know
        with d.guards_lock:
            guards = list(d.guards)
        decision = decide(self.progress, snap, deadline=self.deadline, known=d.known,
                          guards=guards)
        self.progress, self.interval = decision.progress, decision.interval
        d.known.update(decision.learned)
        if decision.kind is None:
            return None
        verdict = diagnose(decision.threads, self.what, is_learner=d.is_learner,
                           hooks=d.hooks, header=decision.header)
        if decision.kind == "guard":
            return "guard", (decision.guard, verdict)
        return "stuck", verdict

    def _sample_sleeps(self, snap: Snapshot) -> None:
        for look in snap.looks:
            if look.thread is None:
                continue
            self.seen[look.thread] = self.seen.get(look.thread, 0) + 1
            if asleep_in_sleep(look):
                site = fr.site(look.learner)
                counts = self.sleeps.setdefault(look.thread, {})
                counts[site] = counts.get(site, 0) + 1
                if site not in self.sleep_asks:
                    self.sleep_asks[site] = sleep_seconds(look.learner)
            elif look.learner is not None and self._in_python(look):
                counts = self.ready.setdefault(look.thread, {})
                site = fr.site(look.learner)
                counts[site] = counts.get(site, 0) + 1

    @staticmethod
    def _in_python(look) -> bool:
        """``look``'s thread wants to run Python: the kernel says it runs or waits for the
        GIL, and its innermost frame is no wait of the standard library (a Condition, a
        queue, a selector, whose short timeout would look the same) nor of the harness."""
        if not look.frames or not ready_for_python(look.kstate, look.syscall,
                                                   now=look.read_at,
                                                   switch=sys.getswitchinterval()):
            return False
        code = look.frames[0].f_code
        return not is_kit(code.co_filename) and not (
            is_stdlib(code.co_filename) and code.co_name in _WAITS)

    def _sleepers(self) -> dict[threading.Thread, tuple[str, int, int]]:
        """Threads seen asleep in ``time.sleep`` at a learner line at most looks of the wait
        (at least half): (their usual line, looks asleep, looks)."""
        out = {}
        for thread, counts in self.sleeps.items():
            looks = self.seen.get(thread, 0)
            seen = sum(counts.values())
            if looks >= 3 and seen * 2 >= looks:
                out[thread] = (max(counts, key=counts.get), seen, looks)
        return out

    def sleeping(self) -> tuple[str, ...]:
        """Threads seen asleep in ``time.sleep`` at a learner line at most looks of the wait:
        the wait ran out because they are slow, not because they hung.  One sentence per
        line of code, naming every thread that slept there."""
        by_site: dict[str, list[tuple[str, int, int]]] = {}
        for thread, (site, seen, looks) in self._sleepers().items():
            by_site.setdefault(site, []).append((thread.name, seen, looks))
        return tuple(slow_sentence(sorted(found), site, self.sleep_asks.get(site))
                     for site, found in sorted(by_site.items()))

    def _sample_cpu(self) -> None:
        """Where CPU goes while we wait: per thread, its learner line at each look.  Only the
        threads that wanted a CPU since the last look (used one, or waited runnable for one)
        are walked: the others add nothing to where CPU goes."""
        hot: list[threading.Thread] = []
        for thread in threading.enumerate():
            if thread.ident is None or thread.ident == self.me:
                continue
            cpu = thread_cpu_seconds(thread)
            demand = thread_demand_seconds(thread)
            if cpu is None or demand is None:
                continue
            self.cpu_start.setdefault(thread, cpu)
            self.demand_start.setdefault(thread, demand)
            before = self.last_demand.get(thread)
            self.last_cpu[thread] = cpu
            self.last_demand[thread] = demand
            self.looks_at[thread] = self.looks_at.get(thread, 0) + 1
            if before is None or demand - before <= STILL_CPU:
                continue
            self.moved[thread] = self.moved.get(thread, 0) + 1
            hot.append(thread)
        if not hot:
            return
        stacks = fr.stacks({thread.ident for thread in hot})
        for thread in hot:
            learner = next((f for f in stacks.get(thread.ident, [])
                            if self.detector.is_learner(f.f_code.co_filename)), None)
            if learner is not None:
                site = fr.site(learner)
                counts = self.hot.setdefault(thread, {})
                counts[site] = counts.get(site, 0) + 1

    def spinning(self) -> tuple[str, ...]:
        """Threads that burnt CPU through most of the wait, with their hottest learner line."""
        elapsed = time.monotonic() - self.started
        out = []
        asleep = self._sleepers()
        starved = self._starved()
        for thread, counts in self.hot.items():
            if thread in asleep or thread in starved:
                # Asleep in time.sleep at most looks: slow.  On a crowded machine each of its
                # wakeups waits for a CPU, which its demand counts as wanting one.
                continue
            used, wanted = self._used(thread)
            if not counts or not spins(used=used, wanted=wanted, elapsed=elapsed,
                                       moved=self.moved.get(thread, 0),
                                       looks=max(1, self.looks_at.get(thread, 0) - 1)):
                continue
            site = max(counts, key=counts.get)
            filename, _, line = site.rpartition(":")
            queued = wanted - used
            busy = (f" (and {queued:.1f} s more ready to run, waiting for a CPU: the machine is "
                    "busy)" if queued >= used else "")
            out.append(f"thread '{thread.name}' was spinning: {used:.1f} s of "
                       f"CPU in {elapsed:.1f} s, mostly at {site}: "
                       f"`{source_line(os.path.abspath(filename), int(line))}`{busy}")
        return tuple(out)

    def _used(self, thread: threading.Thread) -> tuple[float, float]:
        """CPU ``thread`` used over the wait, and its demand (used plus queued for a CPU)."""
        return (self.last_cpu.get(thread, 0.0) - self.cpu_start.get(thread, 0.0),
                self.last_demand.get(thread, 0.0) - self.demand_start.get(thread, 0.0))

    def _starved(self) -> dict[threading.Thread, tuple[str, threading.Thread]]:
        """Threads that waited for the GIL through most of the wait: their usual learner
        line, and the thread that used the most CPU meanwhile (holding the GIL)."""
        elapsed = time.monotonic() - self.started
        out = {}
        for thread, counts in self.ready.items():
            others = [t for t in self.last_cpu if t is not thread]
            if not others:
                continue
            holder = max(others, key=lambda t: self._used(t)[0])
            used, wanted = self._used(thread)
            if gil_starved(ready=sum(counts.values()), looks=self.seen.get(thread, 0),
                           used=used, wanted=wanted, elapsed=elapsed,
                           holder_used=self._used(holder)[0]):
                out[thread] = (max(counts, key=counts.get), holder)
        return out

    def waiting_for_gil(self) -> tuple[str, ...]:
        """Threads ready to run Python through most of the wait that got little CPU while
        another thread held the interpreter: not stuck, not spinning -- kept off it."""
        elapsed = time.monotonic() - self.started
        out = []
        for thread, (site, holder) in sorted(self._starved().items(),
                                             key=lambda item: item[0].name):
            hot = self.hot.get(holder)
            out.append(gil_sentence(thread.name, site, self._used(thread)[0], elapsed,
                                    holder.name, self._used(holder)[0],
                                    max(hot, key=hot.get) if hot else None))
        return tuple(out)
