"""A controlled run keeps its threads on one CPU (hand-offs are cheaper there) and lets the
controller go when it ends; where pinning is impossible, nothing changes."""
from __future__ import annotations

import os
import threading

import pytest

from workbook.explore import onecpu
from workbook.explore.sched import Scheduler
from workbook.stuck import procfs

ALLOWED = set(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(ALLOWED) < 2, reason="one CPU: nothing to pin")


@needs_two
def test_each_thread_of_a_run_is_kept_on_the_cpu_the_controller_was_on(monkeypatch):
    # Two runs on two CPUs in turn: the pooled worker threads of the first (which would
    # keep the first CPU they inherited) follow the second run to its CPU.
    for cpu in sorted(ALLOWED)[:2] * 2:
        monkeypatch.setattr(onecpu, "here", lambda cpu=cpu: cpu)
        seen: dict[str, set[int]] = {}

        def body(name):
            return lambda: seen.__setitem__(name, set(os.sched_getaffinity(0)))

        sched = Scheduler(0)
        sched.run([("setup", body("setup")), ("T1", body("T1")), ("T2", body("T2"))])
        assert sched.cpu == cpu
        assert seen == {name: {cpu} for name in ("setup", "T1", "T2")}


@needs_two
def test_the_controller_may_run_anywhere_again_once_the_run_is_over():
    done: list[set[int]] = []

    def controller():
        Scheduler(0).run([("setup", lambda: None), ("T1", lambda: None)])
        done.append(set(os.sched_getaffinity(0)))

    thread = threading.Thread(target=controller, daemon=True)
    thread.start()
    thread.join(30)
    assert done == [ALLOWED]


@needs_two
def test_here_names_a_cpu_this_process_may_use():
    assert onecpu.here() in ALLOWED


@needs_two
def test_the_cpu_read_from_proc_is_the_one_a_thread_is_kept_on():
    seen: list[tuple[int, int | None]] = []

    def on_each():
        for cpu in sorted(ALLOWED)[:2]:
            os.sched_setaffinity(0, (cpu,))
            seen.append((cpu, procfs.current_cpu()))

    thread = threading.Thread(target=on_each, daemon=True)
    thread.start()
    thread.join(30)
    assert len(seen) == 2 and all(cpu == read for cpu, read in seen), seen


def test_nothing_is_pinned_where_one_cpu_or_no_affinity_is_available(monkeypatch):
    monkeypatch.setattr(onecpu, "_ALLOWED", {0})
    assert onecpu.here() is None
    before = set(os.sched_getaffinity(0))
    onecpu.pin(None)
    assert set(os.sched_getaffinity(0)) == before
    monkeypatch.setattr(onecpu, "_ALLOWED", None)
    assert onecpu.here() is None
    onecpu.release()  # nothing to give back: no error either
