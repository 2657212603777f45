"""P02 reference: a Cancel button for a selector loop that dials several TCP endpoints.

Two separate facts make a cancel work:

* state        -- a flag, set in one atomic store, that remembers "cancel was requested";
* notification -- one byte on a socket pair whose read end sits in the loop's selector,
                  so the same ``select()`` that waits for the dials also wakes for it.

Requesters write the state first and then notify.  The loop, which owns every socket,
does all the cleanup: unregister, then close.
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

#: The most ``drain()`` reads in one call, so a flood of presses cannot starve the dials.
DRAIN_CHUNK = 4096

#: The longest single ``select()`` wait.  epoll and poll count their timeout in C ``int``
#: milliseconds (about 24.8 days), so ``select(1e12)`` raises ``OverflowError``; a longer
#: deadline is simply waited for in several waits.
MAX_WAIT = 86400.0

#: A deadline further away than this (``inf``, ``1e12``, ``10**400``) is treated as this far:
#: about 3e10 years, and still a float that every clock arithmetic accepts.
FOREVER = 1e18

#: What ``request_stop()`` says once ``run()`` has finished with (closed) the control.
FINISHED = "request_stop() after run() has finished with this Control"


class Control:
    """The control channel: stop state plus a wakeup socket pair.

    ``reader`` belongs to the loop (it registers it in its selector); ``writer`` is used by
    requesting threads through ``request_stop()``.  Once ``run()`` has finished with the
    control, both ends are closed and ``request_stop()`` raises ``RuntimeError``.
    """

    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair()
        # Both ends non-blocking: the loop must never sleep inside recv() and a requester
        # (a UI thread) must never sleep inside send() waiting for buffer space.
        self.reader.setblocking(False)
        self.writer.setblocking(False)
        # State "cancel requested": set by requesters, read by the loop after every wakeup.
        # Nobody waits on it -- the byte on the socket pair is the wakeup.  A plain bool, not
        # a threading.Event: Event.set() takes a lock, and request_stop() may run in a signal
        # handler that interrupted this very thread while it held that lock.  One store of
        # True is atomic, and a signal cannot land inside it.
        self._stop = False
        # Set first thing by close(): from then on request_stop() raises, without the lock.
        self._closed = False
        # Guards the sockets while request_stop() sends on them, against close() tearing them
        # down (a closed descriptor number could already belong to a new socket); also
        # _claimed.  Requesters only *try* it, never wait for it (see request_stop).
        self._lock = threading.Lock()
        self._claimed = False  # run() has taken ownership

    @property
    def stop_requested(self) -> bool:
        """True once any thread has called ``request_stop()``."""
        return self._stop

    def request_stop(self) -> None:
        """Ask the loop to stop. Any thread, any number of times, a signal handler too;
        never blocks."""
        if self._closed:
            raise RuntimeError(FINISHED)
        # Invariant: while run() is live and a stop is requested, either the loop is awake
        # (it reads the flag before it sleeps again) or an unread byte sits in the reader.
        # State first keeps it true: the loop may wake the instant the byte arrives, and
        # it must then find the flag already set -- otherwise it goes back to sleep for good.
        self._stop = True
        if not self._lock.acquire(blocking=False):
            # Held by another press (it set the same flag before it took the lock, and it
            # sends), by _claim() (the loop reads the flag before it first waits), by close(),
            # or by this very thread, which a signal interrupted inside request_stop() or
            # close(): waiting could then never end.  No byte of ours is needed in any case.
            if self._closed:
                raise RuntimeError(FINISHED)
            return
        try:
            if self._closed:  # close() ran between the first look and the lock
                raise RuntimeError(FINISHED)
            self.writer.send(b"Q")
        except BlockingIOError:
            # Buffer full: unread bytes are already there, so the loop will wake anyway
            # and find the flag.  Many presses coalesce into one wakeup.
            pass
        finally:
            self._lock.release()

    def drain(self) -> int:
        """Loop side: read pending notification bytes once (at most ``DRAIN_CHUNK``).

        Returns how many bytes were read, 0 when nothing is pending.
        Raises ``ConnectionError`` when the writer end has been closed (EOF)."""
        try:
            data = self.reader.recv(DRAIN_CHUNK)
        except BlockingIOError:
            return 0  # EAGAIN: empty for now, not an error
        if not data:
            raise ConnectionError("control channel closed by the requesting side (EOF)")
        return len(data)

    def close(self) -> None:
        """Close both ends (idempotent). Later ``request_stop()`` calls raise."""
        self._closed = True  # first: a press from now on raises instead of trying the lock
        with self._lock:  # a press already past its check finishes its (non-blocking) send
            self.reader.close()
            self.writer.close()

    def _claim(self) -> None:
        """Hand the control to ``run()``; a control serves exactly one run."""
        with self._lock:
            if self._closed or self._claimed:
                raise ValueError("control is closed or was already used by run()")
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


def run(dials: Sequence[Dial], control: Control,
        timeout: float | None = None) -> list[DialResult]:
    """Wait for every dial to finish, for a stop request, or for the deadline.

    Returns one ``DialResult`` per dial, in the order given.  After validating its
    arguments, ``run`` owns every dial socket and ``control``: it closes all of them (each
    unregistered before it is closed) and its selector, on return and on any exception.
    Invalid arguments raise ``TypeError``/``ValueError`` and close nothing.
    """
    _validate(dials, control, timeout)
    control._claim()
    # From here on every socket is ours to close, whatever happens.
    deadline = None if timeout is None else time.monotonic() + min(timeout, FOREVER)
    results: dict[str, DialResult] = {}
    sel = None
    try:
        sel = selectors.DefaultSelector()
        sel.register(control.reader, selectors.EVENT_READ, None)
        for d in dials:
            sel.register(d.sock, selectors.EVENT_WRITE, d)
        # Invariant: a dial is registered in sel  <=>  it has no result yet.
        # The flag is read before the first wait too: a stop requested before run() began
        # returns at once, every dial "cancelled".
        while len(results) < len(dials) and not control.stop_requested:
            wait = None if deadline is None else min(max(0.0, deadline - time.monotonic()),
                                                     MAX_WAIT)
            # The only place the loop sleeps: it wakes for a finished connect or a
            # notification byte, never just to look at the flag (no polling).
            for key, _ in sel.select(wait):
                if key.data is None:
                    control.drain()  # once per wakeup; the flag is read by the while test
                else:
                    results[key.data.name] = _outcome(key.data)
                    sel.unregister(key.data.sock)
                    key.data.sock.close()
            if deadline is not None and time.monotonic() >= deadline:
                break
        unfinished = "cancelled" if control.stop_requested else "timeout"
        return [results.get(d.name) or DialResult(d.name, unfinished) for d in dials]
    finally:
        # Unregister before close (the selectors documentation asks for this order: a closed
        # descriptor number can be reused before the selector forgets it).
        if sel is not None:
            for key in list(sel.get_map().values()):
                sel.unregister(key.fileobj)
            sel.close()
        for d in dials:
            d.sock.close()
        control.close()


def _outcome(d: Dial) -> DialResult:
    """The result of a dial whose socket reported writable: the connect has finished."""
    err = d.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err == 0:
        return DialResult(d.name, "connected")
    return DialResult(d.name, "failed", err)


def _validate(dials: Sequence[Dial], control: Control, timeout: float | None) -> None:
    """Reject bad arguments before taking ownership of anything (closes nothing)."""
    if not isinstance(control, Control):
        raise TypeError(f"control must be a Control, not {type(control).__name__}")
    if not isinstance(dials, Sequence) or isinstance(dials, (str, bytes)):
        raise TypeError("dials must be a sequence of Dial")
    names, fds = set(), set()
    for d in dials:
        if not isinstance(d, Dial) or not isinstance(d.sock, socket.socket):
            raise TypeError(f"not a Dial with a socket: {d!r}")
        if d.sock.fileno() == -1:
            raise ValueError(f"dial {d.name!r}: socket is closed")
        if d.sock.getblocking():
            raise ValueError(f"dial {d.name!r}: socket must be non-blocking")
        if d.name in names or d.sock.fileno() in fds:
            raise ValueError(f"dial {d.name!r}: names and sockets must be unique")
        names.add(d.name)
        fds.add(d.sock.fileno())
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError("timeout must be a number of seconds or None")
        if not timeout >= 0:  # also rejects NaN
            raise ValueError("timeout must be >= 0")
