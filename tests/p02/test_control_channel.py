"""P02 acceptance: the control channel itself -- order, non-blocking ends, drain, EOF."""
from __future__ import annotations

import pytest

from workbook.testkit import BOUND, check, fail, start_daemon

from tests.p02.support import CANCEL_BOUND


class SendSpy:
    """Stands in for ``control.writer``: notes ``stop_requested`` at the moment of each send.

    ``after_send`` (optional) runs right after the real send, still inside request_stop():
    it lets a test hold the requester there while the loop reacts to the byte."""

    def __init__(self, control, after_send=None) -> None:
        self._real = control.writer
        self._control = control
        self._after_send = after_send
        self.seen: list[bool] = []  # stop_requested at each send, in order

    def _note(self) -> None:
        self.seen.append(self._control.stop_requested)

    def send(self, data, *args):
        self._note()
        n = self._real.send(data, *args)
        if self._after_send is not None:
            self._after_send()
        return n

    def sendall(self, data, *args):
        self._note()
        self._real.sendall(data, *args)
        if self._after_send is not None:
            self._after_send()

    def __getattr__(self, name):  # fileno, close, getblocking, ...
        return getattr(self._real, name)


def _require_nonblocking_reader(control) -> None:
    # Without this a drain() on an empty channel would hang the test thread itself.
    check(not control.reader.getblocking(),
          "control.reader is blocking: drain() would sleep in recv() when nothing is pending",
          pitfall="blocking_control")


# -- p02.state_first -------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.state_first")
def test_request_stop_sets_the_state_before_it_sends_the_byte(h):
    control = h.control()
    spy_writer = SendSpy(control)
    control.writer = spy_writer
    control.request_stop()
    check(spy_writer.seen,
          "request_stop() sent nothing through control.writer: setting the Event alone never "
          "wakes a loop that sleeps in select()", pitfall="flag_only")
    check(all(spy_writer.seen),
          "when request_stop() called writer.send(), stop_requested was still False: a loop "
          "woken by that byte finds no stop and goes back to sleep",
          pitfall="notify_before_state")
    check(control.stop_requested, "stop_requested is False after request_stop()")
    control.close()


@pytest.mark.checkpoint("p02.state_first")
def test_a_cancel_is_not_lost_when_the_loop_handles_the_byte_before_the_requester_continues(
        h, net, spy):
    control = h.control()
    stuck = h.dial("stuck", net.pending)
    r = h.start([stuck], control)
    h.wait_blocked(r)
    woke_at = spy.entered

    def let_the_loop_react_first() -> None:
        # Hold the requester right after its send() until the loop has handled the byte:
        # it is back inside select() or it has started its cleanup (or it returned).
        # (A loop that closes the control before unregistering it would wait for this very
        # requester's lock; the bound lets the test go on.)
        spy.wait_for(lambda: not r.alive or spy.unregister_calls > 0
                     or (spy.entered > woke_at and spy.entered > spy.returned), CANCEL_BOUND)

    spy_writer = SendSpy(control, after_send=let_the_loop_react_first)
    control.writer = spy_writer
    control.request_stop()
    check(spy_writer.seen, "request_stop() sent no byte, so the loop could not wake",
          pitfall="flag_only")
    results = r.result(CANCEL_BOUND, what="run() after a request_stop() whose byte the loop "
                       "handled before request_stop() had returned",
                       pitfall="notify_before_state")
    check([x.status for x in results] == ["cancelled"],
          f"expected the pending dial 'cancelled', got {[x.status for x in results]}")


# -- p02.nonblocking -------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.nonblocking")
def test_both_control_ends_are_non_blocking(h):
    control = h.control()
    check(not control.reader.getblocking(),
          "control.reader is blocking: the loop could sleep in recv() instead of select()",
          pitfall="blocking_control")
    check(not control.writer.getblocking(),
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
    t.join(BOUND)
    if t.is_alive():
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


# -- p02.notify_only -------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.notify_only")
def test_a_notification_byte_without_the_stop_state_does_not_end_the_run(h, net, spy):
    control = h.control()
    stuck = h.dial("stuck", net.pending)
    r = h.start([stuck], control)
    h.wait_blocked(r)
    control.writer.send(b"x")  # a stray byte: notification without state
    h.wait_blocked(r, selects=2, what="the loop has read the stray byte and is back "
                                      "inside select()")
    # The loop is asleep again; for a short window it must stay asleep (a loop that did
    # not read the byte would find the socket readable again and spin).
    spy.wait_for(lambda: spy.entered > 2, 0.2)
    polled = [t for t in spy.timeouts if t is not None and t >= 0]
    check(spy.entered == 2 or not polled,
          f"the loop called select() {spy.entered} times with timeouts {polled[:3]}: it wakes "
          "on its own to look at the flag", pitfall="short_timeout_polling")
    check(spy.entered == 2,
          f"after one stray byte the loop called select() {spy.entered} times: drain() the "
          "control reader once per wakeup")
    check(r.alive, "run() returned after a notification without the stop state")
    results = h.cancel(r, control)
    check([x.status for x in results] == ["cancelled"],
          f"expected the pending dial 'cancelled', got {[x.status for x in results]}")
    h.check_no_leak("a cancelled run")


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


# -- p02.eof ---------------------------------------------------------------------------------

@pytest.mark.checkpoint("p02.eof")
def test_drain_raises_connection_error_once_the_writer_end_is_closed(h):
    control = h.control()
    _require_nonblocking_reader(control)
    control.writer.close()
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
    spy.wait_for(lambda: not r.alive or spy.entered > 1000, BOUND)
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
    check(not problems, "after EOF: " + "; ".join(problems))
    h.check_no_leak("run() raised ConnectionError")
