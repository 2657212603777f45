"""The learner's loop in the terminal: a check drawn live as it runs, its result shown and
recorded, and ``--watch`` (check again on every save, rustlings-style)."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from workbook import manifest, progress, render
from workbook.errors import UsageError
from workbook.run import Result, run_check
from workbook.terminal import console


def record(problem: manifest.Problem, result: Result) -> str | None:
    """Record a check of the learner's own file; the advice to print after it, if any."""
    return progress.repeat_advice(progress.record_check(problem.id, result), result,
                                  problem.id)


def show(problem: manifest.Problem, result: Result, learner: bool,
         advice: str | None) -> None:
    """One check's report, as ``./check.sh pNN`` and each ``--watch`` round print it."""
    console.print(render.result_view(result, problem, recorded=learner,
                                     hints_seen=progress.hints_seen(problem.id)))
    if advice:
        console.print(advice, style="yellow")


def live_check(problem: manifest.Problem, target: Path) -> Result:
    """``run_check`` with the checklist drawn live on a terminal: each checkpoint ticks as
    it finishes, a spinner turns on the running one (redrawn ten times a second, so nothing
    is silent for more than a tenth of a second).  The drawing goes once the run ends."""
    from rich.live import Live

    from workbook.run import Tally, iter_check
    tally = Tally(problem)
    started = time.monotonic()
    importing = True

    def frame():
        return render.live_checklist(problem, tally.finished(limit=problem.time_limit),
                                     time.monotonic() - started, importing=importing)

    with Live(frame(), console=console, refresh_per_second=10, transient=True,
              get_renderable=frame):
        for item in iter_check(problem, target, poll=0.05):
            if isinstance(item, Result):
                return item
            tally.add(item.record)
            if item.record.event in ("collected", "import_error"):
                importing = False
    raise AssertionError("iter_check ends with its Result")  # pragma: no cover


def is_learner_file(problem: manifest.Problem, target: Path) -> bool:
    """True when ``target`` is the learner's own file of ``problem`` (mine/...)."""
    mine = os.environ.get("WORKBOOK_MINE")  # the learner's directory (tests point it away)
    own = Path(mine) / problem.learner_file.name if mine else problem.learner_file
    try:
        return Path(target).resolve() == own.resolve()
    except OSError:
        return False


def watch(problem: manifest.Problem, target: Path) -> int:
    """Check ``target`` now and again each time it is saved, until Ctrl-C (rustlings-style)."""
    try:
        import watchfiles
    except ImportError:
        raise UsageError("--watch needs watchfiles: run it through ./check.sh") from None
    learner = is_learner_file(problem, target)
    target = Path(target).resolve()

    # Ctrl-C sets ``stop``, which the watcher looks at between its half-second waits, and
    # interrupts a check only while one runs: leaving never depends on a signal reaching
    # Python while the main thread sits in the watcher's native code.
    stop, checking = threading.Event(), threading.Event()

    def on_sigint(signum, frame) -> None:
        stop.set()
        if checking.is_set():
            raise KeyboardInterrupt

    def check_once() -> None:
        console.clear()
        checking.set()
        try:
            result = (live_check(problem, target) if console.is_terminal
                      else run_check(problem, target))
        finally:
            checking.clear()
        show(problem, result, learner, record(problem, result) if learner else None)
        console.print(f"[dim]watching {render.shown_path(target)} · save to check again · "
                      "Ctrl-C to leave[/dim]")

    def signature() -> tuple[int, int] | None:
        try:
            st = target.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    # A save that lands after a check but before the watcher is up sends no event; the
    # file's signature, compared on every (half-second) timeout, catches it.
    seen = signature()
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        check_once()
        from workbook.tuning import WATCH_GROUP_MS, WATCH_QUIET_MS
        # A burst of saves is one check: the changes are yielded once the file has been
        # quiet for WATCH_QUIET_MS (watchfiles' ``step``), or after WATCH_GROUP_MS.
        for changes in watchfiles.watch(target.parent, debounce=WATCH_GROUP_MS,
                                        step=WATCH_QUIET_MS, rust_timeout=500,
                                        yield_on_timeout=True, stop_event=stop,
                                        raise_interrupt=False,
                                        watch_filter=lambda _c, path: Path(path) == target):
            if stop.is_set():
                break
            now = signature()
            if now is not None and (changes or now != seen):
                seen = now
                check_once()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, previous)
    console.print("[dim]stopped watching[/dim]")
    return 0
