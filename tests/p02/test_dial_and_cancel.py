"""P02 acceptance: what a dial ends as, and cancelling a loop that sleeps in select()."""
from __future__ import annotations

import errno
import statistics
import time

import pytest

from workbook.testkit import check, note

from tests.p02.support import is_closed


def _statuses(results) -> list[tuple[str, str]]:
    return [(r.name, r.status) for r in results]


# -- p02.outcomes ---------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.outcomes")
def test_dials_to_a_listening_port_connect_and_to_a_closed_port_fail_with_econnrefused(
        h, net):
    dials = [h.dial("up-1", net.listening), h.dial("down", net.refusing),
             h.dial("up-2", net.listening)]
    results = h.start(dials, h.control()).result(
        what="run() over three dials that all finish on their own")
    names = [r.name for r in results]
    check(names == ["up-1", "down", "up-2"],
          f"run() must return one result per dial in the order given; got {names}")
    got = _statuses(results)
    check(got == [("up-1", "connected"), ("down", "failed"), ("up-2", "connected")],
          f"expected up-1 and up-2 'connected' and down 'failed', got {got}")
    check(results[1].error == errno.ECONNREFUSED,
          f"a refused connect reports error=errno.ECONNREFUSED ({errno.ECONNREFUSED}) read "
          f"from SO_ERROR; got error={results[1].error!r}")
    check(results[0].error is None and results[2].error is None,
          "error stays None unless status is 'failed'")
    h.check_no_leak("run() returned")


@pytest.mark.checkpoint("p02.outcomes")
def test_a_dial_still_pending_at_the_deadline_ends_timeout_but_not_before_it(h, net):
    dials = [h.dial("stuck", net.pending), h.dial("up", net.listening)]
    started = time.perf_counter()
    r = h.start(dials, h.control(), timeout=0.3)
    results = r.result(what="run(timeout=0.3)")
    elapsed = r.returned_at - started
    got = _statuses(results)
    check(got == [("stuck", "timeout"), ("up", "connected")],
          f"expected stuck 'timeout' and up 'connected', got {got}")
    check(elapsed >= 0.29,
          f"run(timeout=0.3) returned after {elapsed:.3f} s: the deadline had not passed yet")
    h.check_no_leak("run() timed out", pitfall="cancelled_left_open")


@pytest.mark.checkpoint("p02.outcomes")
def test_run_with_no_dials_returns_an_empty_list_and_closes_the_control(h):
    control = h.control()
    results = h.start([], control).result(what="run([]) with nothing to wait for")
    check(list(results) == [], f"run([]) must return [], got {results!r}")
    check(is_closed(control.reader) and is_closed(control.writer),
          "run() owns the control: both ends are closed when it returns")
    h.check_no_leak("run([]) returned")


# -- p02.cancel ------------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.cancel")
def test_a_cancel_from_another_thread_marks_pending_dials_cancelled_and_keeps_finished_ones(
        h, net):
    dials = [h.dial("up", net.listening), h.dial("down", net.refusing),
             h.dial("stuck", net.pending)]
    control = h.control()
    r = h.start(dials, control)
    h.wait_blocked(r, pending=2, what="the two quick dials have finished and the loop sleeps "
                                      "in select() waiting for the third")
    # From the test thread, not the loop's thread:
    results = h.cancel(r, control, what="run() after request_stop() from another thread")
    got = _statuses(results)
    check(got[:2] == [("up", "connected"), ("down", "failed")],
          f"dials that finished before the cancel keep their status; got {got}",
          pitfall="cancelled_mislabelled")
    check(got[2] == ("stuck", "cancelled"),
          f"a dial still pending when stop is requested ends 'cancelled'; got {got[2]}",
          pitfall="cancelled_mislabelled")
    check(is_closed(dials[2].sock),
          "the cancelled dial's socket is still open after run() returned: the loop owns it "
          "and must close it", pitfall="cancelled_left_open")
    h.check_no_leak("a cancelled run", pitfall="cancelled_left_open")


@pytest.mark.checkpoint("p02.cancel")
def test_cancel_latency_over_twenty_cancels_is_milliseconds(h, net, spy):
    latencies = []
    for i in range(20):
        control = h.control()
        stuck = h.dial(f"stuck-{i}", net.pending)
        selects_so_far = spy.entered
        r = h.start([stuck], control)
        h.wait_blocked(r, selects=selects_so_far + 1)
        t0 = time.perf_counter()
        results = h.cancel(r, control, what=f"run() after cancel #{i + 1}")
        check(_statuses(results) == [(f"stuck-{i}", "cancelled")],
              f"cancel #{i + 1}: expected the pending dial 'cancelled', got "
              f"{_statuses(results)}", pitfall="cancelled_mislabelled")
        latencies.append(r.returned_at - t0)
    median = statistics.median(latencies)
    note(f"cancel latency (request_stop → run returned): median {median * 1e3:.2f} ms, "
         f"max {max(latencies) * 1e3:.2f} ms over {len(latencies)} cancels")
    check(median < 0.25,
          f"median cancel latency {median * 1e3:.0f} ms: a woken loop should return in "
          "milliseconds")
    h.check_no_leak("twenty cancelled runs", pitfall="cancelled_left_open")
