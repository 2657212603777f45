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
        """A new, unused control: ``reader`` and ``writer`` are the two ends of a
        ``socket.socketpair()``, both non-blocking; no stop has been requested."""
        # TODO
        raise NotImplementedError("Control.__init__")

    @property
    def stop_requested(self) -> bool:
        """True once any thread has called ``request_stop()``."""
        # TODO
        raise NotImplementedError("Control.stop_requested")

    def request_stop(self) -> None:
        """Ask the loop to stop: callable from any thread, any number of times; never
        blocks and never raises while the control is in use.

        The contract: once it returns, ``stop_requested`` is true, and a ``run()`` using
        this control, even one asleep in ``select()``, wakes up, sees the stop and ends
        soon after; no press is ever lost.  A control whose socket buffer is full still
        counts as pressed.  After ``run()`` has finished with this control (or after
        ``close()``), raises ``RuntimeError``.  How to keep that promise is the chapter's
        "The order of the two lines" (``./check.sh book p02``) and the hints.
        """
        # TODO
        raise NotImplementedError("Control.request_stop")

    def drain(self) -> int:
        """Loop side: read at most 4096 pending bytes in one call; return how many.

        Nothing there (``EAGAIN``, i.e. ``BlockingIOError``) returns 0.  EOF (``recv``
        returns ``b""``: the writer end was closed) raises ``ConnectionError``.  A flood of
        bytes is never read to the end in one call; what is left stays for the next call.
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

    Arguments: ``dials`` is a sequence of ``Dial`` with unique names and open, non-blocking
    sockets; ``control`` is an unused, open ``Control``; ``timeout`` is None (no deadline)
    or any number of seconds >= 0 (``0`` has passed already; ``float("inf")`` is a very long
    deadline).  Anything else raises ``TypeError``/``ValueError`` and closes nothing: the
    sockets stay the caller's.

    Ownership: once the arguments are accepted, ``run`` owns every dial socket and the
    control.  When it returns *and* when it raises, every socket has been unregistered from
    the selector before it was closed, the selector is closed and the control is closed.

    Test hook: the selector is made with ``selectors.DefaultSelector()`` when ``run`` is
    called (the tests put an instrumented subclass there; it accepts sockets, objects with
    ``fileno()`` and raw descriptors).  One wait watches every dial for ``EVENT_WRITE``
    and ``control.reader`` for ``EVENT_READ``.

    Outcomes: a finished connect is "connected" when ``SO_ERROR`` is 0, else "failed" with
    that errno in ``error``.  A stop request (even one made before ``run`` began) makes
    every unfinished dial "cancelled" and ``run`` return within milliseconds; finished
    dials keep their status.  A notification byte without a stop request stops nothing.
    At the deadline every unfinished dial is "timeout".  EOF on the control raises
    ``ConnectionError``.  Returns one ``DialResult`` per dial, in the order given, as soon
    as every dial has finished.

    No polling: while nothing is ready the loop sleeps; it wakes only for readiness (or
    the deadline), never on a timer of its own.
    """
    # TODO
    raise NotImplementedError("run")
