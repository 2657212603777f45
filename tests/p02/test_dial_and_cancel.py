"""P02 acceptance: what a dial ends as, and cancelling a loop that sleeps in select()."""
from __future__ import annotations

import collections
import dataclasses
import errno
import select
import socket
import statistics
import time

import pytest

from workbook.testkit import BOUND, check, fail, note

from tests.p02.support import CANCEL_BOUND, is_closed, open_fds


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
@pytest.mark.parametrize("zero", [0, 0.0], ids=["int", "float"])
def test_timeout_zero_answers_timeout_for_a_pending_dial_at_once(h, net, zero):
    r = h.start([h.dial("stuck", net.pending)], h.control(), timeout=zero)
    results = r.result(CANCEL_BOUND, what=f"run(timeout={zero!r}) with a dial still pending "
                       "(the deadline has passed when run begins: answer at once)")
    check(_statuses(results) == [("stuck", "timeout")],
          f"run(timeout={zero!r}): a dial still pending at the deadline ends 'timeout', got "
          f"{_statuses(results)}")
    h.check_no_leak(f"run(timeout={zero!r}) returned", pitfall="cancelled_left_open")


HUGE = {"inf": float("inf"), "1e12": 1e12, "10**400": 10**400}


@pytest.mark.checkpoint("p02.outcomes")
@pytest.mark.parametrize("timeout", list(HUGE))
def test_a_deadline_too_far_for_any_selector_is_just_a_long_wait(h, net, timeout):
    # epoll and poll take at most about 24.8 days (C int milliseconds): a longer deadline
    # must not reach select() as it is, where it raises OverflowError.
    control = h.control()
    r = h.start([h.dial("stuck", net.pending)], control, timeout=HUGE[timeout])
    h.wait_blocked(r, what=f"run(timeout={timeout}) waits in select()")
    results = h.end(r, control, what=f"run(timeout={timeout}) after request_stop()")
    check([x.name for x in results] == ["stuck"],
          f"run(timeout={timeout}) then a cancel returned {results!r}")


@pytest.mark.checkpoint("p02.outcomes")
def test_the_deadline_counts_from_the_start_of_run_not_from_the_latest_wakeup(h, net, spy):
    control = h.control()
    started = time.perf_counter()
    r = h.start([h.dial("stuck", net.pending)], control, timeout=1.0)
    h.wait_blocked(r)
    time.sleep(max(0.0, started + 0.6 - time.perf_counter()))  # spacing, not a proof
    control.writer.send(b"x")  # a stray byte wakes the loop 0.6 s into its 1 s deadline
    results = r.result(what="run(timeout=1.0) woken by a stray byte after 0.6 s")
    elapsed = r.returned_at - started
    check(_statuses(results) == [("stuck", "timeout")],
          f"expected the pending dial 'timeout', got {_statuses(results)}")
    check(0.99 <= elapsed < 1.4,
          f"run(timeout=1.0), woken once after 0.6 s, returned after {elapsed:.2f} s: the "
          "deadline is fixed when run begins; each wait is for what is left of it")


@pytest.mark.checkpoint("p02.outcomes")
def test_a_flood_of_notification_bytes_does_not_keep_run_past_its_deadline(h, net, spy):
    """Stray bytes (no stop state) keep arriving: before every select() the control is
    topped up, so it is readable at every look, as under a flood from another thread.  The
    deadline must still end the run: counted in select() calls, not seconds, a loop that
    begins 50 of them after its deadline without returning spins past it."""
    control = h.control()
    starts: list[float] = []  # when each select() began (the loop's own thread)

    def top_up() -> None:
        starts.append(time.monotonic())
        try:
            control.writer.send(b"f" * 4096, socket.MSG_DONTWAIT)
        except OSError:  # full (or closed at the end): bytes are pending anyway
            pass

    spy.on_select = top_up
    r = h.start([h.dial("stuck", net.pending)], control, timeout=0.3)

    def past_deadline() -> int:
        # run()'s deadline is no later than 0.3 s after its first select() began
        return sum(t > starts[0] + 0.3 for t in starts) if starts else 0

    spy.settle(lambda: not r.alive or past_deadline() >= 50, BOUND,
               what="run(timeout=0.3) under a flood of stray bytes")
    late = past_deadline()
    spy.on_select = None
    if r.alive:
        h.end(r, control, what="run() spinning past its deadline, after request_stop()")
        fail(f"run(timeout=0.3) was still going after {min(late, 50)} select() calls that "
             "began past its deadline, with stray bytes always pending: a loop that handles "
             "whatever is ready and looks at the deadline only when nothing is, never times "
             "out while a flood lasts -- look at the deadline after every round")
    results = r.result(what="run(timeout=0.3) under a flood of stray bytes")
    check(_statuses(results) == [("stuck", "timeout")],
          f"run(timeout=0.3) under a flood of stray bytes (no stop requested): expected the "
          f"pending dial 'timeout', got {_statuses(results)}")
    h.check_no_leak("run(timeout=0.3) returned under a flood")


@pytest.mark.checkpoint("p02.outcomes")
@pytest.mark.parametrize("kind", ["tuple", "UserList"])
def test_dials_may_be_any_sequence(h, net, kind):
    make = tuple if kind == "tuple" else collections.UserList
    dials = make([h.dial("up", net.listening), h.dial("down", net.refusing)])
    results = h.start(dials, h.control()).result(what=f"run() over dials given as a {kind}")
    check(_statuses(results) == [("up", "connected"), ("down", "failed")],
          f"dials given as a {kind}: expected up 'connected' and down 'failed', got "
          f"{_statuses(results)}")
    h.check_no_leak(f"run() over a {kind} of dials returned")


@pytest.mark.checkpoint("p02.outcomes")
def test_run_with_no_dials_returns_an_empty_list_and_closes_the_control(h):
    control = h.control()
    results = h.start([], control).result(what="run([]) with nothing to wait for")
    check(list(results) == [], f"run([]) must return [], got {results!r}")
    check(is_closed(control.reader) and is_closed(control.writer),
          "run() owns the control: both ends are closed when it returns")
    h.check_no_leak("run([]) returned")


@pytest.mark.checkpoint("p02.outcomes")
def test_dial_raises_oserror_and_closes_its_socket_when_the_connect_fails_on_the_spot(
        h, net, monkeypatch):
    control = h.control()
    up = h.dial("up", net.listening)
    # The spec's dial() starts the connect with connect_ex on a non-blocking socket; make
    # that report an immediate failure (nothing reaches the network).
    before = open_fds()
    with monkeypatch.context() as patch:
        patch.setattr(socket.socket, "connect_ex", lambda self, address: errno.ENETUNREACH)
        try:
            d = h.impl.dial("nowhere", ("127.0.0.1", 9))
        except OSError as exc:
            check(exc.errno == errno.ENETUNREACH,
                  f"dial() raised {exc!r}; expected the connect's errno ENETUNREACH")
            leaked = open_fds() - before
            check(not leaked, f"dial() failed on the spot and left {len(leaked)} socket(s) "
                              "open: it closes the socket it made before raising")
        else:
            d.sock.close()
            fail("dial() returned a Dial although the connect failed on the spot; it raises "
                 "OSError (and closes the socket)")
    results = h.start([up], control).result(what="run() over the dial that did start")
    check(_statuses(results) == [("up", "connected")],
          f"expected up 'connected', got {_statuses(results)}")


@pytest.mark.checkpoint("p02.outcomes")
def test_a_connect_that_completes_at_once_is_a_dial_like_any_other(h, net, monkeypatch):
    real = socket.socket.connect_ex

    def at_once(self, address):  # a connect_ex that reports 0: connected on the spot
        err = real(self, address)
        if err == errno.EINPROGRESS:
            select.select([], [self], [], BOUND)
            err = self.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        return err

    control = h.control()
    with monkeypatch.context() as patch:
        patch.setattr(socket.socket, "connect_ex", at_once)
        try:
            d = h.dial("quick", net.listening)
        except OSError as exc:
            fail(f"dial() raised {exc!r} although connect_ex reported 0 (connected at once)")
    results = h.start([d], control).result(what="run() over a dial connected at once")
    check(_statuses(results) == [("quick", "connected")],
          f"expected quick 'connected', got {_statuses(results)}")


@pytest.mark.checkpoint("p02.outcomes")
def test_three_hundred_dials_all_get_their_result(h, net):
    dials = [h.dial(f"down-{i}", net.refusing) for i in range(300)]
    results = h.start(dials, h.control()).result(what="run() over 300 refused dials")
    check([x.name for x in results] == [d.name for d in dials],
          "run() over 300 dials must return 300 results in the order given")
    bad = [x for x in results if x.status != "failed" or x.error != errno.ECONNREFUSED]
    check(not bad, f"{len(bad)} of 300 refused dials did not end 'failed' with "
                   f"ECONNREFUSED, e.g. {bad[:2]}")
    h.check_no_leak("run() over 300 dials returned")


@pytest.mark.checkpoint("p02.outcomes")
def test_a_dial_result_is_a_frozen_value(h, net):
    results = h.start([h.dial("up", net.listening)], h.control()).result(
        what="run() over one quick dial")
    result = results[0]
    check(isinstance(result, h.impl.DialResult), f"run() returned {result!r}, not a DialResult")
    try:
        result.status = "cancelled"
    except dataclasses.FrozenInstanceError:
        pass
    else:
        fail("a DialResult could be changed after run() returned: it is a frozen dataclass")
    check(result == h.impl.DialResult("up", "connected") and hash(result) is not None,
          f"DialResult('up', 'connected') compares and hashes as a value; got {result!r}")


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
