"""Controlled ``os`` calls on raw descriptors: pipes, eventfds, read, write and close (a
call on a blocking descriptor that would sleep waits in the scheduler)."""
from __future__ import annotations

import errno as _errno
import functools
import os as _os
import select as _select
from typing import Any, Callable

from workbook.explore.io.sockets import _ready
from workbook.explore.io.world import current

def _opened(kind: str, *fds: int) -> None:
    w = current()
    if w is not None:
        for fd in fds:
            w.track(fd, kind)


def pipe() -> tuple[int, int]:
    w = current()
    if w is not None:
        w.enter("socket")
    r, wr = _os.pipe()
    _opened("pipe", r, wr)
    return r, wr


def pipe2(flags: int) -> tuple[int, int]:
    w = current()
    if w is not None:
        w.enter("socket")
    r, wr = _os.pipe2(flags)
    _opened("pipe", r, wr)
    return r, wr


def eventfd(initval: int, flags: int = getattr(_os, "EFD_CLOEXEC", 0)) -> int:
    w = current()
    if w is not None:
        w.enter("socket")
    fd = _os.eventfd(initval, flags)  # type: ignore[attr-defined]
    _opened("eventfd", fd)
    return fd


def _fd_call(op: str, what: str, fn: Callable[..., Any], fd: int, *args: Any) -> Any:
    w = current()
    if w is None:
        return fn(fd, *args)
    w.enter(op)
    mask = _select.POLLOUT if op == "send" else _select.POLLIN
    try:
        if _os.get_blocking(fd):
            def attempt() -> Any:
                _os.set_blocking(fd, False)
                try:
                    return fn(fd, *args)
                finally:
                    _os.set_blocking(fd, True)
            got = w.retry(f"{what} on {w.fd_name(fd)}", attempt, None,
                          functools.partial(_ready, fd, mask), w.by_fd.get(fd))
        else:
            got = fn(fd, *args)
    except (BlockingIOError, InterruptedError):
        w.moved(fd, op, -1)
        raise
    w.moved(fd, op, 8 if fn in (_EVENTFD_READ, _EVENTFD_WRITE) else
            got if isinstance(got, int) else len(got))
    w.changed()
    return got


_EVENTFD_READ = getattr(_os, "eventfd_read", None)
_EVENTFD_WRITE = getattr(_os, "eventfd_write", None)


def read(fd: int, n: int) -> bytes:
    return _fd_call("recv", "read()", _os.read, fd, n)


def write(fd: int, data: Any) -> int:
    return _fd_call("send", "write()", _os.write, fd, data)


def eventfd_read(fd: int) -> int:
    return _fd_call("recv", "eventfd_read()", _EVENTFD_READ, fd)


def eventfd_write(fd: int, value: int) -> None:
    return _fd_call("send", "eventfd_write()", _EVENTFD_WRITE, fd, value)


def close(fd: int) -> None:
    w = current()
    if w is None:
        return _os.close(fd)
    exc = w.fault("close")
    if w._task() is not None:
        w.sched.point()
    r = w.by_fd.get(fd)
    before = w.closed_before(fd) if r is None else None
    if before is not None:
        w.close_again(before)
        raise OSError(_errno.EBADF, "Bad file descriptor")  # what the system says when
        #                                                      nothing has reused the number
    _os.close(fd)
    w.closed(r, "os.close()")
    if exc is not None:
        raise exc
