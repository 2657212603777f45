"""P02 alternate: closures instead of methods and state fields.

Differences from the reference: ``Control`` builds its operations in ``__init__`` as
closures over local variables (the socket ends, one-element cells for the request and the lifecycle),
so they never look anything up on ``self``; ``run`` registers small watch objects that only
have ``fileno()`` plus a callback, and dispatches every readiness event to that callback; the
results are a dict filled by the callbacks; the loop stops through a ``nonlocal`` flag.
"""
from __future__ import annotations

import errno
import math
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Control", "Dial", "DialResult", "dial", "run"]


class _Watch:
    """What the selector sees: a descriptor to watch and what to do when it is ready."""

    def __init__(self, fd: int, on_ready: Callable[[], None]) -> None:
        self._fd = fd
        self.on_ready = on_ready

    def fileno(self) -> int:
        return self._fd


class Control:
    def __init__(self) -> None:
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self.reader, self.writer = reader, writer
        # The request is one store into a cell (a signal handler may press: an Event's set()
        # takes a lock this very thread may hold).  The lock keeps close() from closing the
        # sockets under a send; presses only try it: whoever holds it already pressed, or
        # is close().
        requested = [False]
        lock = threading.Lock()
        phase = ["fresh"]  # fresh -> taken -> over

        def request_stop() -> None:
            if phase[0] == "over":
                raise RuntimeError("request_stop(): the run of this control is over")
            requested[0] = True
            if not lock.acquire(blocking=False):
                if phase[0] == "over":
                    raise RuntimeError("request_stop(): the run of this control is over")
                return
            try:
                if phase[0] == "over":  # close() ran before we got the lock
                    raise RuntimeError("request_stop(): the run of this control is over")
                writer.send(b"Q")
            except BlockingIOError:
                pass
            finally:
                lock.release()

        def drain() -> int:
            try:
                data = reader.recv(4096)
            except BlockingIOError:
                return 0
            if data == b"":
                raise ConnectionError("control: the writer end was closed")
            return len(data)

        def close() -> None:
            phase[0] = "over"
            with lock:
                reader.close()
                writer.close()

        def take() -> None:
            with lock:
                if phase[0] != "fresh":
                    raise ValueError("control already used or closed")
                phase[0] = "taken"

        self.request_stop = request_stop
        self.drain = drain
        self.close = close
        self._take = take
        self._requested = lambda: requested[0]

    @property
    def stop_requested(self) -> bool:
        return self._requested()


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


def _reject(dials: object, control: object, timeout: object) -> None:
    if not isinstance(control, Control):
        raise TypeError("control must be a Control")
    if timeout is not None:
        if type(timeout) not in (int, float):
            raise TypeError("timeout must be an int, a float or None")
        if not timeout >= 0:  # NaN too
            raise ValueError("timeout must be >= 0")
    if not isinstance(dials, Sequence) or isinstance(dials, (str, bytes)):
        raise TypeError("dials must be a sequence")
    names = [d.name for d in dials if isinstance(d, Dial)]
    if len(names) != len(dials):
        raise TypeError("dials may hold Dial objects only")
    if len(set(names)) != len(names):
        raise ValueError("dial names must be unique")
    fds = [d.sock.fileno() for d in dials]
    if any(fd < 0 for fd in fds) or any(d.sock.getblocking() for d in dials):
        raise ValueError("every dial needs an open, non-blocking socket")
    if len(set(fds)) != len(fds):
        raise ValueError("a socket is used by two dials")


def run(dials: Sequence[Dial], control: Control,
        timeout: float | None = None) -> list[DialResult]:
    _reject(dials, control, timeout)
    control._take()
    started = time.monotonic()
    # As a float: an int beyond float range (10**400) is as good as inf.
    limit = None if timeout is None else (math.inf if timeout > 1e300 else float(timeout))
    results: dict[str, DialResult] = {}
    sel = None
    watches: list[_Watch] = []

    def remaining() -> float | None:
        if limit is None:
            return None
        left = limit - (time.monotonic() - started)
        return min(max(left, 0.0), 7 * 86400.0)  # a week at most per wait

    def expired() -> bool:
        return limit is not None and time.monotonic() - started >= limit

    def finished(d: Dial, watch: _Watch) -> Callable[[], None]:
        def on_ready() -> None:
            code = d.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            results[d.name] = (DialResult(d.name, "failed", code) if code
                               else DialResult(d.name, "connected"))
            sel.unregister(watch)
        return on_ready

    try:
        sel = selectors.DefaultSelector()
        ctl = _Watch(control.reader.fileno(), control.drain)
        sel.register(ctl, selectors.EVENT_READ)
        watches.append(ctl)
        for d in dials:
            w = _Watch(d.sock.fileno(), lambda: None)
            w.on_ready = finished(d, w)
            sel.register(w, selectors.EVENT_WRITE)
            watches.append(w)
        while len(results) < len(dials) and not control.stop_requested:
            for key, _ in sel.select(remaining()):
                key.fileobj.on_ready()
            if expired():
                break
        why = "cancelled" if control.stop_requested else "timeout"
        return [results.get(d.name, DialResult(d.name, why)) for d in dials]
    finally:
        if sel is not None:
            for w in watches:
                if w in {k.fileobj for k in sel.get_map().values()}:
                    sel.unregister(w)
            sel.close()
        for d in dials:
            d.sock.close()
        control.close()
