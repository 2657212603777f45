"""Controlled I/O: what a selector loop and its waker use, under the explorer's scheduler
and virtual clock.

Real descriptors, controlled waiting.  Sockets, socket pairs, pipes, eventfds, epoll and
poll objects are the kernel's own, so readiness, EOF, ``EAGAIN`` and ``SO_ERROR`` are the
kernel's answers, always asked without blocking (a zero timeout).  What is controlled is
*waiting* and *time*: a call that would sleep (``sel.select(0.5)``, a blocking ``recv``,
``os.read`` on an empty blocking pipe, a blocking connect) becomes a scheduler block with a
virtual deadline, and every call that can make a descriptor ready (a send or write, a read
that frees buffer space, a close or shutdown) is a scheduling point that wakes the blocked
waiters, which then ask the kernel again.  Readiness from outside the run (the kernel
finishing a connect) is looked for whenever no thread can run.  A timeout the real call
refuses (``select(1e12)`` on epoll, NaN, a string) is refused the same way: it is first
handed to the same real call on an always-ready probe.  A thread blocked in something not
covered here is given up as the scheduler gives up any (``outside``).

The API, for a problem's explorer:

- ``patch(namespace)``: the controlled ``selectors`` (the four classes), ``select``
  (``select``, ``poll``, ``epoll``), ``socket`` (``socket``, ``socketpair``, ``fromfd``,
  ``create_connection``) and ``os`` (``pipe``, ``pipe2``, ``eventfd``, ``read``, ``write``,
  ``eventfd_read``, ``eventfd_write``, ``close``) in a learner module's namespace, names
  imported with ``from ... import`` included; combine it with ``prims.patch`` in
  ``driver.load(path, problem, patch=...)``.
- ``attach(sched, faults)`` -> ``World``, before ``sched.run``: one run's record --
  ``resources`` (every descriptor opened, by which task, at which step, whether and how it
  was closed), ``registrations`` (every selector registration, when it was undone, whether
  its descriptor was closed first), ``waits`` (every readiness or I/O wait: how long the real
  call would sleep, how it ended), ``transfers`` (bytes each send/recv/read/write moved; -1
  would block, 0 on a recv is EOF), ``points`` (every call a fault can land in) and
  ``injected``.  ``name(obj, label)`` names a descriptor in the timeline; ``changed()`` after
  the explorer moves bytes some other way; ``close_all()`` after the run.  ``pair()`` makes
  a controlled socket pair for the explorer itself (no fault lands in it).
- ``Fault(task, kind, n, make)``: the ``n``-th call of ``kind`` (``KINDS``) made by task
  ``task`` raises ``make()``; ``error(kind)`` is the realistic ``OSError`` of each kind (a
  close or an unregister fails after it has let go, as close(2) does; a connect_ex reports a
  C-level errno as its return value and raises only ``gaierror`` and BaseExceptions).

Steps are the scheduler's event numbers: an action made between two recorded events has the
number the next event will get.
"""
from __future__ import annotations

import os as _os
import select as _select
import selectors as _selectors
import socket as _socket
from typing import Any

from workbook.explore import prims
from workbook.explore.io.fds import (close, eventfd, eventfd_read, eventfd_write, pipe, pipe2,
                                     read, write)
from workbook.explore.io.sockets import Socket, create_connection, fromfd, pair, socketpair
from workbook.explore.io.waits import (DefaultSelector, Epoll, EpollSelector, Poll,
                                       PollSelector, SelectSelector, poll, select)
from workbook.explore.io.world import (KINDS, Fault, Registration, Resource, Transfer, Wait,
                                       World, attach, current, error, resource)

_SOCKET = {"socket": Socket, "socketpair": socketpair, "fromfd": fromfd,
           "create_connection": create_connection}
_SELECT = {"select": select, "poll": poll, "epoll": Epoll}
_SELECTORS = {"SelectSelector": SelectSelector, "PollSelector": PollSelector,
              "EpollSelector": EpollSelector, "DefaultSelector": DefaultSelector}
_OS = {"read": read, "write": write, "close": close, "pipe": pipe, "pipe2": pipe2,
       "eventfd": eventfd, "eventfd_read": eventfd_read, "eventfd_write": eventfd_write}

fake_socket = prims._Facade(_socket, _SOCKET)
fake_select = prims._Facade(_select, _SELECT)
fake_selectors = prims._Facade(_selectors, _SELECTORS)
fake_os = prims._Facade(_os, _OS)

#: Real module, class or function -> its controlled stand-in (``from x import y`` too).
_REPLACE: dict[int, Any] = {id(_socket): fake_socket, id(_select): fake_select,
                            id(_selectors): fake_selectors, id(_os): fake_os}
for _real, _table in ((_socket, _SOCKET), (_select, _SELECT), (_selectors, _SELECTORS),
                      (_os, _OS)):
    for _attr, _fake in _table.items():
        _value = getattr(_real, _attr, None)
        if _value is not None:
            _REPLACE[id(_value)] = _fake


def patch(namespace: dict[str, Any]) -> list[str]:
    """Swap the real I/O modules and names in ``namespace`` for the controlled ones; return
    the names swapped."""
    swapped = []
    for key, value in list(namespace.items()):
        fake = _REPLACE.get(id(value))
        if fake is not None and not key.startswith("__"):
            namespace[key] = fake
            swapped.append(key)
    return swapped


__all__ = ["KINDS", "Fault", "World", "Resource", "Registration", "Wait", "Transfer",
           "attach", "current", "error", "resource", "patch", "Socket", "pair", "socketpair",
           "fromfd", "create_connection", "SelectSelector", "PollSelector", "EpollSelector",
           "DefaultSelector", "select", "poll", "Poll", "Epoll", "pipe", "pipe2", "eventfd",
           "eventfd_read", "eventfd_write", "read", "write", "close"]
