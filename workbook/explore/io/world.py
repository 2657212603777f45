"""One controlled run's record of descriptors (``World``), the faults planned for it, and
the waits every stand-in shares: a call that would sleep blocks in the scheduler on one
token that every write, read and close wakes (see ``workbook.explore.io``)."""
from __future__ import annotations

import errno as _errno
import os as _os
import socket as _socket
from dataclasses import dataclass, field
from typing import Any, Callable

from workbook.explore import prims
from workbook.explore.sched import READY, WAITING, Scheduler, Task

#: Every kind of call a fault can be injected into.
KINDS = ("socket", "selector", "register", "unregister", "wait", "send", "recv", "connect",
         "close")
_ERRNO = {"socket": _errno.EMFILE, "selector": _errno.EMFILE, "register": _errno.ENOMEM,
          "unregister": _errno.EBADF, "wait": _errno.ENOMEM, "send": _errno.ENOBUFS,
          "recv": _errno.ECONNRESET, "close": _errno.EIO}
_CALLS = {"socket": "the creation of a socket, pipe or eventfd",
          "selector": "the creation of a selector", "register": "a selector register()",
          "unregister": "a selector unregister()", "wait": "a readiness wait",
          "send": "a send/write", "recv": "a recv/read", "connect": "a connect",
          "close": "a close()"}


def error(kind: str) -> BaseException:
    """The failure the OS (or the resolver) reports for ``kind`` under pressure."""
    if kind == "connect":
        return _socket.gaierror(_socket.EAI_NONAME, "Name or service not known")
    code = _ERRNO[kind]
    return OSError(code, _os.strerror(code))  # OSError(ECONNRESET, ...) is a ConnectionResetError


@dataclass
class Fault:
    task: int
    kind: str
    n: int
    make: Callable[[], BaseException]


@dataclass
class Resource:
    """One descriptor (or selector object) opened through the stand-ins."""
    fd: int  # -1: a selector without a descriptor of its own (select, poll)
    kind: str  # "socket", "pipe", "eventfd", "selector", "epoll", "poll"
    name: str
    task: int  # who opened it (-1: no controlled task)
    opened: int
    obj: Any = None  # the object, kept alive for the run (None: a raw descriptor)
    closed: int | None = None
    closed_by: int | None = None
    how: str = ""
    named: bool = False  # named by the explorer: its calls appear in the timeline


@dataclass
class Registration:
    selector: Resource
    fd: int
    resource: Resource | None
    events: int
    step: int
    task: int
    unregistered: int | None = None
    closed_first: bool = False  # its descriptor was closed while it was still registered


@dataclass
class Wait:
    task: int
    what: str
    seconds: float | None  # how long the real call would sleep (None: for ever)
    start: int
    start_time: float
    end: int | None = None
    end_time: float | None = None
    ended: str = ""  # "now" (did not sleep), "ready", "timeout", "fault"
    on: Resource | None = None  # the descriptor of an I/O wait (send, recv, ...)
    ready: list[int] = field(default_factory=list)  # the descriptors it reported ready


@dataclass
class Transfer:
    task: int
    resource: Resource | None
    fd: int
    op: str  # "send" | "recv"
    nbytes: int  # -1: it would have blocked; 0 on a recv: EOF
    step: int
    time: float


def current() -> "World | None":
    """The world of the run the calling thread belongs to (None outside any run)."""
    s, _ = prims._sched()
    return getattr(s, "io", None) if s is not None else None


class World:
    """Everything one controlled run did with descriptors (see the module docstring)."""

    def __init__(self, sched: Scheduler, faults: list[Fault] | tuple = ()) -> None:
        self.sched = sched
        self.faults = list(faults)
        self.resources: list[Resource] = []
        self.by_fd: dict[int, Resource] = {}  # open descriptors only
        self.registrations: list[Registration] = []
        self.waits: list[Wait] = []
        self.transfers: list[Transfer] = []
        self.points: list[tuple[int, str, int]] = []
        self.injected: list[tuple[Fault, BaseException, int]] = []
        #: Raw descriptors closed a second time (``os.close`` of a number already closed and
        #: not reopened): the resource, the step and who.  Harmless here only by luck: in a
        #: real program the number may by then belong to another file or socket.
        self.again: list[tuple[Resource, int, int]] = []
        self._counts: dict[tuple[int, str], int] = {}
        self._token = object()  # what every controlled wait blocks on
        self._looks: dict[int, Callable[[], bool]] = {}  # task index -> its wait's look
        sched.io = self  # type: ignore[attr-defined]
        sched.on_idle.append(self._idle)

    # ---- bookkeeping ---------------------------------------------------------------------

    def step(self) -> int:
        return len(self.sched.events)

    def _task(self) -> Task | None:
        return self.sched.task()

    def _who(self) -> int:
        task = self._task()
        return task.index if task is not None else -1

    def track(self, fd: int, kind: str, obj: Any = None) -> Resource:
        r = Resource(fd, kind, f"{kind} fd {fd}" if fd >= 0 else kind, self._who(), self.step(),
                     obj)
        self.resources.append(r)
        if fd >= 0:
            self.by_fd[fd] = r
        return r

    def name(self, obj: Any, label: str) -> None:
        """Call ``obj`` (a socket or selector from the stand-ins, or a descriptor number)
        ``label`` in the timeline."""
        r = self.by_fd.get(obj) if isinstance(obj, int) else resource(obj)
        if r is not None:
            r.name, r.named = label, True

    def fd_name(self, fd: int) -> str:
        r = self.by_fd.get(fd)
        return r.name if r is not None else f"fd {fd}"

    def record(self, text: str, r: Resource | None = None, kind: str = "info") -> None:
        """An event in the timeline, for the explorer's named descriptors only."""
        if r is None or r.named:
            self.sched.record(text, kind=kind)

    def closed(self, r: Resource | None, how: str) -> None:
        if r is None or r.closed is not None:
            return
        r.closed, r.closed_by, r.how = self.step(), self._who(), how
        if r.fd >= 0 and self.by_fd.get(r.fd) is r:
            del self.by_fd[r.fd]
        for reg in self.registrations:
            if reg.resource is r and reg.unregistered is None and reg.selector.closed is None:
                reg.closed_first = True
        if r.kind in ("selector", "epoll"):
            self.record(f"closes the {r.name}", kind="info")
        else:
            self.record(f"closes {r.name}", r)
        self.changed()  # its peer may now read EOF or hang-up

    def closed_before(self, fd: int) -> Resource | None:
        """The resource last closed on descriptor ``fd``, when no open one holds it now."""
        if fd in self.by_fd:
            return None
        return next((r for r in reversed(self.resources) if r.fd == fd and r.closed is not None),
                    None)

    def close_again(self, r: Resource) -> None:
        """A close of ``r``'s number once more (``os.close``, or the socket object whose
        number ``os.close`` took): recorded, never passed to the system (the number may
        belong to the harness by now)."""
        self.again.append((r, self.step(), self._who()))
        self.record(f"closes fd {r.fd} again (it was {r.name}, closed already)")

    def again_sentence(self, sched: Scheduler, example: str) -> str:
        """The first descriptor closed twice, in words ("" when none was): ``example`` says
        where the problem's code typically does it."""
        if not self.again:
            return ""
        r, step, who = self.again[0]
        name = sched.tasks[who].name if 0 <= who < len(sched.tasks) else "the program"
        return (f"thread '{name}' closed fd {r.fd} at step {step}, but that descriptor "
                f"was closed already ({r.name}, closed at step {r.closed}). By then its number "
                "may belong to another file or socket of the program, which would be closed "
                f"in its place: close each descriptor once ({example} must not close it "
                "again)")

    def registered(self, sel: Resource, fd: int, events: int) -> None:
        r = self.by_fd.get(fd)
        self.registrations.append(Registration(sel, fd, r, events, self.step(), self._who()))
        if r is not None:
            self.record(f"registers {r.name} in the {sel.name}", r)

    def unregistered(self, sel: Resource, fd: int) -> None:
        for reg in reversed(self.registrations):
            if reg.selector is sel and reg.fd == fd and reg.unregistered is None:
                reg.unregistered = self.step()
                if reg.resource is not None:
                    self.record(f"unregisters {reg.resource.name}", reg.resource)
                return

    def moved(self, fd: int, op: str, nbytes: int) -> None:
        r = self.by_fd.get(fd)
        self.transfers.append(Transfer(self._who(), r, fd, op, nbytes, self.step(),
                                       self.sched.now))
        if r is not None and r.named:
            if nbytes < 0:
                shown = "would block (EAGAIN)"
            elif op == "recv" and nbytes == 0:
                shown = "EOF"
            else:
                shown = f"{nbytes} byte{'s' if nbytes != 1 else ''}"
            self.record(f"{op} on {r.name}: {shown}", r)

    # ---- faults and scheduling -----------------------------------------------------------

    def fault(self, kind: str) -> BaseException | None:
        """Count a call of ``kind`` by the calling task; the exception planned for it, if
        any (the caller raises it where the real call would fail)."""
        who = self._who()
        n = self._counts.get((who, kind), 0) + 1
        self._counts[(who, kind)] = n
        self.points.append((who, kind, n))
        for f in self.faults:
            if f.task == who and f.kind == kind and f.n == n:
                exc = f.make()
                self.injected.append((f, exc, self.step()))
                self.sched.record(f"⚡ {type(exc).__name__}" + (f" ({exc})" if str(exc) else "")
                                  + f" injected into {_CALLS[kind]}", kind="fault")
                return exc
        return None

    def enter(self, kind: str) -> None:
        """The start of a call of ``kind``: a planned fault, then a scheduling point."""
        exc = self.fault(kind)
        if exc is not None:
            raise exc
        if self._task() is not None:
            self.sched.point()

    def changed(self) -> None:
        """Something may have become ready: wake every controlled wait (each asks the
        kernel again), and let another thread run first."""
        self.sched.wake(self._token)
        if self._task() is not None:
            self.sched.point()

    def _idle(self) -> bool:
        """No task can run: a wait whose descriptors became ready from outside goes on."""
        woke = False
        for task in self.sched.tasks:
            look = self._looks.get(task.index)
            if look is not None and task.state == WAITING and task.blocker is self._token:
                try:
                    ready = look()
                except Exception:  # noqa: BLE001 - the waiter's own look will raise it
                    ready = True
                if ready:
                    task.state, task.reason = READY, "woken"
                    woke = True
        return woke

    def _block(self, task: Task, deadline: float | None, what: str,
               look: Callable[[], bool]) -> Any:
        self._looks[task.index] = look
        try:
            return self.sched.block(task, self._token, deadline, what=what, interruptible=True)
        finally:
            self._looks.pop(task.index, None)

    def wait_ready(self, what: str, look: Callable[[], Any], seconds: float | None,
                   ready: Callable[[Any], bool] = bool,
                   fds: Callable[[Any], list[int]] = lambda got: []) -> Any:
        """The controlled body of every readiness wait: ``look()`` is the real call with a
        zero timeout, ``seconds`` how long the real call would sleep (None: for ever),
        ``fds(got)`` the descriptors a result reports ready.  Returns what ``look`` returned
        last."""
        self.enter("wait")
        s, task = self.sched, self._task()
        w = Wait(task.index if task else -1, what, seconds, self.step(), s.now)
        self.waits.append(w)
        got = look()
        if ready(got) or seconds == 0 or task is None:
            if not ready(got) and seconds != 0:
                raise prims.WouldBlock(f"{what} would block outside the explorer")
            w.end, w.end_time, w.ended, w.ready = self.step(), s.now, "now", fds(got)
            if w.ready:
                s.record(f"{what} finds {self._names(w.ready)} ready", kind="wake")
            return got
        s.record(f"waits in {what}" + ("" if seconds is None else f" (timeout {seconds:g} s)"),
                 kind="block")
        deadline = None if seconds is None else s.now + seconds
        while True:
            reason = self._block(task, deadline, what, lambda: ready(look()))
            if isinstance(reason, BaseException):
                w.end, w.end_time, w.ended = self.step(), s.now, "fault"
                raise reason
            got = look()
            if ready(got) or reason == "timeout":
                break
        w.end, w.end_time, w.ready = self.step(), s.now, fds(got)
        w.ended = "ready" if ready(got) else "timeout"
        s.record(f"{what} returns" + (f": {self._names(w.ready)} ready" if w.ready else
                                      " with nothing ready" if not ready(got) else ""),
                 kind="wake", where=False)
        return got

    def _names(self, fds: list[int]) -> str:
        return ", ".join(self.fd_name(fd) for fd in fds)

    def retry(self, what: str, attempt: Callable[[], Any], seconds: float | None,
              look: Callable[[], bool], on: Resource | None) -> Any:
        """A call on a blocking descriptor: ``attempt()`` (the real call, made non-blocking)
        until it no longer raises ``BlockingIOError``, waiting in the scheduler in between;
        ``TimeoutError`` after ``seconds`` (None: for ever), as a socket timeout."""
        s, task = self.sched, self._task()
        w: Wait | None = None
        deadline = None if seconds is None else s.now + seconds
        while True:
            try:
                got = attempt()
            except (BlockingIOError, InterruptedError):
                if task is None:
                    raise prims.WouldBlock(f"{what} would block outside the explorer") from None
                if w is None:
                    w = Wait(task.index, what, seconds, self.step(), s.now, on=on)
                    self.waits.append(w)
                    s.record(f"blocks in {what}", kind="block")
                reason = self._block(task, deadline, what, look)
                if isinstance(reason, BaseException):
                    w.end, w.end_time, w.ended = self.step(), s.now, "fault"
                    raise reason
                if reason == "timeout" and not look():
                    w.end, w.end_time, w.ended = self.step(), s.now, "timeout"
                    raise TimeoutError("timed out") from None
                continue
            if w is not None:
                w.end, w.end_time, w.ended = self.step(), s.now, "ready"
            return got

    # ---- the explorer's side -------------------------------------------------------------

    def open(self) -> list[Resource]:
        return [r for r in self.resources if r.closed is None and r.kind != "poll"]

    def close_all(self) -> None:
        """After the run: close whatever is still open (the explorer's cleanup, no record)."""
        for r in reversed(self.resources):
            if r.closed is not None:
                forget = getattr(r.obj, "_io_forget", None)
                if forget is not None:
                    forget()  # closed through another object on the same descriptor
                continue
            r.closed, r.how = self.step(), "explorer"
            try:
                if r.obj is not None:
                    r.obj._io_close()  # the real close, no fault and no record
                elif r.fd >= 0 and self.by_fd.get(r.fd) is r:
                    _os.close(r.fd)
            except Exception:  # noqa: BLE001 - closed already behind our back: nothing to do
                pass
            if r.fd >= 0 and self.by_fd.get(r.fd) is r:
                del self.by_fd[r.fd]


def attach(sched: Scheduler, faults: list[Fault] | tuple = ()) -> World:
    """A new world for one run of ``sched`` (before ``sched.run``)."""
    return World(sched, faults)


def resource(obj: Any) -> Resource | None:
    """The record of a controlled socket or selector object (None for anything else)."""
    return getattr(obj, "_io_resource", None)
