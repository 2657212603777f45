"""P02 alternate: raw file descriptors everywhere below the public attributes.

Differences from the reference: the selector is given plain integer descriptors, never
socket objects; the control is read and written with ``os.read``/``os.write`` on its
descriptors, made non-blocking with ``os.set_blocking`` (the socket objects keep their
default mode: the descriptor flag is what makes a call wait or not); the state is a plain
boolean (one store; presses only try the lock), not a ``threading.Event``; sockets are closed by detaching their
descriptor and closing the number; a deadline beyond ~31 years counts as none.
"""
from __future__ import annotations

import errno
import os
import selectors
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Control", "Dial", "DialResult", "dial", "run"]

_CHUNK = 4096
_NEVER = 1e9  # seconds; a longer timeout (inf, 1e12) is "no deadline"


def _close(sock: socket.socket) -> None:
    """Close ``sock``'s descriptor by number (idempotent)."""
    fd = sock.detach()  # the object lets go, so it will never close a reused number
    if fd >= 0:
        os.close(fd)


class Control:
    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair()
        self._rfd, self._wfd = self.reader.fileno(), self.writer.fileno()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        # Guards _used and the descriptors' lives (no write while close() runs).  A press only
        # tries it: a signal handler may press while this very thread holds it.
        self._lock = threading.Lock()
        self._stopping = False  # the state: one store, read without the lock
        self._used = False
        self._gone = False  # set by close() before it takes the lock

    @property
    def stop_requested(self) -> bool:
        return self._stopping

    def request_stop(self) -> None:
        if self._gone:
            raise RuntimeError("this control's run() is over")
        self._stopping = True  # the state, then the byte
        if not self._lock.acquire(blocking=False):  # a press, close() or _take() has it
            if self._gone:
                raise RuntimeError("this control's run() is over")
            return
        try:
            if self._gone:  # close() ran before we got the lock: the number may be reused
                raise RuntimeError("this control's run() is over")
            os.write(self._wfd, b"Q")
        except BlockingIOError:
            pass  # a byte is already waiting: this press rides on its wakeup
        finally:
            self._lock.release()

    def drain(self) -> int:
        try:
            got = os.read(self._rfd, _CHUNK)
        except BlockingIOError:
            return 0
        if not got:
            raise ConnectionError("the control's writer end is closed")
        return len(got)

    def close(self) -> None:
        self._gone = True
        with self._lock:
            _close(self.reader)
            _close(self.writer)

    def _take(self) -> None:
        with self._lock:
            if self._gone or self._used:
                raise ValueError("a Control serves one run() and must be open")
            self._used = True


@dataclass
class Dial:
    name: str
    sock: socket.socket


def dial(name: str, address: tuple[str, int]) -> Dial:
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
    status: str
    error: int | None = None


def _deadline(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError("timeout: a number of seconds or None")
    if not timeout >= 0:  # NaN too
        raise ValueError("timeout must be >= 0")
    return None if timeout > _NEVER else time.monotonic() + timeout


def _fds(dials: object) -> list[int]:
    if not isinstance(dials, Sequence) or isinstance(dials, (str, bytes)):
        raise TypeError("dials: a sequence of Dial")
    fds: list[int] = []
    for d in dials:
        if not isinstance(d, Dial) or not isinstance(d.sock, socket.socket):
            raise TypeError(f"not a Dial: {d!r}")
        fd = d.sock.fileno()
        if fd < 0 or os.get_blocking(fd):
            raise ValueError(f"{d.name!r}: the socket must be open and non-blocking")
        fds.append(fd)
    if len({d.name for d in dials}) < len(dials) or len(set(fds)) < len(fds):
        raise ValueError("dial names (and sockets) must be unique")
    return fds


def run(dials: Sequence[Dial], control: Control,
        timeout: float | None = None) -> list[DialResult]:
    if not isinstance(control, Control):
        raise TypeError("control: a Control")
    deadline = _deadline(timeout)
    fds = _fds(dials)
    control._take()
    index = {fd: i for i, fd in enumerate(fds)}  # fd -> position in dials
    out: list[DialResult | None] = [None] * len(fds)
    sel = None
    try:
        sel = selectors.DefaultSelector()
        sel.register(control._rfd, selectors.EVENT_READ)
        for fd in fds:
            sel.register(fd, selectors.EVENT_WRITE)
        while index and not control.stop_requested:
            now = time.monotonic()
            wait = None if deadline is None else min(max(0.0, deadline - now), 3600.0)
            for key, _ in sel.select(wait):
                if key.fd == control._rfd:
                    control.drain()
                elif key.fd in index:
                    i = index.pop(key.fd)
                    code = dials[i].sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    out[i] = DialResult(dials[i].name, "failed", code) if code else \
                        DialResult(dials[i].name, "connected")
                    sel.unregister(key.fd)
            if deadline is not None and time.monotonic() >= deadline:
                break
        left = "cancelled" if control.stop_requested else "timeout"
        return [r or DialResult(d.name, left) for r, d in zip(out, dials)]
    finally:
        if sel is not None:
            for fd in list(sel.get_map()):
                sel.unregister(fd)
            sel.close()
        for d in dials:
            _close(d.sock)
        control.close()
