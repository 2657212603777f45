"""CORRECT: run() registers raw integer descriptors and dispatches through closures stored
as the selector keys' data; results are filled into a list by index.

* Every ``register``/``unregister`` uses ``sock.fileno()`` (the spec has the selector
  accept raw descriptors); the key's ``data`` is a zero-argument handler closure, so the
  loop body is just ``key.data()``.  The control handler drains once; the dial handler reads
  SO_ERROR, stores the result at the dial's index, unregisters the fd, then closes.
* Cleanup walks ``list(sel.get_map())`` -- the registered descriptors -- unregistering each
  (the sockets are all still open at that point), closes the selector, then every dial and
  the control.
* Deadlines: ``math.isfinite``-style handling -- a deadline beyond 1e12 s (inf, 1e300,
  10**400) is "none"; a finite one is waited for in slices of at most one day.
* ``Control`` keeps the state as a plain bool and its lifecycle as one small state field
  ("open" / "claimed" / "closed") guarded by a lock that presses only try.
"""
from __future__ import annotations

import errno
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from typing import Sequence

__all__ = ["Control", "Dial", "DialResult", "dial", "run"]

_DAY = 86400.0
_FAR = 1e12
_OPEN, _CLAIMED, _CLOSED = "open", "claimed", "closed"


class Control:
    reader: socket.socket
    writer: socket.socket

    def __init__(self) -> None:
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self.reader, self.writer = reader, writer
        self._stop = False
        self._state = _OPEN
        self._mutex = threading.Lock()

    @property
    def stop_requested(self) -> bool:
        return self._stop

    def _refuse(self) -> None:
        raise RuntimeError("this Control is finished: run() has returned or close() was called")

    def request_stop(self) -> None:
        if self._state == _CLOSED:
            self._refuse()
        self._stop = True
        if self._mutex.acquire(False):
            try:
                if self._state == _CLOSED:
                    self._refuse()
                try:
                    self.writer.send(b"Q")
                except BlockingIOError:
                    pass
            finally:
                self._mutex.release()
        elif self._state == _CLOSED:
            self._refuse()

    def drain(self) -> int:
        try:
            n = len(self.reader.recv(4096) or b"")
        except BlockingIOError:
            return 0
        if n == 0:
            raise ConnectionError("EOF on the control channel")
        return n

    def close(self) -> None:
        self._state = _CLOSED
        with self._mutex:
            self.reader.close()
            self.writer.close()

    def _claim(self) -> None:
        with self._mutex:
            if self._state != _OPEN:
                raise ValueError("Control is not unused and open")
            self._state = _CLAIMED


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



def _check(dials, control, timeout) -> None:
    if not isinstance(control, Control):
        raise TypeError("control must be a Control")
    if not isinstance(dials, Sequence) or isinstance(dials, (str, bytes)):
        raise TypeError("dials must be a sequence")
    fds = [d.sock.fileno() if isinstance(d, Dial) and isinstance(d.sock, socket.socket) else None
           for d in dials]
    if None in fds:
        raise TypeError("every element of dials must be a Dial with a socket")
    if -1 in fds:
        raise ValueError("a dial socket is closed")
    if any(d.sock.getblocking() for d in dials):
        raise ValueError("dial sockets must be non-blocking")
    if len(set(fds)) != len(fds) or len({d.name for d in dials}) != len(dials):
        raise ValueError("dial names and sockets must be unique")
    if timeout is not None:
        if type(timeout) is bool or not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be None or a number")
        if not timeout >= 0:
            raise ValueError("timeout must be >= 0")


def run(dials: Sequence[Dial], control: Control,
        timeout: float | None = None) -> list[DialResult]:
    _check(dials, control, timeout)
    control._claim()
    deadline = None if timeout is None or timeout > _FAR else time.monotonic() + timeout
    results: list[DialResult | None] = [None] * len(dials)
    sel = None
    try:
        sel = selectors.DefaultSelector()

        def on_control() -> None:
            control.drain()

        def on_dial(i: int, d: Dial):
            def handler() -> None:
                err = d.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                results[i] = (DialResult(d.name, "connected") if not err
                              else DialResult(d.name, "failed", err))
                sel.unregister(d.sock.fileno())
                d.sock.close()
            return handler

        sel.register(control.reader.fileno(), selectors.EVENT_READ, on_control)
        for i, d in enumerate(dials):
            sel.register(d.sock.fileno(), selectors.EVENT_WRITE, on_dial(i, d))
        remaining = len(dials)
        while remaining and not control.stop_requested:
            wait = None if deadline is None else min(max(deadline - time.monotonic(), 0.0), _DAY)
            for key, _ in sel.select(wait):
                key.data()
            remaining = results.count(None)
            if deadline is not None and time.monotonic() >= deadline:
                break
        rest = "cancelled" if control.stop_requested else "timeout"
        return [r if r is not None else DialResult(d.name, rest) for r, d in zip(results, dials)]
    finally:
        if sel is not None:
            for fd in list(sel.get_map()):
                sel.unregister(fd)
            sel.close()
        for d in dials:
            d.sock.close()
        control.close()
