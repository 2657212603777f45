"""Deterministic scenarios exposing the P02 corpus variants (run by ``expose.py``).

``python tests/selftest/unseen/expose_p02.py NAME PATH``: ``ok`` (exit 0) or ``BROKEN: ...``
(exit 1).  Loopback only: a "pending" dial goes to a listener whose accept queue is full.
"""
from __future__ import annotations

import selectors
import socket
import sys
import threading
import time

from _scenario import expect, in_thread, main

BOUND = 2.0
_keep: list = []  # sockets that must outlive a scenario's helpers


def _closed(s) -> bool:
    return s.fileno() == -1


def _listener(backlog: int = 16):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(backlog)
    _keep.append(srv)
    return srv.getsockname()


def _pending_address():
    """A loopback address where a new connect stays in progress: the accept queue is full."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    _keep.append(srv)
    addr = srv.getsockname()
    for _ in range(64):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(addr)
        _keep.append(s)
        _, w, _ = __import__("select").select([], [s], [], 0.2)
        if not w:
            return addr
    raise RuntimeError("could not make a connect stay pending on loopback")


def _connected_dial(mod, name="up"):
    d = mod.dial(name, _listener())
    sel = selectors.DefaultSelector()
    sel.register(d.sock, selectors.EVENT_WRITE)
    expect(sel.select(BOUND), "loopback connect did not finish")
    sel.close()
    return d


def wall_clock_deadline(mod):
    d = mod.dial("stuck", _pending_address())
    control = mod.Control()
    real = time.time
    calls = [0]

    def stepped_back():
        calls[0] += 1
        return real() if calls[0] == 1 else real() - 3600.0

    time.time = stepped_back
    try:
        out = in_thread(mod.run, [d], control, 0.2)
        finished = out.wait(1.5)
    finally:
        time.time = real
    expect(finished, "run(timeout=0.2) with the wall clock set back an hour did not return "
                     "within 1.5 s (its deadline follows the wall clock)")
    expect(out.error is None and out.value[0].status == "timeout",
           f"run returned {out.value!r} / raised {out.error!r}")


def cleanup_on_exception_only(mod):
    real = selectors.DefaultSelector

    class Interrupted(real):  # Ctrl-C lands while the loop sleeps
        def select(self, timeout=None):
            raise KeyboardInterrupt

    d = mod.dial("stuck", _pending_address())
    control = mod.Control()
    selectors.DefaultSelector = Interrupted
    try:
        try:
            mod.run([d], control, 1.0)
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError("run() swallowed the KeyboardInterrupt")
    finally:
        selectors.DefaultSelector = real
    left = [n for n, s in (("the dial socket", d.sock), ("control.reader", control.reader),
                           ("control.writer", control.writer)) if not _closed(s)]
    expect(not left, f"a KeyboardInterrupt inside select() left {', '.join(left)} open")


class _Writer:
    """Proxy of control.writer whose close() lets another thread press Cancel right after."""

    def __init__(self, control, real):
        self.control, self.real, self.press = control, real, None

    def send(self, data):
        return self.real.send(data)

    def fileno(self):
        return self.real.fileno()

    def close(self):
        self.real.close()
        self.press = in_thread(self.control.request_stop, name="cancel-button")
        self.press.wait(0.5)  # bounded: a correct close() holds the press off until it is done


def close_marks_closed_last(mod):
    control = mod.Control()
    proxy = _Writer(control, control.writer)
    control.writer = proxy
    control.close()
    press = proxy.press
    expect(press is not None and press.wait(BOUND), "request_stop never returned")
    err = press.error
    expect(isinstance(err, RuntimeError) and not isinstance(err, OSError),
           f"request_stop() pressed while close() was half done raised {err!r}; only "
           "RuntimeError (closed) is allowed")


def claim_without_lock(mod):
    """Thread A is paused inside its claim, on the line that records it; B runs meanwhile."""
    control = mod.Control()
    a_paused, a_go = threading.Event(), threading.Event()
    state = {}

    def tracer(frame, event, arg):
        if frame.f_code.co_name != "_claim":
            return None

        def local(frame, event, arg):
            if event == "line" and "_claimed = True" in _line(frame):
                a_paused.set()
                a_go.wait(BOUND)
            return local
        return local

    def run_a():
        sys.settrace(tracer)
        try:
            return mod.run([], control, 0.2)
        finally:
            sys.settrace(None)

    a = in_thread(run_a, name="run-A")
    paused = a_paused.wait(BOUND)
    b = in_thread(mod.run, [], control, 0.2, name="run-B")
    b.wait(0.5)  # with the lock held by A, B cannot get past the claim yet
    a_go.set()
    expect(a.wait(BOUND) and b.wait(BOUND), "a run() did not return")
    expect(paused, "run A never reached its claim")
    expect(a.error is None and isinstance(b.error, ValueError),
           f"two run() calls raced for one control, A first: A ended with "
           f"{a.error or a.value!r}, B with {b.error or b.value!r}; A owns the control and B "
           "must get ValueError before taking anything")


def _line(frame) -> str:
    import linecache
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno)


def deadline_checked_only_when_idle(mod):
    d = mod.dial("stuck", _pending_address())
    control = mod.Control()
    flooding = threading.Event()
    flooding.set()
    writer = control.writer

    def flood():  # raw notification bytes, no stop request: the run must go on, then time out
        while flooding.is_set():  # keeps far more than one drain's worth unread at all times
            try:
                writer.send(b"x" * 65536)
            except BlockingIOError:
                pass
            except OSError:
                return
            time.sleep(0.001)

    real_drain = control.drain

    def slow_drain():  # a loaded box: each turn takes a millisecond, the flood outpaces it
        time.sleep(0.001)
        return real_drain()

    control.drain = slow_drain
    threading.Thread(target=flood, daemon=True).start()
    out = in_thread(mod.run, [d], control, 0.2)
    finished = out.wait(1.5)
    flooding.clear()
    out.wait(BOUND)
    expect(finished, "run(timeout=0.2) under a stream of notification bytes did not time out "
                     "within 1.5 s")
    expect(out.error is None and out.value[0].status == "timeout",
           f"run returned {out.value!r} / raised {out.error!r}")


def flag_read_before_drain(mod):
    d = mod.dial("stuck", _pending_address())
    control = mod.Control()
    control.writer.send(b"x")  # an old byte without a stop: it wakes the loop at once
    real_drain = control.drain
    pressed = []

    def drain():  # the Cancel press lands just before this drain reads the socket
        if not pressed:
            pressed.append(True)
            control.request_stop()
        return real_drain()

    control.drain = drain
    out = in_thread(mod.run, [d], control, 1.5)
    finished = out.wait(0.6)
    out.wait(BOUND)
    expect(pressed, "run() never drained the control")
    expect(finished, "a Cancel pressed while the loop was handling an earlier byte was lost: "
                     "run() went back to sleep until its deadline")
    expect(out.error is None and out.value[0].status == "cancelled",
           f"run returned {out.value!r} / raised {out.error!r}")


def deadline_before_events(mod):
    d = _connected_dial(mod)
    control = mod.Control()
    got = mod.run([d], control, 0)
    expect(got[0].status == "connected",
           f"run(timeout=0) on a dial whose connect had completed returned {got!r}: the one "
           "look it makes reported it writable")


def same_fd_different_objects(mod):
    d = mod.dial("a", _listener())
    twin = socket.socket(fileno=d.sock.fileno())  # a second object on the same descriptor
    twin.setblocking(False)
    control = mod.Control()
    try:
        try:
            mod.run([d, mod.Dial("b", twin)], control, 0.1)
        except (ValueError, TypeError):
            error = None
        except Exception as exc:  # noqa: BLE001
            error = exc
        else:
            error = "no error"
        was_closed = _closed(d.sock)
    finally:
        twin.detach()
    expect(error is None and not was_closed,
           f"two dials on one descriptor: run() ended with {error!r} and "
           f"{'closed' if was_closed else 'left open'} the caller's socket (expected "
           "ValueError and nothing closed)")


def status_strenum(mod):
    d = _connected_dial(mod)
    got = mod.run([d], mod.Control(), 1.0)
    expect([r.status for r in got] == ["connected"], f"run returned {got!r}")


SCENARIOS = {name: fn for name, fn in list(globals().items())
             if callable(fn) and not name.startswith("_") and fn.__module__ == __name__
             and name not in ("main", "expect", "in_thread")}
PYTHON = {"status_strenum": "3.10"}

if __name__ == "__main__":
    sys.exit(main(SCENARIOS, sys.argv))
