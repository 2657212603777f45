"""P02 alternate: the loop as a small object, stopping as soon as the flag is seen.

Differences from the reference: the Control guards its lifecycle with an RLock;
``run`` delegates to a ``_Loop`` object; a finished dial is unregistered at once but its
socket is closed only in the final cleanup; the stop flag is checked right after the
drain, before any other event of the same wakeup is looked at.
"""
from __future__ import annotations

import errno
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from numbers import Real
from collections.abc import Sequence

__all__ = ["Control", "Dial", "DialResult", "dial", "run"]

_MAX_DRAIN = 4096


class Control:
    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair()
        self.reader.setblocking(False)
        self.writer.setblocking(False)
        self._flag = threading.Event()
        # Guards _owner_done/_taken; request_stop and close never overlap under it.
        self._guard = threading.RLock()
        self._taken = False
        self._owner_done = False

    @property
    def stop_requested(self) -> bool:
        return self._flag.is_set()

    def request_stop(self) -> None:
        with self._guard:
            if self._owner_done:
                raise RuntimeError("run() is over: nobody reads this control any more")
            self._flag.set()
            try:
                self.writer.send(b"Q")
            except BlockingIOError:
                return  # coalesced with a wakeup that is already pending

    def drain(self) -> int:
        try:
            chunk = self.reader.recv(_MAX_DRAIN)
        except (BlockingIOError, InterruptedError):
            return 0
        if chunk == b"":
            raise ConnectionError("the control writer was closed")
        return len(chunk)

    def close(self) -> None:
        with self._guard:
            self._owner_done = True
            for end in (self.writer, self.reader):
                end.close()


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


class _Loop:
    def __init__(self, dials: Sequence[Dial], control: Control, timeout: float | None):
        self.dials = list(dials)
        self.control = control
        # Capped: inf, 1e12 or 10**400 all mean "as good as never" and stay a float.
        self.deadline = None if timeout is None else time.monotonic() + min(timeout, 1e18)
        self.done: dict[int, DialResult] = {}
        self.sel: selectors.BaseSelector | None = None

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        # One wait of at most a day: epoll/poll reject more than ~24.8 days.
        return min(max(0.0, self.deadline - time.monotonic()), 86400.0)

    def wait_once(self) -> None:
        for key, _ in self.sel.select(self.remaining()):
            if key.fileobj is self.control.reader:
                self.control.drain()
                if self.control.stop_requested:
                    return
            elif key.data not in self.done:
                d = self.dials[key.data]
                err = d.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                self.done[key.data] = (DialResult(d.name, "connected") if not err
                                       else DialResult(d.name, "failed", err))
                self.sel.unregister(d.sock)

    def go(self) -> list[DialResult]:
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.control.reader, selectors.EVENT_READ)
        for i, d in enumerate(self.dials):
            self.sel.register(d.sock, selectors.EVENT_WRITE, i)
        label = "unused"
        while len(self.done) < len(self.dials):
            if self.control.stop_requested:
                label = "cancelled"
                break
            self.wait_once()  # at least one look, even with timeout=0
            if self.control.stop_requested:
                label = "cancelled"
                break
            if self.deadline is not None and time.monotonic() >= self.deadline:
                label = "timeout"
                break
        return [self.done.get(i, DialResult(d.name, label)) for i, d in enumerate(self.dials)]

    def release(self) -> None:
        if self.sel is not None:
            for key in list(self.sel.get_map().values()):
                self.sel.unregister(key.fileobj)
            self.sel.close()
        for d in self.dials:
            d.sock.close()
        self.control.close()


def run(dials: Sequence[Dial], control: Control,
        timeout: float | None = None) -> list[DialResult]:
    if not isinstance(control, Control):
        raise TypeError("control must be a Control")
    if timeout is not None and (not isinstance(timeout, Real) or isinstance(timeout, bool)):
        raise TypeError("timeout must be a real number")
    if timeout is not None and not timeout >= 0:
        raise ValueError("timeout must be >= 0")
    if not isinstance(dials, Sequence) or isinstance(dials, (str, bytes)):
        raise TypeError("dials must be a sequence of Dial")
    seen: set[str] = set()
    seen_fds: set[int] = set()
    for d in dials:
        if not isinstance(d, Dial):
            raise TypeError(f"{d!r} is not a Dial")
        if d.name in seen:
            raise ValueError(f"duplicate dial name {d.name!r}")
        seen.add(d.name)
        if d.sock.fileno() == -1 or d.sock.getblocking():
            raise ValueError(f"dial {d.name!r}: socket closed or blocking")
        if d.sock.fileno() in seen_fds:
            raise ValueError(f"dial {d.name!r}: its socket belongs to another dial too")
        seen_fds.add(d.sock.fileno())
    with control._guard:
        if control._owner_done or control._taken:
            raise ValueError("control is closed or already in use")
        control._taken = True
    loop = _Loop(dials, control, timeout)
    try:
        return loop.go()
    finally:
        loop.release()
