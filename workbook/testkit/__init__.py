"""Helpers shared by every acceptance set.

Rules the helpers enforce: every wait is bounded, helper threads are daemons, and a
failure carries a diagnosis (and, where it fits, the name of the pitfall it looks like).

The package in layers, each importing only those below it (no cycle):

    testkit.loop     LoopThread and ``bounded``: asyncio driven from a test thread
    testkit.waits    bounded waits (join, wait_until, ...) and the main-thread watchdog
    testkit.threads  daemon threads, interrupts, CPU use over a window
    testkit.checks   Failure, fail, check, note
    ---------------------------------------------------------------------------------
    stuck.detector   the session's detector (``DETECTOR``) and the watch of one wait
    stuck.explain    the verdict's text
    stuck.decide     the pure decision: lock cycles, hogs, confirmation
    stuck.observe    one look at the process, as plain data
    stuck.model      that plain data: ThreadLook, Snapshot, Verdict
    stuck.frames     stacks, and the locks a learner line holds or waits for
    stuck.procfs     the kernel's view (the only code that reads /proc)
    stuck.code       whose code a file is
    tuning           every tuning constant, with its reason

Everything the acceptance sets, the plugin and grading use is importable from here.
"""
from __future__ import annotations

from workbook.stuck.code import is_submission_code
from workbook.stuck.detector import DETECTOR, CheckLog, Watch
from workbook.stuck.frames import current_frames, run_hooked, stacks
from workbook.stuck.model import Snapshot, ThreadLook, Verdict
from workbook.stuck.procfs import kernel_state, kernel_tid, run_delay_seconds, thread_cpu_seconds
from workbook.testkit.checks import Failure, Hung, check, fail, note, set_note_sink
from workbook.testkit.loop import Guard, LoopThread, bounded
from workbook.testkit.threads import (DaemonThread, Stopwatch, asleep_in_selector, cpu_used,
                                      interrupt_thread, others_cpu_seconds, parked, quiet,
                                      release_interrupts, start_daemon)
from workbook.testkit.waits import (Outcome, Stuck, TimedOut, WaitTimedOut, Watchdog,
                                    done_within, finished, join, wait_event, wait_until,
                                    watch)
from workbook.tuning import (BOUND, CONFIRM, CONFIRM_LOOKS, CYCLE_LOOK, HOLD_CONFIRM,
                             PARKED_CPU, STILL_CPU)

__all__ = [
    "BOUND", "CONFIRM", "CONFIRM_LOOKS", "CYCLE_LOOK", "DETECTOR", "HOLD_CONFIRM",
    "PARKED_CPU", "STILL_CPU", "CheckLog", "DaemonThread", "Failure", "Guard", "Hung",
    "LoopThread", "Outcome", "Snapshot", "Stopwatch", "Stuck", "ThreadLook", "TimedOut",
    "Verdict",
    "WaitTimedOut", "Watch", "Watchdog", "add_stuck_hook", "asleep_in_selector",
    "begin_check", "bounded", "check", "cpu_used", "current_frames", "done_within", "fail",
    "finished", "interrupt_thread", "is_submission_code", "join", "kernel_state", "kernel_tid",
    "note", "others_cpu_seconds", "parked", "quiet", "release_interrupts", "run_delay_seconds",
    "run_hooked", "set_learner_file", "set_note_sink", "stacks", "start_daemon",
    "thread_cpu_seconds", "wait_event", "wait_until", "watch",
]


def set_learner_file(path: str) -> None:
    """Tell the detector which file is the learner's (frames there are 'learner lines')."""
    DETECTOR.set_learner_file(path)


def begin_check() -> CheckLog:
    """Called by the plugin as a check starts: threads alive now belong to earlier checks.
    Returns the check's log, where its stuck verdicts are kept."""
    return DETECTOR.begin_check()


def add_stuck_hook(hook) -> None:
    """A problem's tests may add lines to a stuck diagnosis (e.g. "1 item is queued")."""
    DETECTOR.add_hook(hook)


def __getattr__(name: str):
    if name == "verdicts":  # the current check's verdicts (read ``CheckLog`` instead)
        return DETECTOR.check.verdicts
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
