"""P02 alternate: a generator of events, a press counter, and a look before each wait.

Differences from the reference: the stop state is a count of presses under a
``threading.Condition`` (nobody waits on it; it is just a locked counter), not an Event;
the notification is sent with ``MSG_DONTWAIT``; ``drain`` reads into a reusable buffer with
``recv_into``; the loop is a generator that yields ``("dial", i)`` / ``("control", n)``
events and first *looks* with ``select(0)`` before it *waits*, so one round handles
everything already ready; the driver decides when to stop; a finished dial is unregistered
at once but closed only in the final cleanup, which unregisters the rest first, then closes.
"""
from __future__ import annotations

import errno
import selectors
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from numbers import Real

__all__ = ["Control", "Dial", "DialResult", "dial", "run"]


class Control:
    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair()
        self.reader.setblocking(False)
        self.writer.setblocking(False)
        self._state = threading.Condition()  # guards _presses, _life and the sockets
        self._presses = 0
        self._life = 0  # 0 new, 1 claimed by run(), 2 closed
        self._buf = memoryview(bytearray(4096))

    @property
    def stop_requested(self) -> bool:
        with self._state:
            return self._presses > 0

    def request_stop(self) -> None:
        with self._state:
            if self._life == 2:
                raise RuntimeError("request_stop() after run() has finished")
            self._presses += 1
            try:
                self.writer.send(b"!", socket.MSG_DONTWAIT)
            except BlockingIOError:
                pass  # a wakeup is already pending

    def drain(self) -> int:
        try:
            n = self.reader.recv_into(self._buf)
        except BlockingIOError:
            return 0
        if n == 0:
            raise ConnectionError("EOF on the control channel")
        return n

    def close(self) -> None:
        with self._state:
            self._life = 2
            self.reader.close()
            self.writer.close()


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


def _events(sel: selectors.BaseSelector, deadline: float | None) -> Iterator[tuple[str, int]]:
    """Readiness events, forever: look first; wait (until the deadline) only if none.  The
    deadline is looked at after every round too: under a flood of control bytes something
    is ready at every look, and the run must still time out."""
    while True:
        ready = sel.select(0)
        if not ready:
            if deadline is None:
                wait = None
            else:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    yield ("deadline", 0)
                    continue
            ready = sel.select(min(wait, 604800.0) if wait is not None else None)
        for key, _ in ready:
            yield key.data
        if deadline is not None and time.monotonic() >= deadline:
            yield ("deadline", 0)


def run(dials: Sequence[Dial], control: Control,
        timeout: float | None = None) -> list[DialResult]:
    if not isinstance(control, Control):
        raise TypeError("control must be a Control")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, Real):
            raise TypeError("timeout must be a real number or None")
        if not timeout >= 0:
            raise ValueError("timeout must be >= 0 (and not NaN)")
    if not isinstance(dials, Sequence) or isinstance(dials, (str, bytes)):
        raise TypeError("dials must be a sequence of Dial")
    seen: set[object] = set()
    for d in dials:
        if not isinstance(d, Dial) or not isinstance(d.sock, socket.socket):
            raise TypeError(f"{d!r} is not a Dial")
        if d.name in seen or d.sock.fileno() in seen:
            raise ValueError(f"dial {d.name!r} repeats a name or a socket")
        if d.sock.fileno() == -1 or d.sock.getblocking():
            raise ValueError(f"dial {d.name!r}: the socket must be open and non-blocking")
        seen.update((d.name, d.sock.fileno()))
    with control._state:
        if control._life != 0:
            raise ValueError("this control is closed or already used")
        control._life = 1

    deadline = None
    if timeout is not None and timeout < 1e15:
        deadline = time.monotonic() + float(timeout)
    done: dict[int, DialResult] = {}
    sel = None
    try:
        sel = selectors.DefaultSelector()
        sel.register(control.reader, selectors.EVENT_READ, ("control", -1))
        for i, d in enumerate(dials):
            sel.register(d.sock, selectors.EVENT_WRITE, ("dial", i))
        outcome = "cancelled"
        if not control.stop_requested and dials:
            for kind, i in _events(sel, deadline):
                if kind == "deadline":
                    outcome = "timeout"
                    break
                if kind == "control":
                    control.drain()
                    if control.stop_requested:
                        break
                elif i not in done:
                    d = dials[i]
                    err = d.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    done[i] = (DialResult(d.name, "failed", err) if err
                               else DialResult(d.name, "connected"))
                    sel.unregister(d.sock)
                    if len(done) == len(dials):
                        break
        return [done.get(i, DialResult(d.name, outcome)) for i, d in enumerate(dials)]
    finally:
        if sel is not None:
            for key in list(sel.get_map().values()):
                sel.unregister(key.fileobj)
            sel.close()
        for d in dials:
            d.sock.close()
        control.close()
