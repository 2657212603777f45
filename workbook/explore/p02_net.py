"""P02 exploration, the network side: real loopback endpoints whose connects complete, are
refused or never answer (nothing leaves 127.0.0.1), and the explorer's own *late* dials --
one end of a socket pair whose send buffer is full, so that the kernel reports it writable
(SO_ERROR 0) only once a thread empties the peer, or refused (ECONNRESET) once the peer
closes with bytes unread.  Readiness and errors stay the kernel's; only the moment is the
explorer's."""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from workbook.explore import io

_NET: list["Endpoints"] = []


class Endpoints:
    def __init__(self) -> None:
        self.listener = self._bound(16)
        self.up = self.listener.getsockname()
        self.held = self._bound(None)  # bound, never listening: connects are refused
        self.down = self.held.getsockname()
        self.full = self._bound(0)  # backlog 0 and one finished connect: SYNs are dropped
        self.stuck = self.full.getsockname()
        self.filler = socket.create_connection(self.stuck, timeout=5)

    @staticmethod
    def _bound(backlog: int | None) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        if backlog is not None:
            sock.listen(backlog)
        sock.setblocking(False)
        return sock

    def accept_all(self) -> None:
        """Accept and close what the run's "up" dials connected (the queue must not fill)."""
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            conn.close()


def net() -> "Endpoints":
    if not _NET:
        _NET.append(Endpoints())
    return _NET[0]


@dataclass
class Dialled:
    """What the explorer knows about one dial: its kind, its socket, its peer (late dials),
    and when (step) and how its connect finished."""
    name: str
    kind: str
    obj: Any = None  # the learner's Dial
    peer: Any = None
    finished: int | None = None  # step (-1: before the run began)
    status: str = ""
    errno: int | None = None


def late_dial(world: io.World, module: Any, name: str, blocking: bool = False) -> Dialled:
    """A dial whose connect the explorer finishes: one end of a socket pair whose send
    buffer is full (not writable) until a thread empties it (connected) or closes the peer
    with bytes unread (the kernel's ECONNRESET, SO_ERROR set)."""
    sock, peer = io.pair()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
    socket.socket.setblocking(sock, False)
    while True:
        try:
            socket.socket.send(sock, b"\0" * 4096)
        except BlockingIOError:
            break
    if blocking:
        socket.socket.setblocking(sock, True)
    world.name(sock, f"dial {name!r}")
    return Dialled(name, "late", module.Dial(name, sock), peer)


def twin(world: io.World, sock: Any) -> Any:
    """A second socket object on ``sock``'s descriptor (the explorer detaches it after the
    run: the descriptor is ``sock``'s)."""
    twin = io.Socket(sock.family, sock.type, sock.proto, fileno=sock.fileno())
    socket.socket.setblocking(twin, False)  # as its original: only the object differs
    world.resources.remove(twin._io_resource)
    world.by_fd[sock.fileno()] = twin._io_resource = io.resource(sock)  # one descriptor
    return twin


def finish(rec: Any, d: Dialled, how: str) -> None:
    """The late dial's connect finishes: its peer reads everything (connected: writable,
    SO_ERROR 0) or closes with bytes unread (refused: the kernel sets ECONNRESET)."""
    s, world = rec.sched, rec.world
    d.finished = world.step()
    if how == "connect":
        while True:
            try:
                if not socket.socket.recv(d.peer, 1 << 16, socket.MSG_DONTWAIT):
                    break
            except BlockingIOError:
                break
        d.status = "connected"
        s.record(f"dial {d.name!r} connects (the network)", where=False)
    else:
        socket.socket.close(d.peer)
        world.closed(io.resource(d.peer), "refused")
        d.status, d.errno = "failed", 104
        s.record(f"dial {d.name!r} is refused (the network)", where=False)
    s.progress()
    world.changed()
