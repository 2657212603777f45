"""P02 · Cancel control channel — state, notification, ownership.

A diagnostics tool dials several TCP endpoints at once from one selector loop.  Another
thread (the UI's Cancel button) must be able to stop that loop while it sleeps in
``select()``.  Your task: the ``Control`` channel (a ``threading.Event`` for the state plus
a socket pair for the wakeup) and ``run``, the loop that owns and cleans up every socket.

``dial()``, ``Dial`` and ``DialResult`` are given.  Run ``./check.sh p02`` to check,
``./check.sh hint p02`` when stuck, ``./check.sh book p02`` for the chapter and
``./check.sh demo p02`` to watch a thread in select() ignore an Event.
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


class Control:
    """The control channel between requesting threads and the loop.

    Attributes:
        reader: read end of a ``socket.socketpair()``; the loop registers it in its selector.
            Non-blocking.
        writer: write end, used by requesting threads through ``request_stop()``.
            Non-blocking.
    """

    reader: socket.socket
    writer: socket.socket

    def __init__(self) -> None:
        """Create the socket pair (both ends non-blocking) and the ``threading.Event``."""
        # TODO: the socket pair, the Event, and whatever you need to know that run() has
        #       taken this control / that it is closed (guard that state with a lock).
        raise NotImplementedError("Control.__init__")

    @property
    def stop_requested(self) -> bool:
        """True once any thread has called ``request_stop()``."""
        # TODO
        raise NotImplementedError("Control.stop_requested")

    def request_stop(self) -> None:
        """Ask the loop to stop: any thread, any number of times; never blocks.

        Set the Event **first**, then ``writer.send(b"Q")``.  A ``BlockingIOError`` (buffer
        full) means a wakeup is already pending: drop the byte.  After ``run()`` has finished
        with this control, raise ``RuntimeError``.
        """
        # TODO
        raise NotImplementedError("Control.request_stop")

    def drain(self) -> int:
        """Loop side: one ``recv`` of at most 4096 bytes; return how many were read.

        Nothing there (``EAGAIN``, i.e. ``BlockingIOError``) returns 0.  EOF (``recv``
        returns ``b""``: the writer end was closed) raises ``ConnectionError``.  Never read in
        a loop until empty.
        """
        # TODO
        raise NotImplementedError("Control.drain")

    def close(self) -> None:
        """Close both ends (calling it twice is fine).  Later ``request_stop()`` raises."""
        # TODO
        raise NotImplementedError("Control.close")


@dataclass
class Dial:
    """One TCP connect in progress."""

    name: str
    sock: socket.socket  # non-blocking TCP socket, connect already started


def dial(name: str, address: tuple[str, int]) -> Dial:
    """Start a non-blocking IPv4 TCP connect to ``address`` and wrap it as a ``Dial``.

    Raises ``OSError`` (and closes the socket) if the connect fails on the spot."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    err = sock.connect_ex(address)
    if err not in (0, errno.EINPROGRESS):
        sock.close()
        raise OSError(err, f"connect to {address!r} failed at once")
    return Dial(name, sock)


@dataclass(frozen=True)
class DialResult:
    name: str
    status: str               # "connected" | "failed" | "timeout" | "cancelled"
    error: int | None = None  # errno when status == "failed"


def run(dials: Sequence[Dial], control: Control,
        timeout: float | None = None) -> list[DialResult]:
    """Wait for every dial to finish, for a stop request, or for the deadline.

    1. Validate first: ``dials`` is a sequence of ``Dial`` with unique names and open,
       non-blocking sockets; ``control`` is an unused, open ``Control``; ``timeout`` is None
       or >= 0.  Otherwise raise ``TypeError``/``ValueError`` and close nothing.
    2. From then on ``run`` owns every dial socket and the control.  On return and on any
       exception: every socket is unregistered from the selector, then closed; the
       selector is closed; the control is closed.
    3. Create the selector with ``selectors.DefaultSelector()`` here, at call time.  One
       ``select()`` watches every dial (``EVENT_WRITE``: ``SO_ERROR == 0`` → "connected",
       else "failed" with that errno) and ``control.reader`` (``EVENT_READ``).
    4. No polling: with no deadline, wait with no timeout.
    5. Control readable → ``drain()`` once, then look at ``stop_requested``.  A byte without
       the state does not stop anything.  Stop requested (even before ``run`` began) →
       unfinished dials are "cancelled", finished ones keep their status, return promptly.
       Deadline passed → unfinished dials are "timeout".  EOF on the control → clean up and
       raise ``ConnectionError``.

    Returns one ``DialResult`` per dial, in the order given.
    """
    # TODO
    raise NotImplementedError("run")
