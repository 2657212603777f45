"""P02 acceptance: the control channel itself -- order, non-blocking ends, drain, EOF."""
from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest

from workbook.testkit import (BOUND, check, fail, finished, is_submission_code, kernel_state,
                              parked, run_hooked, start_daemon)

from tests.p02.support import CANCEL_BOUND, GLANCE, PressWatch, pending_bytes


def _nonblocking(sock: socket.socket) -> bool:
    """An operation on ``sock`` never waits: its descriptor is O_NONBLOCK and the socket
    object adds no timeout of its own (``setblocking(False)`` and ``os.set_blocking(fd,
    False)`` both qualify)."""
    return not os.get_blocking(sock.fileno()) and not (sock.gettimeout() or 0) > 0


def _require_nonblocking_reader(control) -> None:
    # Without this a drain() on an empty channel would hang the test thread itself.
    check(_nonblocking(control.reader),
          "control.reader is blocking: drain() would sleep in recv() when nothing is pending",
          pitfall="blocking_control")


def _press_watched(h, control, on_byte=None) -> PressWatch:
    """request_stop() in a thread, watched at the moment its byte lands; joined (bounded)."""
    watch = PressWatch(control, h.reader_fd(control), on_byte)
    t = watch.start()
    if not finished(t, BOUND, what="request_stop()", record=False):
        fail("request_stop() did not return", pitfall="blocking_control")
    if t.error is not None:
        raise t.error
    return watch


# -- p02.state_first -------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.state_first")
def test_request_stop_sets_the_state_before_its_byte_lands(h):
    control = h.control()
    watch = _press_watched(h, control)
    check(watch.bytes_seen,
          "request_stop() put no byte into the control: setting the Event alone never wakes "
          "a loop that sleeps in select()", pitfall="flag_only")
    check(watch.state_at_byte() is True,
          "when request_stop()'s byte reached control.reader, stop_requested was still "
          "False: a loop woken by that byte finds no stop and goes back to sleep",
          pitfall="notify_before_state")
    check(control.stop_requested is True, "stop_requested is not True after request_stop()")
    control.close()


@pytest.mark.checkpoint("p02.state_first")
def test_stop_requested_is_false_before_any_press_and_true_after_one_from_another_thread(h):
    control = h.control()
    check(control.stop_requested is False,
          f"a new Control reports stop_requested={control.stop_requested!r}; it must be False "
          "until someone presses Cancel")
    t = start_daemon(control.request_stop, name="presser")
    t.join(BOUND)
    check(not t.is_alive() and t.error is None,
          f"request_stop() from another thread did not return cleanly ({t.error!r})")
    check(control.stop_requested is True,
          f"after request_stop() in another thread stop_requested={control.stop_requested!r}")
    control.close()


@pytest.mark.checkpoint("p02.cancel")
def test_a_cancel_is_not_lost_when_the_loop_handles_the_byte_before_the_requester_continues(
        h, net, spy):
    control = h.control()
    stuck = h.dial("stuck", net.pending)
    r = h.start([stuck], control)
    h.wait_blocked(r)
    woke_at = spy.entered
    # Hold the loop right after its select() returns, so the press can be paused the moment
    # its byte lands and the loop then reacts to that byte before the press goes on.
    spy.gate.clear()

    def let_the_loop_react_first() -> None:
        spy.gate.set()
        # The loop has handled the byte once it is back inside select(), has started its
        # cleanup, or has returned.  (A loop that closes the control before unregistering it
        # would wait for this very requester's lock; the bound lets the test go on.)
        # (Watched from a helper thread: this runs inside the press's profile hook.)
        start_daemon(spy.settle, lambda: not r.alive or spy.unregister_calls > 0
                     or (spy.entered > woke_at and spy.entered > spy.returned), CANCEL_BOUND,
                     what="the loop to handle the byte", name="p02-react-waiter"
                     ).join(CANCEL_BOUND + 1.0)

    with spy.cond:
        returned_before = spy.returned
    try:
        watch = _press_watched(h, control, on_byte=let_the_loop_react_first)
    finally:
        spy.gate.set()
    check(watch.bytes_seen, "request_stop() put no byte into the control, so the loop "
                            "could not wake", pitfall="flag_only")
    results = h.after_cancel(r, returned_before, what="run() after a request_stop() whose "
                             "byte the loop handled before request_stop() had returned")
    check([x.status for x in results] == ["cancelled"],
          f"expected the pending dial 'cancelled', got {[x.status for x in results]}")


# -- p02.nonblocking -------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.nonblocking")
def test_both_control_ends_are_non_blocking(h):
    control = h.control()
    check(_nonblocking(control.reader),
          "control.reader is blocking: the loop could sleep in recv() instead of select()",
          pitfall="blocking_control")
    check(_nonblocking(control.writer),
          "control.writer is blocking: a press blocks once the socket buffer is full",
          pitfall="blocking_control")
    control.close()


@pytest.mark.checkpoint("p02.nonblocking")
def test_five_thousand_presses_with_nobody_reading_never_block_and_never_raise(h):
    control = h.control()
    presses = [0]

    def press_many() -> None:
        for _ in range(5000):
            control.request_stop()
            presses[0] += 1

    t = start_daemon(press_many, name="presser")
    if not finished(t, BOUND, what="request_stop()", record=False):
        fail(f"request_stop() blocked after {presses[0]} presses with nobody reading: the "
             "socket buffer is full and a blocking send() waits for the loop",
             pitfall="blocking_control")
    if isinstance(t.error, NotImplementedError):
        raise t.error
    if t.error is not None:
        fail(f"press #{presses[0] + 1} raised {t.error!r}: a full buffer means a wakeup is "
             "already pending, so the byte can be dropped")
    check(control.stop_requested, "stop_requested is False after 5000 presses")
    _require_nonblocking_reader(control)
    check(control.drain() > 0, "5000 presses left no byte to read: nothing was sent",
          pitfall="flag_only")
    control.close()


class _GiveUp(BaseException):
    """Raised by the test's signal handler to unwind a main thread that is stuck in it."""


@pytest.mark.checkpoint("p02.nonblocking")
def test_request_stop_from_a_signal_handler_never_waits_for_its_own_thread(h):
    """A signal handler may press Cancel (a Ctrl-C handler, say).  It runs in the main
    thread between two of its lines, perhaps inside that thread's own request_stop() or
    close(); a press that waits there for something its thread holds waits forever.  The
    main thread presses 50 times and closes the control, and a signal is raised before
    every line of the submission's code that those calls run; the handler presses each
    time.  Deterministic: every line is tried, none by luck of timing."""
    main = threading.current_thread()
    if main is not threading.main_thread():
        pytest.skip("signal handlers run in the main thread only")
    control = h.control()
    state = {"depth": 0, "entered": 0, "errors": [], "where": None, "give_up": False,
             "over": False}

    def handler(signum, frame):
        if state["give_up"] and not state["over"]:
            raise _GiveUp
        state["depth"] += 1
        state["entered"] += 1
        try:
            control.request_stop()
        except RuntimeError as exc:  # closed: allowed once close() has begun
            if isinstance(exc, RecursionError):
                raise
        except Exception as exc:  # noqa: BLE001 - reported below
            state["errors"].append((exc, state["where"]))
        finally:
            state["depth"] -= 1

    def local(frame, event, arg):
        if event == "line" and state["depth"] == 0 and not state["over"]:
            state["where"] = f"{frame.f_code.co_name}() at line {frame.f_lineno}"
            signal.raise_signal(signal.SIGUSR1)  # the handler runs here, inside the call
        return local

    def trace(frame, event, arg):
        return local if is_submission_code(frame.f_code.co_filename) else None

    def press_and_close() -> None:
        for _ in range(50):
            control.request_stop()
        control.close()

    done = threading.Event()

    def watchdog() -> None:
        """Unwind the main thread if it is stuck in the handler: a press in progress, the
        thread asleep in the kernel (not preempted), no CPU used, no handler entered, over
        three looks in a row; or after BOUND seconds whatever it does."""
        end, still, seen = time.monotonic() + BOUND, 0, None
        while not done.is_set():
            now = (state["entered"], state["depth"])
            blocked = (now[1] > 0 and now == seen and parked(main, 0.02)
                       and kernel_state(main) == "S")
            still, seen = (still + 1 if blocked else 0), now
            if still >= 3 or time.monotonic() > end:
                state["give_up"] = True
                while not done.wait(0.02):  # until the handler has raised in the main thread
                    signal.pthread_kill(main.ident, signal.SIGUSR1)
                return
            done.wait(0.01)

    previous = signal.signal(signal.SIGUSR1, handler)
    guard = start_daemon(watchdog, name="signal-watchdog")
    stuck = None
    try:
        run_hooked(press_and_close, trace=trace)
    except _GiveUp:
        stuck = state["where"]
    finally:
        state["over"] = True
        done.set()
        finished(guard, BOUND, what="the signal watchdog", record=False)
        signal.signal(signal.SIGUSR1, previous)
    if stuck is not None:
        fail(f"request_stop() called from a signal handler never returned: the signal landed "
             f"while the same thread was inside {stuck}, and the handler's press waited for "
             "something that thread holds (a non-reentrant lock?) -- it never can go on.  "
             "request_stop() must never block, from a signal handler too: record the request "
             "with one atomic store, and only try a lock (acquire(blocking=False)), never "
             "wait for one")
    check(state["entered"] > 0, "the signal handler never ran (no line of request_stop() or "
          "close() was seen)")
    if state["errors"]:
        exc, where = state["errors"][0]
        fail(f"request_stop() called from a signal handler, while the same thread was inside "
             f"{where}, raised {exc!r}: while the control is in use a press never raises")
    check(control.stop_requested, "stop_requested is False after presses from a signal handler")


# -- p02.notify_only -------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.notify_only")
def test_a_notification_byte_without_the_stop_state_does_not_end_the_run(h, net, spy):
    control = h.control()
    stuck = h.dial("stuck", net.pending)
    r = h.start([stuck], control)
    h.wait_blocked(r)
    with spy.cond:
        returned_before = spy.returned
    control.writer.send(b"x")  # a stray byte: notification without state
    h._wait(lambda: not r.alive or spy.returned > returned_before,
            what="the loop wakes up for a stray byte on the control")
    check(r.alive, "run() returned after a notification without the stop state: only "
                   "stop_requested ends a run, a byte just wakes the loop")
    # Read once, it is asleep again and stays asleep (a loop that did not read the byte
    # would find the reader still readable and spin).
    h.wait_idle(r, what="the loop after a stray byte", window=GLANCE)
    h.end(r, control)


@pytest.mark.checkpoint("p02.notify_only")
def test_drain_reads_at_most_4096_bytes_per_call_and_returns_0_when_empty(h):
    control = h.control()
    _require_nonblocking_reader(control)
    check(control.drain() == 0, "drain() on an empty channel must return 0 (EAGAIN: empty)")
    sent = 0
    while sent < 10_000:
        try:
            sent += control.writer.send(b"n" * 1000)
        except BlockingIOError:
            break
    first = control.drain()
    check(0 < first <= 4096,
          f"with {sent} bytes pending, one drain() read {first}: at most 4096 per call, so a "
          "flood of presses cannot keep the loop away from its dials",
          pitfall="unbounded_drain")
    total, calls = first, 1
    while calls < 100:
        n = control.drain()
        if n == 0:
            break
        check(n <= 4096, f"drain() read {n} bytes in one call (at most 4096)",
              pitfall="unbounded_drain")
        total, calls = total + n, calls + 1
    check(total == sent, f"drains returned {total} bytes in all, {sent} were sent")
    control.close()


@pytest.mark.checkpoint("p02.notify_only")
def test_a_flood_of_notification_bytes_is_read_at_most_4096_bytes_per_wakeup(h, net, spy):
    control = h.control()
    flood = 0
    while flood < 40_000:  # stray bytes, no state: every wakeup may read 4096 of them
        try:
            flood += control.writer.send(b"f" * 4000)
        except BlockingIOError:
            break
    reader_fd = h.reader_fd(control)
    left: list[int] = []  # bytes still unread each time the loop starts a select()
    spy.on_select = lambda: left.append(pending_bytes(reader_fd))
    r = h.start([h.dial("stuck", net.pending)], control)
    h.wait_idle(r, what="the loop once the flood is read", window=GLANCE, drained=reader_fd)
    rounds = [a - b for a, b in zip(left, left[1:])]
    check(rounds and max(rounds) <= 4096,
          f"{flood} stray bytes were read {rounds[:6]} bytes per wakeup: drain() once per "
          "wakeup, at most 4096 bytes, so a flood never keeps the loop from its dials; what "
          "is left is read on the next round", pitfall="unbounded_drain")
    h.end(r, control)


# -- p02.eof ---------------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.eof")
def test_drain_raises_connection_error_once_the_writer_end_is_closed(h):
    control = h.control()
    control.writer.close()  # (recv() at EOF returns at once, blocking or not)
    try:
        n = control.drain()
    except ConnectionError:
        pass
    else:
        fail(f"drain() returned {n!r} after the writer end was closed: recv() returning b'' "
             "is EOF (the channel is gone), not 'empty'", pitfall="eof_as_empty")
    control.close()


@pytest.mark.checkpoint("p02.eof")
def test_eof_on_the_control_makes_run_raise_connection_error_and_close_everything(
        h, net, spy):
    dials = [h.dial("up", net.listening), h.dial("stuck", net.pending)]
    control = h.control()
    r = h.start(dials, control)
    h.wait_blocked(r, pending=2)
    control.writer.close()  # the requesting side hangs up instead of pressing Cancel
    spy.settle(lambda: not r.alive or spy.entered > 1000, BOUND, what="run() to end on EOF")
    if r.alive:
        fail(f"after EOF on the control the loop called select() {spy.entered} times and "
             "kept going: EOF read as 'nothing there' leaves the socket readable forever",
             pitfall="eof_as_empty")
    err = r.error()
    check(isinstance(err, ConnectionError),
          "run() must raise ConnectionError when the control reaches EOF; it "
          + ("returned normally" if err is None else f"raised {err!r}"),
          pitfall="eof_as_empty")
    problems = spy.cleanup_problems(h.all_sockets(control))
    order = [p for p in problems if "unregistered after" in p]
    check(not order, "after EOF: " + "; ".join(order) + " (unregister first, then close)",
          pitfall="close_before_unregister")
    check(not problems, "after EOF: " + "; ".join(problems))
    h.check_no_leak("run() raised ConnectionError")
