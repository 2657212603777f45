"""``explore.outside``: a controlled thread that does not hand control back is slow (wait
on), busy (it wants the CPU without reaching a point) or blocked (asleep in the kernel on
something the explorer does not control) -- decided from its demand, never the wall clock."""
from __future__ import annotations

import threading

import pytest

from workbook.explore import outside
from workbook.explore.outside import Sample, decide


def test_a_thread_whose_demand_stands_still_for_two_windows_is_blocked():
    assert decide([Sample(0.0, 0.5, "S")]) == "wait"
    assert decide([Sample(0.0, 0.5, "S"), Sample(0.01, 0.5, "S")]) == "blocked"


def test_a_thread_that_wants_the_cpu_is_slow_until_it_has_wanted_it_for_the_busy_limit():
    # Under load it runs a fifth of the time: its CPU grows slowly, its demand at wall rate.
    slow = [Sample(0.5, 0.5, "R")] * 5
    assert decide(slow) == "wait"
    assert decide(slow + [Sample(0.5, 0.5, "R")]) == "busy"


def test_one_parked_window_between_running_ones_is_not_blocked():
    assert decide([Sample(0.0, 0.5, "S"), Sample(0.4, 0.5, "R"), Sample(0.0, 0.5, "S")]) \
        == "wait"


def test_a_thread_that_polls_a_real_select_is_blocked_though_it_wakes_now_and_then():
    assert decide([Sample(0.02, 0.5, "S"), Sample(0.03, 0.5, "R")]) == "blocked"


def test_without_demand_figures_the_kernel_state_decides():
    assert decide([Sample(None, 0.5, "S"), Sample(None, 0.5, "D")]) == "blocked"
    assert decide([Sample(None, 0.5, "R")] * 5) == "wait"
    assert decide([Sample(None, 0.5, "R")] * 6) == "busy"


def _thread(body) -> threading.Thread:
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


def _wait_for(body, end) -> str:
    """``outside.wait_for`` on a thread running ``body``, which never hands control back;
    ``end()`` lets it finish afterwards."""
    t = _thread(body)
    back = threading.Lock()
    back.acquire()
    try:
        return outside.wait_for(back, t)
    finally:
        end()
        t.join(5)


def test_wait_for_calls_a_thread_parked_on_a_real_lock_blocked(monkeypatch):
    monkeypatch.setattr(outside, "WALL_LIMIT", 0.05)
    gate = threading.Lock()
    gate.acquire()
    assert _wait_for(lambda: gate.acquire(timeout=30), gate.release) == "blocked"


def test_wait_for_calls_a_thread_that_spins_without_a_point_busy(monkeypatch):
    monkeypatch.setattr(outside, "WALL_LIMIT", 0.05)
    monkeypatch.setattr(outside, "BUSY_SECONDS", 0.6)
    stop = threading.Event()
    spin = lambda: [None for _ in iter(stop.is_set, True)]  # noqa: E731
    assert _wait_for(spin, stop.set) == "busy"


def test_wait_for_returns_as_soon_as_the_thread_hands_control_back():
    back = threading.Lock()
    t = _thread(lambda: None)
    assert outside.wait_for(back, t) == "back"  # released: taken at once


@pytest.mark.parametrize("mine", [False, True])
def test_where_names_the_call_and_the_innermost_line_of_the_learners_file(mine):
    gate = threading.Lock()
    gate.acquire()

    def waits_here():
        gate.acquire(timeout=30)

    t = _thread(waits_here)
    try:
        for _ in range(1000):  # bounded: until it is in the call (its frame says so)
            text = outside.where(t, lambda f: None)
            if "waits_here" in text:
                break
            threading.Event().wait(0.01)
        learner = (lambda f: f.f_code if f.f_code.co_name == "waits_here" else None) \
            if mine else (lambda f: None)
        text = outside.where(t, learner)
        line = waits_here.__code__.co_firstlineno + 1
        call = "in the system call futex(), " if text.startswith("in the system") else ""
        if mine:
            assert text == f"{call}at line {line} of your file: gate.acquire(timeout=30)", text
        else:
            assert text == f"{call}in waits_here() of test_outside.py line {line}", text
    finally:
        gate.release()
        t.join(5)


def test_the_learner_reads_what_the_thread_did_and_where():
    assert outside.explain("T2", "blocked", "at line 7 of your file: q.get()", "a lock") == (
        "T2 waits outside a lock the explorer controls (a primitive of another module, such "
        "as a ready-made queue, or a real system call): at line 7 of your file: q.get()")
    assert outside.explain("T1", "busy", "", "a lock or the clock") == (
        "T1 kept running for 3 s of CPU without reaching a lock or the clock the explorer "
        "controls (a loop that never waits on any of them?)")
