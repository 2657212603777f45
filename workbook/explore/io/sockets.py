"""Controlled sockets: ``socket.socket`` itself on its own descriptor, whose calls that
would sleep wait in the scheduler (with a virtual timeout) instead."""
from __future__ import annotations

import errno as _errno
import functools
import os as _os
import select as _select
import socket as _socket
from typing import Any, Callable

from workbook.explore.io.world import current, resource as _resource

class Socket(_socket.socket):
    """``socket.socket`` under control: the same object on the same descriptor; a call that
    would sleep waits in the scheduler, and its timeout is virtual."""

    def __init__(self, family: int = -1, type: int = -1, proto: int = -1,
                 fileno: int | None = None) -> None:
        w = current()
        if w is not None and fileno is None:
            w.enter("socket")
        super().__init__(family, type, proto, fileno)
        self._io_resource = w.track(self.fileno(), "socket", self) if w is not None else None

    def _waits(self) -> float | None:
        """How long a call may sleep: 0 (never), None (for ever) or the socket's timeout."""
        timeout = self.gettimeout()
        if timeout is None:
            return None if _os.get_blocking(self.fileno()) else 0.0
        return timeout

    def _now(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` with the descriptor made non-blocking for the call (restored)."""
        timeout, fd = self.gettimeout(), self.fileno()
        flag = _os.get_blocking(fd)
        _socket.socket.settimeout(self, 0.0)
        try:
            return fn(*args)
        finally:
            _socket.socket.settimeout(self, timeout)
            _os.set_blocking(fd, flag)

    def _call(self, kind: str, what: str, fn: Callable[..., Any], *args: Any,
              mask: int = 0) -> Any:
        w = current()
        if w is None:
            return fn(*args)
        w.enter(kind)
        if self.fileno() < 0 or self._waits() == 0.0:
            return fn(*args)  # it never sleeps: the real call, as it is
        fd = self.fileno()
        return w.retry(f"{what} on {w.fd_name(fd)}", functools.partial(self._now, fn, *args),
                       self._waits(), functools.partial(_ready, fd, mask), _resource(self))

    def _move(self, op: str, fn: Callable[..., Any], *args: Any) -> Any:
        w, fd = current(), self.fileno()
        if w is None:
            return fn(*args)
        mask = _select.POLLOUT if op == "send" else _select.POLLIN
        try:
            got = self._call(op, f"{fn.__name__}()", fn, *args, mask=mask)
        except (BlockingIOError, InterruptedError):
            w.moved(fd, op, -1)
            raise
        n = got if isinstance(got, int) else len(got[0] if isinstance(got, tuple) else got)
        w.moved(fd, op, n)
        w.changed()  # the peer may now read (a send) or write (a recv freed space)
        return got

    def send(self, data: Any, flags: int = 0) -> int:
        return self._move("send", super().send, data, flags)

    def sendto(self, *args: Any) -> int:
        return self._move("send", super().sendto, *args)

    def sendall(self, data: Any, flags: int = 0) -> None:
        view = memoryview(data).cast("B")
        sent = 0
        while sent < len(view):
            sent += self.send(view[sent:], flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        return self._move("recv", super().recv, bufsize, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        return self._move("recv", super().recv_into, buffer, nbytes, flags)

    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple:
        return self._move("recv", super().recvfrom, bufsize, flags)

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple:
        return self._move("recv", super().recvfrom_into, buffer, nbytes, flags)

    def accept(self) -> tuple["Socket", Any]:
        fd, addr = self._call("recv", "accept()", self._accept, mask=_select.POLLIN)
        sock = Socket(self.family, self.type, self.proto, fileno=fd)
        if _socket.getdefaulttimeout() is None and self.gettimeout():
            sock.setblocking(True)
        return sock, addr

    def connect_ex(self, address: Any) -> int:
        return self._connect(address, raising=False)

    def connect(self, address: Any) -> None:
        self._connect(address, raising=True)

    def _connect(self, address: Any, raising: bool) -> int:
        w = current()
        real = super().connect if raising else super().connect_ex
        if w is None:
            return real(address)
        exc = w.fault("connect")
        if exc is not None:
            if not raising and type(exc) is not _socket.gaierror and isinstance(exc, OSError) \
                    and exc.errno:
                return exc.errno  # connect_ex reports a C-level failure as its value
            raise exc
        if w._task() is not None:
            w.sched.point()
        if self.fileno() < 0 or self._waits() == 0.0:
            return real(address) or 0  # a non-blocking connect: the real one
        err = self._now(super().connect_ex, address)
        if err in (_errno.EINPROGRESS, _errno.EALREADY, _errno.EAGAIN):
            fd = self.fileno()
            look = functools.partial(_ready, fd, _select.POLLOUT)

            def settled() -> int:
                if not look():
                    raise BlockingIOError(_errno.EINPROGRESS, "connect in progress")
                return self.getsockopt(_socket.SOL_SOCKET, _socket.SO_ERROR)

            try:
                err = w.retry(f"connect() on {w.fd_name(fd)}", settled, self._waits(), look,
                              _resource(self))
            except TimeoutError:
                if raising:
                    raise
                return _errno.EAGAIN
        if raising and err:
            raise OSError(err, _os.strerror(err))
        return err

    def shutdown(self, how: int) -> None:
        super().shutdown(how)
        w = current()
        if w is not None:
            w.changed()

    def detach(self) -> int:
        fd = super().detach()
        r = _resource(self)
        if r is not None and fd >= 0:
            r.obj = None  # the descriptor is now a bare number, closed with os.close
        return fd

    def _io_close(self) -> None:
        _socket.socket.close(self)

    def _io_forget(self) -> None:
        """Let go of a number that is no longer this object's, without closing it."""
        if self.fileno() >= 0:
            _socket.socket.detach(self)

    def close(self) -> None:
        w, fd = current(), self.fileno()
        exc = None
        if w is not None and fd >= 0:
            exc = w.fault("close")
            if w._task() is not None:
                w.sched.point()
            if self.fileno() < 0:
                # Closed through this same object while we were preempted: a socket's close()
                # takes its number and closes it in one step under the GIL, so of two threads
                # closing one socket, the second simply finds nothing left to close.
                return
            r = _resource(self)
            if r is not None and r.closed is not None:  # its number went with os.close:
                _socket.socket.detach(self)  # let go of it, never close it again for real
                w.close_again(r)
                raise OSError(_errno.EBADF, "Bad file descriptor")
        super().close()
        if w is not None and fd >= 0 and self.fileno() == -1:
            w.closed(_resource(self), "close()")
        if exc is not None:
            raise exc  # as close(2): the descriptor is gone, the error is reported


def _ready(fd: int, mask: int) -> bool:
    """Whether descriptor ``fd`` is ready for ``mask`` now (a closed one counts as ready:
    the next call fails at once)."""
    poller = _select.poll()
    try:
        poller.register(fd, mask | _select.POLLERR | _select.POLLHUP)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def socketpair(family: Any = None, type: int = _socket.SOCK_STREAM, proto: int = 0) \
        -> tuple[Socket, Socket]:
    w = current()
    if w is not None:
        w.enter("socket")
    return pair(family, type, proto)


def pair(*args: Any) -> tuple[Socket, Socket]:
    """A controlled socket pair made for the explorer itself: tracked, but no fault lands in
    its creation (``socketpair`` is the learner's, counted and faultable)."""
    a, b = _socket.socketpair(*args)
    return (Socket(a.family, a.type, a.proto, fileno=a.detach()),
            Socket(b.family, b.type, b.proto, fileno=b.detach()))


def fromfd(fd: int, family: int, type: int, proto: int = 0) -> Socket:
    return Socket(family, type, proto, fileno=_os.dup(fd))


def create_connection(address: tuple, timeout: Any = _socket._GLOBAL_DEFAULT_TIMEOUT,  # type: ignore[attr-defined]
                      source_address: Any = None, **_: Any) -> Socket:
    """``socket.create_connection`` with controlled sockets (the standard library's steps)."""
    host, port = address
    err: OSError | None = None
    for af, socktype, proto, _name, sa in _socket.getaddrinfo(host, port, 0,
                                                              _socket.SOCK_STREAM):
        sock = None
        try:
            sock = Socket(af, socktype, proto)
            if timeout is not _socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(sa)
            return sock
        except OSError as exc:
            err = exc
            if sock is not None:
                sock.close()
    if err is not None:
        raise err
    raise OSError("getaddrinfo returns an empty list")
