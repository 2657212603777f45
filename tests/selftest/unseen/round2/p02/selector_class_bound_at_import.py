"""BREAKS: "It creates its selector with selectors.DefaultSelector() at call time (tests
substitute an instrumented subclass ...)".

HOW: the module does ``from selectors import DefaultSelector, EVENT_READ, EVENT_WRITE`` and
``run`` calls ``DefaultSelector()``: the class is bound once, when the module is imported.
Anything that substitutes ``selectors.DefaultSelector`` afterwards (the tests' instrumented
selector, a platform shim) is ignored: ``run`` keeps making the original epoll selector.
Everything still works functionally, but the contract "made with selectors.DefaultSelector()
when run is called" is broken.
"""
from __future__ import annotations

import errno
from selectors import EVENT_READ, EVENT_WRITE, DefaultSelector
import socket
import threading
import time
from dataclasses import dataclass
from typing import Sequence

__all__ = ["Control", "Dial", "DialResult", "dial", "run"]

MAX_WAIT = 86400.0  # one select() never waits longer than a day (epoll: C int of ms)


class Control:
    reader: socket.socket
    writer: socket.socket

    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair()
        self.reader.setblocking(False)
        self.writer.setblocking(False)
        self._stop = False
        self._closed = False
        self._claimed = False
        self._lock = threading.Lock()

    @property
    def stop_requested(self) -> bool:
        return self._stop

    def request_stop(self) -> None:
        if self._closed:
            raise RuntimeError("request_stop() after run() finished with this control")
        self._stop = True  # state first ...
        if not self._lock.acquire(blocking=False):
            if self._closed:
                raise RuntimeError("request_stop() after run() finished with this control")
            return  # someone holding the lock will make the loop see the flag
        try:
            if self._closed:
                raise RuntimeError("request_stop() after run() finished with this control")
            self.writer.send(b"Q")  # ... then the notification
        except BlockingIOError:
            pass  # buffer full: a wakeup is already pending
        finally:
            self._lock.release()

    def drain(self) -> int:
        try:
            data = self.reader.recv(4096)
        except BlockingIOError:
            return 0
        if not data:
            raise ConnectionError("control channel: EOF")
        return len(data)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            self.reader.close()
            self.writer.close()

    def _claim(self) -> None:
        with self._lock:
            if self._closed or self._claimed:
                raise ValueError("control already used or closed")
            self._claimed = True


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


def _check_args(dials, control, timeout) -> None:
    if not isinstance(control, Control):
        raise TypeError("control must be a Control")
    if isinstance(dials, (str, bytes)) or not isinstance(dials, Sequence):
        raise TypeError("dials must be a sequence of Dial")
    names, fds = set(), set()
    for d in dials:
        if not isinstance(d, Dial) or not isinstance(d.sock, socket.socket):
            raise TypeError(f"not a Dial: {d!r}")
        fd = d.sock.fileno()
        if fd < 0:
            raise ValueError(f"{d.name}: socket is closed")
        if d.sock.getblocking():
            raise ValueError(f"{d.name}: socket must be non-blocking")
        if d.name in names or fd in fds:
            raise ValueError(f"{d.name}: duplicate name or socket")
        names.add(d.name)
        fds.add(fd)
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number or None")
        if not timeout >= 0:
            raise ValueError("timeout must be >= 0")


def _result(d: Dial) -> DialResult:
    err = d.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err == 0:
        return DialResult(d.name, "connected")
    return DialResult(d.name, "failed", err)


def run(dials: Sequence[Dial], control: Control,
        timeout: float | None = None) -> list[DialResult]:
    _check_args(dials, control, timeout)
    control._claim()
    # from here on, every socket is ours
    deadline = None if timeout is None else time.monotonic() + min(timeout, 1e18)
    done: dict[str, DialResult] = {}
    sel = None
    try:
        sel = DefaultSelector()
        sel.register(control.reader, EVENT_READ, None)
        for d in dials:
            sel.register(d.sock, EVENT_WRITE, d)
        while len(done) < len(dials) and not control.stop_requested:
            if deadline is None:
                wait = None
            else:
                wait = min(max(0.0, deadline - time.monotonic()), MAX_WAIT)
            for key, _ in sel.select(wait):
                if key.data is None:
                    control.drain()
                else:
                    d = key.data
                    done[d.name] = _result(d)
                    sel.unregister(d.sock)
                    d.sock.close()
            if deadline is not None and time.monotonic() >= deadline:
                break
        left = "cancelled" if control.stop_requested else "timeout"
        return [done.get(d.name) or DialResult(d.name, left) for d in dials]
    finally:
        if sel is not None:
            for key in list(sel.get_map().values()):
                sel.unregister(key.fileobj)
            sel.close()
        for d in dials:
            d.sock.close()
        control.close()
