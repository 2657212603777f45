"""``testkit.parked``: a thread is parked when, over the window, it neither ran nor sat
runnable waiting for a CPU.  A preempted thread uses no CPU, yet it is not blocked."""
from __future__ import annotations

import threading
import time

from workbook.testkit import DaemonThread, parked, start_daemon
from workbook.testkit import threads as kit_threads


def test_a_thread_blocked_on_an_event_is_parked():
    release = threading.Event()
    thread = start_daemon(release.wait, 30, name="blocked")
    try:
        deadline = time.monotonic() + 10
        while not parked(thread, 0.05):  # it gets there once started; bounded
            assert time.monotonic() < deadline, "a thread in Event.wait never looked parked"
    finally:
        release.set()
        thread.join(10)


def test_a_spinning_thread_is_not_parked():
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    thread = start_daemon(spin, name="spinner")
    try:
        assert not parked(thread, 0.05)
    finally:
        stop.set()
        thread.join(10)


def test_a_thread_that_ended_is_not_parked():
    thread = DaemonThread(lambda: None, name="done")
    thread.start()
    thread.join(10)
    assert not parked(thread, 0.01)


def test_a_preempted_thread_whose_queue_time_grows_is_not_parked(monkeypatch):
    """The kernel's view of a runnable thread on a crowded machine: its CPU clock stands
    still while its time queued for a CPU grows with the wall clock."""
    release = threading.Event()
    thread = start_daemon(release.wait, 30, name="queued")
    queued = iter([1.0, 1.05])  # demand before and after the window: 50 ms queued, no CPU
    monkeypatch.setattr(kit_threads, "thread_demand_seconds", lambda t: next(queued))
    try:
        assert not parked(thread, 0.05)
    finally:
        release.set()
        thread.join(10)
