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


def _in_a_thread(fn) -> list:
    """What ``fn`` returns, called in a thread of its own (a controller of its own runs);
    an empty list if it did not return within 30 s."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(30)
    return out


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
    def controller():
        Scheduler(0).run([("setup", lambda: None), ("T1", lambda: None)])
        return set(os.sched_getaffinity(0))

    assert _in_a_thread(controller) == [ALLOWED]


@needs_two
def test_here_names_a_cpu_this_process_may_use():
    assert onecpu.here() in ALLOWED


@needs_two
def test_the_cpu_read_from_proc_is_the_one_a_thread_is_kept_on():
    def on_each():
        seen = []
        for cpu in sorted(ALLOWED)[:2]:
            os.sched_setaffinity(0, (cpu,))
            seen.append((cpu, procfs.current_cpu()))
        return seen

    [seen] = _in_a_thread(on_each)
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


@needs_two
def test_runs_in_a_row_keep_the_controller_on_its_cpu_and_the_block_lets_it_go():
    def controller():
        between = []
        with onecpu.kept():
            for _ in range(3):
                sched = Scheduler(0)
                sched.run([("setup", lambda: None), ("T1", lambda: None)])
                between.append((sched.cpu, set(os.sched_getaffinity(0))))
        return between, set(os.sched_getaffinity(0))

    [(between, after)] = _in_a_thread(controller)
    cpu = between[0][0]
    assert between == [(cpu, {cpu})] * 3  # the same CPU, kept from one run to the next
    assert after == ALLOWED


@needs_two
def test_a_controller_kept_longer_than_hold_lets_go_after_its_run(monkeypatch):
    monkeypatch.setattr(onecpu, "HOLD", 0.0)

    def controller():
        with onecpu.kept():
            Scheduler(0).run([("setup", lambda: None), ("T1", lambda: None)])
            return set(os.sched_getaffinity(0))

    assert _in_a_thread(controller) == [ALLOWED]


@needs_two
def test_a_kept_block_left_by_an_exception_lets_the_controller_go():
    def controller():
        try:
            with onecpu.kept():
                onecpu.pin(sorted(ALLOWED)[0])
                raise KeyError("boom")
        except KeyError:
            return set(os.sched_getaffinity(0))

    assert _in_a_thread(controller) == [ALLOWED]
