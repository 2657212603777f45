"""P02 acceptance: who closes what, the lifecycle of run(), and no idle wakeups."""
from __future__ import annotations

import math
import select
import threading

import pytest

from workbook.testkit import BOUND, check, fail, start_daemon

from tests.p02.support import CANCEL_BOUND, GLANCE, is_closed, open_fds

ORDER_WORDS = ("unregistered after", "never unregistered")


def _check_released(h, spy, control, after: str, *, open_pitfall: str | None = None) -> None:
    """Every socket run owned was unregistered while open, then closed; selectors closed;
    and /proc/self/fd shows nothing new left open."""
    spy.require_selector()
    problems = spy.cleanup_problems(h.all_sockets(control))
    order = [p for p in problems if any(w in p for w in ORDER_WORDS)]
    check(not order, f"after {after}: " + "; ".join(order) + " (unregister first, then close)",
          pitfall="close_before_unregister")
    check(not problems, f"after {after}: " + "; ".join(problems), pitfall=open_pitfall)
    h.check_no_leak(after, pitfall=open_pitfall)


# -- p02.fds ---------------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.fds")
def test_after_success_every_socket_and_the_selector_are_closed_each_unregistered_first(
        h, net, spy):
    dials = [h.dial("up", net.listening), h.dial("down", net.refusing)]
    control = h.control()
    h.start(dials, control).result(what="run() over two dials that finish on their own")
    _check_released(h, spy, control, "a run whose dials all finished")


@pytest.mark.checkpoint("p02.fds")
def test_after_a_cancel_every_socket_and_the_selector_are_closed_each_unregistered_first(
        h, net, spy):
    dials = [h.dial("up", net.listening), h.dial("stuck-1", net.pending),
             h.dial("stuck-2", net.pending)]
    control = h.control()
    r = h.start(dials, control)
    h.wait_blocked(r, pending=3)
    h.end(r, control)
    _check_released(h, spy, control, "a cancelled run", open_pitfall="cancelled_left_open")


@pytest.mark.checkpoint("p02.fds")
def test_after_a_timeout_every_socket_and_the_selector_are_closed_each_unregistered_first(
        h, net, spy):
    dials = [h.dial("stuck", net.pending), h.dial("up", net.listening)]
    control = h.control()
    h.start(dials, control, timeout=0.1).result(what="run(timeout=0.1)")
    _check_released(h, spy, control, "a timed-out run", open_pitfall="cancelled_left_open")


@pytest.mark.checkpoint("p02.fds")
def test_after_an_error_inside_select_everything_is_closed_each_unregistered_first(
        h, net, spy):
    spy.fault = ("select", 1)
    dials = [h.dial("up", net.listening), h.dial("stuck", net.pending)]
    control = h.control()
    err = h.start(dials, control).error(what="run() whose select() raises OSError")
    check(err is not None, "select() raised OSError, yet run() returned normally: the error "
                           "must not be swallowed")
    _check_released(h, spy, control, "select() raised inside run()")


@pytest.mark.checkpoint("p02.fds")
def test_after_an_error_while_registering_everything_is_closed_each_unregistered_first(
        h, net, spy):
    spy.fault = ("register", 2)
    dials = [h.dial("a", net.pending), h.dial("b", net.pending), h.dial("c", net.listening)]
    control = h.control()
    err = h.start(dials, control).error(what="run() whose second register() raises OSError")
    check(err is not None, "the second selector.register() raised OSError, yet run() returned "
                           "normally: the error must not be swallowed")
    _check_released(h, spy, control, "register() raised inside run()")


# -- p02.invalid -----------------------------------------------------------------------------

def _dup_names(h, net):
    return [h.dial("a", net.refusing), h.dial("a", net.refusing)], h.control(), None


def _blocking_socket(h, net):
    d = h.dial("slow", net.refusing)
    d.sock.setblocking(True)
    return [h.dial("ok", net.refusing), d], h.control(), None


def _closed_socket(h, net):
    d = h.dial("gone", net.refusing)
    d.sock.close()
    return [h.dial("ok", net.refusing), d], h.control(), None


def _negative_timeout(h, net):
    return [h.dial("a", net.refusing)], h.control(), -1.0


def _timeout_not_a_number(h, net):
    return [h.dial("a", net.refusing)], h.control(), "1"


def _nan_timeout(h, net):
    return [h.dial("a", net.refusing)], h.control(), math.nan


def _dials_in_a_dict_view(h, net):
    return {"a": h.dial("a", net.refusing)}.values(), h.control(), None


def _dials_from_a_generator(h, net):
    dials = [h.dial("a", net.refusing), h.dial("b", net.refusing)]
    return (d for d in dials), h.control(), None


def _shared_socket(h, net):
    a = h.dial("a", net.refusing)
    return [a, h.impl.Dial("b", a.sock)], h.control(), None


def _control_in_use(h, net):
    control = h.control()
    r = h.start([h.dial("stuck", net.pending)], control)
    h.wait_blocked(r, what="a first run() holds the control")
    h.in_use.append((r, control))
    return [h.dial("a", net.refusing)], control, None


def _not_a_dial(h, net):
    d = h.dial("b", net.refusing)
    return [h.dial("a", net.refusing), (d.name, d.sock)], h.control(), None


def _not_a_control(h, net):
    return [h.dial("a", net.refusing)], object(), None


def _used_control(h, net):
    control = h.control()
    h.start([], control).result(what="a first run([]) that uses up the control")
    return [h.dial("a", net.refusing)], control, None


def _closed_control(h, net):
    control = h.control()
    control.close()
    return [h.dial("a", net.refusing)], control, None


INVALID = {
    "two dials with the same name": _dup_names,
    "a blocking dial socket": _blocking_socket,
    "a dial socket that is already closed": _closed_socket,
    "a negative timeout": _negative_timeout,
    "a timeout that is not a number": _timeout_not_a_number,
    "a NaN timeout": _nan_timeout,
    "dials given as dict.values() (not a sequence)": _dials_in_a_dict_view,
    "dials given as a generator (not a sequence)": _dials_from_a_generator,
    "an element that is not a Dial": _not_a_dial,
    "a control that is not a Control": _not_a_control,
    "a control already used by another run": _used_control,
    "a control in use by a run that has not returned": _control_in_use,
    "two dials sharing one socket": _shared_socket,
    "a control that is already closed": _closed_control,
}


@pytest.mark.checkpoint("p02.invalid")
@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_arguments_raise_and_leave_every_caller_socket_open(h, net, case):
    dials, control, timeout = INVALID[case](h, net)
    socks = [t.sock for t in h.tracked if t.name.startswith("dial ")]
    was_open = [s for s in socks if not is_closed(s)]
    ctl_open = [s for s in (getattr(control, "reader", None), getattr(control, "writer", None))
                if s is not None and not is_closed(s)]
    h.before = h.before | open_fds()  # the inputs are the caller's; only run's fds count
    err = h.start(dials, control, timeout).error(what=f"run() with {case}")
    check(isinstance(err, (TypeError, ValueError)),
          f"run() with {case} must raise TypeError or ValueError before doing anything; it "
          + ("returned normally" if err is None else f"raised {err!r}"))
    closed = [s for s in was_open + ctl_open if is_closed(s)]
    check(not closed,
          f"run() rejected {case} but closed {len(closed)} of the caller's sockets: until the "
          "arguments are accepted, ownership stays with the caller",
          pitfall="closes_on_invalid_input")
    h.check_no_leak(f"run() rejected {case} (create the selector only after validating)")
    for r, ctl in h.in_use:  # the first run goes on undisturbed, and still owns its control
        check(r.alive, f"run() with {case} disturbed the run that owns the control")
        h.end(r, ctl)
        ctl_open = []
    for s in was_open + ctl_open:  # still the caller's: the caller closes them
        if not is_closed(s):
            s.close()


# -- p02.lifecycle ---------------------------------------------------------------------------

def _expect_runtime_error(control, after: str) -> None:
    try:
        control.request_stop()
    except RuntimeError:
        return
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the diagnosis names what was raised
        fail(f"request_stop() after {after} raised {exc!r}; expected RuntimeError: the channel "
             "is gone and the caller should be told so plainly",
             pitfall="request_stop_after_run")
    fail(f"request_stop() after {after} returned normally; expected RuntimeError (nobody "
         "will ever read that press)", pitfall="request_stop_after_run")


@pytest.mark.checkpoint("p02.lifecycle")
def test_request_stop_after_run_has_returned_raises_runtime_error(h, net):
    control = h.control()
    h.start([h.dial("up", net.listening)], control).result(what="run() over one quick dial")
    _expect_runtime_error(control, "run() returned")


@pytest.mark.checkpoint("p02.lifecycle")
def test_request_stop_after_a_cancelled_run_raises_runtime_error(h, net):
    control = h.control()
    r = h.start([h.dial("stuck", net.pending)], control)
    h.wait_blocked(r)
    h.end(r, control)
    _expect_runtime_error(control, "a cancelled run() returned")


@pytest.mark.checkpoint("p02.lifecycle")
def test_request_stop_after_close_raises_runtime_error_and_close_twice_is_fine(h):
    control = h.control()
    control.close()
    try:
        control.close()
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the diagnosis names what was raised
        fail(f"a second Control.close() raised {exc!r}: closing twice is fine")
    check(is_closed(control.reader) and is_closed(control.writer),
          "Control.close() left an end of the socket pair open")
    _expect_runtime_error(control, "Control.close()")


@pytest.mark.checkpoint("p02.lifecycle")
def test_three_presses_from_three_threads_make_one_clean_cancel(h, net, spy):
    dials = [h.dial("up", net.listening), h.dial("stuck", net.pending)]
    control = h.control()
    r = h.start(dials, control)
    h.wait_blocked(r, pending=2)
    with spy.cond:
        returned_before = spy.returned
    # Hold the loop right after its select() returns, so all three presses land while run()
    # still owns the channel (a late press after run() returned would rightly raise).
    spy.gate.clear()
    start = threading.Barrier(3, timeout=BOUND)

    def press() -> None:
        start.wait()
        control.request_stop()

    try:
        presses = [start_daemon(press, name=f"press-{i}") for i in range(3)]
        for t in presses:
            t.join(BOUND)
            if t.is_alive():
                fail("a request_stop() press did not return", pitfall="blocking_control")
            if t.error is not None:
                if isinstance(t.error, NotImplementedError):
                    raise t.error
                fail(f"a press while run() was waking raised {t.error!r}")
    finally:
        spy.gate.set()
    results = h.after_cancel(r, returned_before, what="run() after three presses")
    got = [(x.name, x.status) for x in results]
    check(got == [("up", "connected"), ("stuck", "cancelled")],
          f"expected up 'connected' and stuck 'cancelled', got {got}")
    h.check_no_leak("three presses and one cancel", pitfall="cancelled_left_open")


def _finished(sock) -> None:
    """Wait (bounded) until the connect of ``sock`` has finished: it reports writable."""
    _, writable, _ = select.select([], [sock], [], BOUND)
    check(writable, "test setup: a loopback connect did not finish in time")


@pytest.mark.checkpoint("p02.lifecycle")
def test_a_stop_requested_before_run_returns_every_dial_cancelled_without_waiting(
        h, net, spy):
    control = h.control()
    control.request_stop()
    dials = [h.dial("up", net.listening), h.dial("down", net.refusing),
             h.dial("stuck", net.pending)]
    for d in dials[:2]:
        _finished(d.sock)  # so a loop that looks at the dials before the flag labels them
    results = h.start(dials, control).result(CANCEL_BOUND, what="run() after an early stop")
    got = [(x.name, x.status) for x in results]
    check(got == [("up", "cancelled"), ("down", "cancelled"), ("stuck", "cancelled")],
          "stop was requested before run() began: it returns at once, every dial "
          f"'cancelled' (even those whose connect had already finished), got {got}")
    h.check_no_leak("run() returned after an early stop", pitfall="cancelled_left_open")


# -- p02.no_polling --------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.no_polling")
def test_with_no_deadline_the_idle_loop_waits_without_a_timeout_and_does_not_wake(
        h, net, spy):
    control = h.control()
    r = h.start([h.dial("stuck", net.pending)], control)
    timeout = h.wait_idle(r, what="the idle loop with no deadline")
    check(timeout is None or timeout < 0,
          f"with no deadline run() sleeps in select(timeout={timeout!r}): a timeout only "
          "makes the idle loop wake to look at the flag; wait with no timeout",
          pitfall="short_timeout_polling")
    h.end(r, control)


@pytest.mark.checkpoint("p02.no_polling")
def test_with_a_deadline_the_loop_sleeps_for_the_remaining_time_in_one_wait(h, net, spy):
    control = h.control()
    r = h.start([h.dial("stuck", net.pending)], control, timeout=30)
    timeout = h.wait_idle(r, what="the idle loop with a 30 s deadline", window=GLANCE)
    check(timeout is not None and timeout > 20,
          f"run(timeout=30) sleeps in select(timeout={timeout!r}): wait for what is left of "
          "the deadline, not in short slices", pitfall="short_timeout_polling")
    h.end(r, control)


@pytest.mark.checkpoint("p02.no_polling")
def test_after_a_dial_finishes_the_loop_goes_back_to_sleep_without_a_timer(h, net, spy):
    control = h.control()
    r = h.start([h.dial("up", net.listening), h.dial("stuck", net.pending)], control)
    h.wait_blocked(r, pending=2, what="the quick dial has finished and the loop waits for "
                                      "the other")
    timeout = h.wait_idle(r, what="the loop after one dial finished", window=GLANCE)
    check(timeout is None or timeout < 0,
          f"after a dial finished, run() sleeps in select(timeout={timeout!r}); with no "
          "deadline it waits with no timeout", pitfall="short_timeout_polling")
    h.end(r, control)
