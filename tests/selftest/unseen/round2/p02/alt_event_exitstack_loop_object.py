"""CORRECT: the spec's literal threading.Event for the state, and run() written as a loop
object whose cleanup is a contextlib.ExitStack.

* ``Control`` keeps "cancel requested" in a ``threading.Event`` (the spec's own wording:
  "Event.set() first, then writer.send(b"Q")"); a press tries the control's lock without
  waiting, exactly like a press that must never block.  (Caveat, outside the spec's text:
  ``Event.set()`` takes an internal lock, so a press from a *signal handler* that interrupts
  the same thread inside ``Event.set()`` would deadlock; the spec never has signal handlers
  press.)
* ``run`` validates, claims the control, then pushes every release onto an ExitStack in the
  reverse of the order they must run: control.close, each dial's close, selector.close, and
  last "unregister whatever is still registered".  LIFO unwinding therefore unregisters
  before it closes, closes the selector, then the sockets -- on return and on any exception
  (even one raised by a cleanup step: ExitStack runs the remaining callbacks).
* The loop itself is a small class; ``float('inf')`` and absurdly large timeouts (> 1e15 s,
  including ints like 10**400 that do not fit a float) mean "no deadline"; other deadlines are
  waited for in slices of at most 2e6 s (under epoll's 24.8-day limit).
"""
from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from typing import Sequence

__all__ = ["Control", "Dial", "DialResult", "dial", "run"]

_SLICE = 2_000_000.0   # longest single select() (epoll/poll: C int milliseconds)
_NO_DEADLINE = 1e15    # a timeout above this is "no deadline in practice"
_LATE = "request_stop() called after run() finished with this Control"


class Control:
    reader: socket.socket
    writer: socket.socket

    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair()
        for end in (self.reader, self.writer):
            end.setblocking(False)
        self._requested = threading.Event()
        self._gate = threading.Lock()   # the sockets vs close(); the claim
        self._closed = False
        self._taken = False

    @property
    def stop_requested(self) -> bool:
        return self._requested.is_set()

    def request_stop(self) -> None:
        if self._closed:
            raise RuntimeError(_LATE)
        self._requested.set()                    # state ...
        if not self._gate.acquire(blocking=False):
            # another press is sending, run() is claiming (it reads the state before it
            # first waits) or close() is running: no byte of ours is needed
            if self._closed:
                raise RuntimeError(_LATE)
            return
        try:
            if self._closed:
                raise RuntimeError(_LATE)
            try:
                self.writer.send(b"Q")           # ... then notification
            except BlockingIOError:
                pass                             # unread bytes already wake the loop
        finally:
            self._gate.release()

    def drain(self) -> int:
        try:
            chunk = self.reader.recv(4096)
        except BlockingIOError:
            return 0
        if chunk == b"":
            raise ConnectionError("control writer closed (EOF)")
        return len(chunk)

    def close(self) -> None:
        self._closed = True
        with self._gate:
            self.reader.close()
            self.writer.close()

    def _take(self) -> None:
        with self._gate:
            if self._closed or self._taken:
                raise ValueError("this Control is closed or already used by run()")
            self._taken = True


@dataclass
class Dial:
    """One TCP connect in progress."""

    name: str
    sock: socket.socket  # non-blocking TCP socket, connect already started


def dial(name: str, address: tuple[str, int]) -> Dial:
    """Start a non-blocking IPv4 TCP connect to ``address`` and wrap it as a ``Dial``.

    Raises ``OSError`` (and closes the socket) if the connect fails on the spot; whatever
    else it raises (a bad address, an interrupt), it closes the socket first too."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        err = sock.connect_ex(address)
        if err not in (0, errno.EINPROGRESS):
            raise OSError(err, f"connect to {address!r} failed at once")
    except BaseException:
        sock.close()  # whatever failed (a refused connect, a bad address, a name that does
        raise         # not resolve, an interrupt), not left to the garbage collector
    return Dial(name, sock)


@dataclass(frozen=True)
class DialResult:
    name: str
    status: str               # "connected" | "failed" | "timeout" | "cancelled"
    error: int | None = None  # errno when status == "failed"



def _validate(dials, control, timeout) -> None:
    if not isinstance(control, Control):
        raise TypeError("control must be a Control")
    if isinstance(dials, (str, bytes)) or not isinstance(dials, Sequence):
        raise TypeError("dials must be a sequence of Dial")
    seen_names, seen_fds = set(), set()
    for d in dials:
        if not isinstance(d, Dial) or not isinstance(d.sock, socket.socket):
            raise TypeError(f"expected a Dial with a socket, got {d!r}")
        fd = d.sock.fileno()
        if fd == -1:
            raise ValueError(f"dial {d.name!r}: closed socket")
        if d.sock.getblocking():
            raise ValueError(f"dial {d.name!r}: blocking socket")
        if d.name in seen_names or fd in seen_fds:
            raise ValueError(f"dial {d.name!r}: duplicate name or socket")
        seen_names.add(d.name)
        seen_fds.add(fd)
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be None or a number of seconds")
        if not timeout >= 0:
            raise ValueError("timeout must be >= 0")


class _DialLoop:
    def __init__(self, sel, dials, control, timeout) -> None:
        self.sel, self.dials, self.control = sel, dials, control
        self.deadline = (None if timeout is None or timeout > _NO_DEADLINE
                         else time.monotonic() + timeout)
        self.outcomes: dict[str, DialResult] = {}

    def forget_all(self) -> None:
        for key in list(self.sel.get_map().values()):
            self.sel.unregister(key.fileobj)

    def _wait(self):
        if self.deadline is None:
            return None
        return min(max(0.0, self.deadline - time.monotonic()), _SLICE)

    def _finished(self, d: Dial) -> None:
        err = d.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        self.outcomes[d.name] = (DialResult(d.name, "connected") if err == 0
                                 else DialResult(d.name, "failed", err))
        self.sel.unregister(d.sock)
        d.sock.close()

    def run(self) -> list[DialResult]:
        self.sel.register(self.control.reader, selectors.EVENT_READ)
        for d in self.dials:
            self.sel.register(d.sock, selectors.EVENT_WRITE, d)
        while len(self.outcomes) < len(self.dials):
            if self.control.stop_requested:
                break
            for key, _mask in self.sel.select(self._wait()):
                if key.data is None:
                    self.control.drain()
                else:
                    self._finished(key.data)
            if self.deadline is not None and time.monotonic() >= self.deadline:
                break
        rest = "cancelled" if self.control.stop_requested else "timeout"
        return [self.outcomes.get(d.name, DialResult(d.name, rest)) for d in self.dials]


def run(dials: Sequence[Dial], control: Control,
        timeout: float | None = None) -> list[DialResult]:
    _validate(dials, control, timeout)
    control._take()
    with contextlib.ExitStack() as cleanup:      # unwinds last-pushed first
        cleanup.callback(control.close)
        for d in dials:
            cleanup.callback(d.sock.close)
        sel = selectors.DefaultSelector()
        cleanup.callback(sel.close)
        loop = _DialLoop(sel, dials, control, timeout)
        cleanup.callback(loop.forget_all)        # runs first: unregister before any close
        return loop.run()
