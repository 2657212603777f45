"""P02 alternate: the same contract, written around ``contextlib.ExitStack``.

Differences from the reference: cleanup is pushed onto an ExitStack as each resource is
taken (an ExitStack unwinds last-in first-out, so "unregister" is pushed after "close" and
runs before it); ``drain`` reads into a preallocated buffer; results live in a list indexed
like ``dials``; the control's lifecycle is one small state string.
"""
from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from collections.abc import Sequence

__all__ = ["Control", "Dial", "DialResult", "dial", "run"]


class Control:
    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair()
        for end in (self.reader, self.writer):
            end.setblocking(False)
        # The state: one store, so a signal handler may press (an Event's set() takes a lock).
        self._requested = False
        # Guards the sockets' close vs send, and _phase's "new" -> "running"; presses only try
        # it: whoever holds it has pressed already, or is closing (perhaps this very thread,
        # interrupted by a signal).
        self._mutex = threading.Lock()
        self._phase = "new"                  # "new" -> "running" -> "closed"
        self._buf = bytearray(4096)          # only the loop thread drains

    @property
    def stop_requested(self) -> bool:
        return self._requested

    def request_stop(self) -> None:
        if self._phase == "closed":
            raise RuntimeError("this control channel is finished")
        self._requested = True  # state before notification
        if not self._mutex.acquire(blocking=False):
            if self._phase == "closed":
                raise RuntimeError("this control channel is finished")
            return
        try:
            if self._phase == "closed":  # close() ran before we got the lock
                raise RuntimeError("this control channel is finished")
            with contextlib.suppress(BlockingIOError):  # full: a wakeup is pending already
                self.writer.send(b"Q")
        finally:
            self._mutex.release()

    def drain(self) -> int:
        try:
            n = self.reader.recv_into(self._buf)
        except BlockingIOError:
            return 0
        if n == 0:
            raise ConnectionError("control channel reached EOF")
        return n

    def close(self) -> None:
        self._phase = "closed"
        with self._mutex:
            self.reader.close()
            self.writer.close()

    def _start(self) -> None:
        with self._mutex:
            if self._phase != "new":
                raise ValueError(f"control is {self._phase}, not new")
            self._phase = "running"


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


def _check_args(dials, control, timeout) -> None:
    if timeout is not None:
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
            raise TypeError("timeout must be a number or None")
        if timeout < 0 or timeout != timeout:
            raise ValueError("timeout must be >= 0")
    if not isinstance(dials, Sequence) or isinstance(dials, (str, bytes)):
        raise TypeError("dials must be a sequence of Dial")
    if any(not isinstance(d, Dial) for d in dials):
        raise TypeError("every element of dials must be a Dial")
    if len({d.name for d in dials}) != len(dials):
        raise ValueError("dial names must be unique")
    for d in dials:
        if d.sock.fileno() < 0 or d.sock.getblocking():
            raise ValueError(f"dial {d.name!r} needs an open, non-blocking socket")
    if len({d.sock.fileno() for d in dials}) != len(dials):
        raise ValueError("a socket appears twice")
    if not isinstance(control, Control):
        raise TypeError("control must be a Control")


def run(dials: Sequence[Dial], control: Control,
        timeout: float | None = None) -> list[DialResult]:
    _check_args(dials, control, timeout)
    control._start()
    # select() takes at most ~24.8 days (epoll/poll count C int milliseconds); a farther
    # deadline (inf, 1e12) is waited for in one-day waits.
    end = None if timeout is None else time.monotonic() + min(timeout, 1e18)
    out: list[DialResult | None] = [None] * len(dials)
    with contextlib.ExitStack() as stack:
        stack.callback(control.close)
        for d in dials:
            stack.callback(d.sock.close)
        sel = selectors.DefaultSelector()
        stack.callback(sel.close)
        # Pushed last, runs first: forget whatever is still registered before anything closes.
        stack.callback(lambda: [sel.unregister(k.fileobj) for k in list(sel.get_map().values())])
        sel.register(control.reader, selectors.EVENT_READ, "control")
        for i, d in enumerate(dials):
            sel.register(d.sock, selectors.EVENT_WRITE, i)
        left = len(dials)
        while left and not control.stop_requested:
            if end is None:
                events = sel.select()
            else:
                events = sel.select(min(max(0.0, end - time.monotonic()), 86400.0))
            for key, _ in events:
                if key.data == "control":
                    control.drain()
                    continue
                d = dials[key.data]
                code = d.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                out[key.data] = (DialResult(d.name, "connected") if code == 0
                                 else DialResult(d.name, "failed", code))
                sel.unregister(d.sock)
                left -= 1
            if end is not None and time.monotonic() >= end:
                break
        why = "cancelled" if control.stop_requested else "timeout"
        return [r if r is not None else DialResult(d.name, why) for r, d in zip(out, dials)]
