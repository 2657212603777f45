"""Controlled readiness waits: the ``selectors`` classes (subclasses of the real ones),
``select.select``, ``select.poll`` and ``select.epoll``.  The real call is always made with
a zero timeout; the sleep is the scheduler's; a timeout is first given to the same real call
on an always-ready probe, so that what it refuses is refused alike."""
from __future__ import annotations

import functools
import math
import select as _select
import selectors as _selectors
import socket as _socket
from typing import Any

from workbook.explore.io.world import current

_PROBES: dict[str, Any] = {}


def _probe(kind: str) -> Any:
    found = _PROBES.get(kind)
    if found is not None:
        return found
    if "pair" not in _PROBES:
        _PROBES["pair"] = _socket.socketpair()  # the write end of a fresh pair is writable
    out = _PROBES["pair"][1]
    if kind in ("SelectSelector", "PollSelector", "EpollSelector"):
        found = getattr(_selectors, kind)()
        found.register(out, _selectors.EVENT_WRITE)
    elif kind == "poll":
        found = _select.poll()
        found.register(out, _select.POLLOUT)
    elif kind == "epoll":
        found = _select.epoll()
        found.register(out, _select.EPOLLOUT)
    else:  # "select"
        found = out
    _PROBES[kind] = found
    return found


def _ms(seconds: float) -> float:
    """A poll/epoll timeout as the kernel gets it: whole milliseconds, rounded up."""
    return math.ceil(seconds * 1e3) / 1e3


class _Selecting:
    """What the controlled selector classes add to the real ones (next in their MRO)."""

    _real = ""  # the real class's name: its probe checks timeouts

    def __init__(self) -> None:
        w = current()
        if w is not None:
            w.enter("selector")
        super().__init__()  # type: ignore[call-arg]
        fd = self.fileno() if hasattr(self, "fileno") else -1
        self._io_resource = w.track(fd, "selector", self) if w is not None else None
        if self._io_resource is not None:
            self._io_resource.name = "selector"

    def register(self, fileobj: Any, events: int, data: Any = None) -> Any:
        w = current()
        if w is not None:
            w.enter("register")
        key = super().register(fileobj, events, data)  # type: ignore[misc]
        if w is not None and self._io_resource is not None:
            w.registered(self._io_resource, key.fd, events)
        return key

    def unregister(self, fileobj: Any) -> Any:
        w = current()
        if w is not None:
            w.enter("unregister")
        key = super().unregister(fileobj)  # type: ignore[misc]
        if w is not None and self._io_resource is not None:
            w.unregistered(self._io_resource, key.fd)
        return key

    def _seconds(self, timeout: Any) -> float | None:
        if timeout is None:
            return None
        return 0.0 if timeout <= 0 else _ms(timeout)

    def select(self, timeout: Any = None) -> list:
        _probe(self._real).select(timeout)  # refuses what the real call refuses
        w = current()
        if w is None:
            return super().select(timeout)  # type: ignore[misc]
        return w.wait_ready("select()", functools.partial(super().select, 0),  # type: ignore[misc]
                            self._seconds(timeout), fds=lambda got: [k.fd for k, _ in got])

    def _io_close(self) -> None:
        super().close()  # type: ignore[misc]

    def close(self) -> None:
        w = current()
        exc = w.fault("close") if w is not None else None
        super().close()  # type: ignore[misc]
        if w is not None:
            w.closed(self._io_resource, "close()")
        if exc is not None:
            raise exc


class SelectSelector(_Selecting, _selectors.SelectSelector):
    _real = "SelectSelector"

    def _seconds(self, timeout: Any) -> float | None:
        return None if timeout is None else max(timeout, 0)


class PollSelector(_Selecting, _selectors.PollSelector):
    _real = "PollSelector"


class EpollSelector(_Selecting, _selectors.EpollSelector):
    _real = "EpollSelector"


DefaultSelector = {_selectors.EpollSelector: EpollSelector,
                   _selectors.PollSelector: PollSelector}.get(_selectors.DefaultSelector,
                                                               SelectSelector)


def select(rlist: Any, wlist: Any, xlist: Any, timeout: Any = None) -> tuple:
    """``select.select`` under control."""
    _select.select([], [_probe("select")], [], timeout)  # refuses what the real call refuses
    w = current()
    if w is None:
        return _select.select(rlist, wlist, xlist, timeout)
    first = _select.select(rlist, wlist, xlist, 0)  # also checks the lists
    lists = (list(rlist), list(wlist), list(xlist))
    looks = iter([first])

    def look() -> tuple:
        return next(looks, None) or _select.select(*lists, 0)

    return w.wait_ready("select.select()", look, timeout, lambda got: any(got),
                        lambda got: [_fileno(x) for part in got for x in part])


def _fileno(obj: Any) -> int:
    return obj if isinstance(obj, int) else obj.fileno()


class _Polling:
    """What the controlled ``select.poll``/``select.epoll`` objects share."""

    _kind = ""
    _real: Any

    def _start(self) -> None:
        w = current()
        self._io_resource = w.track(self._fd(), self._kind, self) if w is not None else None

    def _fd(self) -> int:
        return -1

    def register(self, fd: Any, *mask: Any) -> None:
        w = current()
        if w is not None:
            w.enter("register")
        self._real.register(fd, *mask)
        if w is not None and self._io_resource is not None:
            w.registered(self._io_resource, fd if isinstance(fd, int) else fd.fileno(),
                         mask[0] if mask else -1)

    def modify(self, fd: Any, mask: int) -> None:
        self._real.modify(fd, mask)

    def unregister(self, fd: Any) -> None:
        w = current()
        if w is not None:
            w.enter("unregister")
        self._real.unregister(fd)
        if w is not None and self._io_resource is not None:
            w.unregistered(self._io_resource, fd if isinstance(fd, int) else fd.fileno())

    def _wait(self, what: str, timeout: Any, seconds: Any, *rest: Any) -> list:
        """``seconds(timeout)``: how long the real call sleeps, once it accepted ``timeout``."""
        _probe(self._kind).poll(timeout, *rest)  # refuses what the real call refuses
        w = current()
        if w is None:
            return self._real.poll(timeout, *rest)
        return w.wait_ready(what, functools.partial(self._real.poll, 0, *rest),
                            seconds(timeout), fds=lambda got: [fd for fd, _ in got])


class Poll(_Polling):
    """``select.poll()`` under control (a poll object has no descriptor to close)."""

    _kind = "poll"

    def __init__(self) -> None:
        w = current()
        if w is not None:
            w.enter("selector")
        self._real = _select.poll()
        self._start()

    def poll(self, timeout: Any = None) -> list:
        return self._wait("poll()", timeout,  # milliseconds, rounded up; negative: for ever
                          lambda t: None if t is None or t < 0 else math.ceil(t) / 1e3)


def poll() -> Poll:
    return Poll()


class Epoll(_Polling):
    """``select.epoll`` under control."""

    _kind = "epoll"

    def __init__(self, sizehint: int = -1, flags: int = 0, *, _real: Any = None) -> None:
        w = current()
        if w is not None and _real is None:
            w.enter("selector")
        self._real = _real if _real is not None else _select.epoll(sizehint, flags)
        self._start()

    @classmethod
    def fromfd(cls, fd: int) -> "Epoll":
        return cls(_real=_select.epoll.fromfd(fd))

    def _fd(self) -> int:
        return self._real.fileno()

    def fileno(self) -> int:
        return self._real.fileno()

    @property
    def closed(self) -> bool:
        return self._real.closed

    def poll(self, timeout: Any = None, maxevents: int = -1) -> list:
        return self._wait("epoll.poll()", timeout,  # seconds, to whole ms; negative: for ever
                          lambda t: None if t is None or t < 0 else _ms(t), maxevents)

    def _io_close(self) -> None:
        self._real.close()

    def close(self) -> None:
        w = current()
        exc = w.fault("close") if w is not None and not self._real.closed else None
        was_open = not self._real.closed
        self._real.close()
        if w is not None and was_open:
            w.closed(self._io_resource, "close()")
        if exc is not None:
            raise exc

    def __enter__(self) -> "Epoll":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
