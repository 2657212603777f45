"""Helpers of the P02 acceptance set.

* ``Endpoints``   -- loopback addresses whose connects complete, are refused, or stay pending
                     (a listener whose accept queue is full).  Nothing leaves 127.0.0.1.
* ``SelectorSpy`` -- replaces ``selectors.DefaultSelector`` for one test with an instrumented
                     subclass: it records register/unregister/select/close, notices a socket
                     unregistered after it was closed, can inject a fault, and lets the test
                     wait until the loop is inside ``select()``.
* ``open_fds``    -- the process's open sockets and anonymous inodes, from ``/proc/self/fd``.
* ``Run``         -- ``run(...)`` in a daemon thread, with the moment it returned.
* ``Harness``     -- per-test bookkeeping that creates dials and controls and, at teardown,
                     ends any run a wrong solution left hanging and closes every socket.
"""
from __future__ import annotations

import errno
import os
import selectors
import socket
import threading
import time
from typing import Any

from workbook.testkit import BOUND, DaemonThread, fail, interrupt_thread, join, start_daemon

#: How long a loop may take to return after a cancel before we call it "never woke".
#: Nothing else is pending in those tests, so a loop that has not woken by then never will;
#: on a loaded 2-core box a real wakeup takes milliseconds, so 2 s keeps a wide margin.
CANCEL_BOUND = min(BOUND, 2.0)

#: The real selector class, captured before any test replaces the name.
_BASE = selectors.DefaultSelector


# -- loopback endpoints ---------------------------------------------------------------------

class Endpoints:
    """Three loopback addresses with known connect outcomes."""

    def __init__(self) -> None:
        self._socks: list[socket.socket] = []
        # Connects complete: the kernel finishes the handshake without accept().
        self.listening = self._listener(backlog=16)
        # Connects are refused: the port is bound (so nobody else takes it) but not listening.
        held = self._keep(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        held.bind(("127.0.0.1", 0))
        self.refusing = held.getsockname()
        # Connects stay in progress: backlog 0 and one finished connect fill the accept queue,
        # after which the kernel drops further SYNs (the clients keep retrying for minutes).
        self.pending = self._listener(backlog=0)
        filler = self._keep(socket.create_connection(self.pending, timeout=BOUND))
        filler.setblocking(False)

    def _keep(self, sock: socket.socket) -> socket.socket:
        self._socks.append(sock)
        return sock

    def _listener(self, backlog: int) -> tuple[str, int]:
        sock = self._keep(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        sock.bind(("127.0.0.1", 0))
        sock.listen(backlog)
        return sock.getsockname()

    def close(self) -> None:
        for sock in self._socks:
            sock.close()


# -- file descriptors -----------------------------------------------------------------------

def open_fds() -> set[tuple[int, str]]:
    """(fd, target) of every socket / anonymous inode (epoll, eventfd) this process has open.

    Pairs, not bare numbers: a socket's target names its inode, so a descriptor number
    reused by another socket counts as a different entry."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed while we looked (e.g. the listing's own descriptor)
            continue
        if target.startswith(("socket:", "anon_inode:")):
            found.add((int(name), target))
    return found


def is_closed(sock: Any) -> bool:
    return sock.fileno() == -1


# -- the instrumented selector --------------------------------------------------------------

class TestOver(RuntimeError):
    """Raised by a spy selector's select() once its test has ended (stops stray loops)."""


class SelectorSpy:
    """Watches every selector that ``selectors.DefaultSelector()`` makes during one test."""

    def __init__(self) -> None:
        # Guards every field below; notified on every recorded call, so tests can wait for
        # "the loop is inside select()" without sleeping.
        self.cond = threading.Condition()
        self.made: list[Any] = []               # the SpySelector instances, in order
        self.entered = 0                        # select() calls started
        self.returned = 0                       # select() calls finished
        self.timeouts: list[float | None] = []  # the timeout of every select() call
        self.registered: dict[int, Any] = {}    # id(fileobj) -> fileobj, currently registered
        self.ever_registered: list[Any] = []    # every fileobj ever registered, in order
        self.unregistered_open: set[int] = set()  # id(fileobj) unregistered while still open
        self.problems: list[str] = []           # unregister-after-close and similar
        self.unregister_calls = 0
        self.fault: tuple[str, int] | None = None  # ("register"|"select", n): nth call raises
        self._calls = {"register": 0, "select": 0}
        self.poisoned = False
        # Open by default.  A test clears it to hold the loop right after select() returns,
        # so several things can happen "while the loop is waking" deterministically.
        self.gate = threading.Event()
        self.gate.set()

    # -- installation
    def selector_class(self) -> type:
        spy = self

        class SpySelector(_BASE):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                super().__init__()
                self.closed = False
                with spy.cond:
                    spy.made.append(self)
                    spy.cond.notify_all()

            def register(self, fileobj, events, data=None):
                spy._maybe_fault("register")
                key = super().register(fileobj, events, data)
                with spy.cond:
                    spy.registered[id(fileobj)] = fileobj
                    spy.ever_registered.append(fileobj)
                    spy.cond.notify_all()
                return key

            def unregister(self, fileobj):
                with spy.cond:
                    spy.unregister_calls += 1
                    if _fileno(fileobj) == -1:
                        spy.problems.append(f"{_describe(fileobj)} was unregistered after it "
                                            "had been closed")
                    else:
                        spy.unregistered_open.add(id(fileobj))
                    spy.registered.pop(id(fileobj), None)
                    spy.cond.notify_all()
                return super().unregister(fileobj)

            def select(self, timeout=None):
                with spy.cond:
                    if spy.poisoned:
                        raise TestOver("the test that started this loop is over")
                    spy.entered += 1
                    spy.timeouts.append(timeout)
                    spy.cond.notify_all()
                try:
                    spy._maybe_fault("select")
                    ready = super().select(timeout)
                    spy.gate.wait(BOUND)
                    return ready
                finally:
                    with spy.cond:
                        spy.returned += 1
                        spy.cond.notify_all()

            def close(self):
                super().close()
                with spy.cond:
                    self.closed = True
                    spy.cond.notify_all()

        return SpySelector

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(selectors, "DefaultSelector", self.selector_class())

    def _maybe_fault(self, what: str) -> None:
        with self.cond:
            self._calls[what] += 1
            hit = self.fault is not None and self.fault == (what, self._calls[what])
        if hit:
            raise OSError(errno.EIO, f"injected fault in selector.{what}()")

    # -- queries (all under the lock)
    def inside_select(self) -> bool:
        with self.cond:
            return self.entered > self.returned

    def snapshot(self) -> dict:
        with self.cond:
            return {"entered": self.entered, "returned": self.returned,
                    "registered": list(self.registered.values()),
                    "unregister_calls": self.unregister_calls}

    def wait_for(self, predicate, timeout: float) -> bool:
        """Wait (bounded) until ``predicate()`` holds; it is evaluated under the lock."""
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    def require_selector(self) -> None:
        if not self.made:
            fail("run() never called selectors.DefaultSelector(); create the selector with "
                 "selectors.DefaultSelector() inside run (the tests watch that name)")

    def cleanup_problems(self, sockets: list[Any]) -> list[str]:
        """Everything wrong with how the loop released ``sockets`` and its selectors."""
        out = list(self.problems)
        for obj in self.ever_registered:
            if id(obj) not in self.unregistered_open:
                out.append(f"{_describe(obj)} was registered but never unregistered while "
                           "open")
        for obj in sockets:
            if not is_closed(obj):
                out.append(f"{_describe(obj)} is still open")
        for i, sel in enumerate(self.made):
            if not sel.closed:
                out.append(f"selector #{i + 1} was never closed")
        return out

    def poison(self) -> None:
        """End of the test: later select() calls raise TestOver, and the gate opens."""
        with self.cond:
            self.poisoned = True
            self.cond.notify_all()
        self.gate.set()


def _fileno(obj: Any) -> int:
    try:
        return obj.fileno()
    except (OSError, ValueError):
        return -1


_NAMES: dict[int, str] = {}  # id(socket) -> what the test calls it, for messages


def _describe(obj: Any) -> str:
    return _NAMES.get(id(obj), f"socket {obj!r}")


# -- run() in a thread -----------------------------------------------------------------------

class Run:
    """``impl.run(dials, control, timeout)`` in a daemon thread."""

    def __init__(self, impl, spy: SelectorSpy, dials, control, timeout=None) -> None:
        self.returned_at: float | None = None
        self.done = False  # set (under spy.cond) the moment run() returns or raises

        def target():
            try:
                return impl.run(dials, control, timeout)
            finally:
                self.returned_at = time.perf_counter()
                with spy.cond:  # lets spy.wait_for(...) notice that run has finished
                    self.done = True
                    spy.cond.notify_all()

        self.thread: DaemonThread = start_daemon(target, name="p02-run")

    @property
    def alive(self) -> bool:
        """run() has not returned or raised yet (the thread may still be finishing)."""
        return not self.done

    def result(self, timeout: float = BOUND, *, what: str = "run()",
               pitfall: str | None = None):
        return join(self.thread, timeout, what=what, pitfall=pitfall)

    def error(self, timeout: float = BOUND, *, what: str = "run()",
              pitfall: str | None = None) -> BaseException | None:
        """Join and return what run raised (None if it returned)."""
        self.thread.join(timeout)
        if self.thread.is_alive():
            fail(f"{what} did not finish within {timeout:g} s", pitfall=pitfall)
        if isinstance(self.thread.error, NotImplementedError):
            raise self.thread.error
        return self.thread.error


# -- per-test bookkeeping --------------------------------------------------------------------

class Harness:
    """What one test creates, so teardown can end stray runs and close every socket."""

    def __init__(self, impl, spy: SelectorSpy, net: Endpoints) -> None:
        self.impl = impl
        self.spy = spy
        self.net = net
        self.sockets: list[socket.socket] = []
        self.before = open_fds()  # after the endpoints exist, before anything of the test
        self.controls: list[Any] = []
        self.runs: list[Run] = []

    def dial(self, name: str, address: tuple[str, int]):
        d = self.impl.dial(name, address)
        self.sockets.append(d.sock)
        _NAMES[id(d.sock)] = f"dial {name!r}"
        return d

    def control(self):
        c = self.impl.Control()
        self.controls.append((c, c.reader, c.writer))
        _NAMES[id(c.reader)] = "control.reader"
        _NAMES[id(c.writer)] = "control.writer"
        return c

    def start(self, dials, control, timeout=None) -> Run:
        r = Run(self.impl, self.spy, dials, control, timeout)
        self.runs.append(r)
        return r

    def wait_blocked(self, r: Run, *, selects: int = 1, pending: int | None = None,
                     what: str = "the loop is waiting inside select()") -> None:
        """Wait until run ``r`` is inside its ``selects``-th (or later) select() call and,
        if ``pending`` is given, exactly that many objects are still registered."""
        def ready() -> bool:
            if not r.alive:
                return True
            if self.spy.entered < selects or self.spy.entered <= self.spy.returned:
                return False
            return pending is None or len(self.spy.registered) == pending

        if not self.spy.wait_for(ready, BOUND):
            snap = self.spy.snapshot()
            fail(f"gave up after {BOUND:g} s waiting until {what} "
                 f"(select calls started {snap['entered']}, finished {snap['returned']}, "
                 f"still registered {len(snap['registered'])})")
        if not r.alive:
            r.result()  # re-raises what run raised (e.g. NotImplementedError)
            self.spy.require_selector()
            fail(f"run() returned before {what}")

    def cancel(self, r: Run, control, *, what: str = "run() after request_stop()"):
        """Press Cancel from this thread (not the loop's) and return run()'s results."""
        with self.spy.cond:
            returned_before = self.spy.returned
        control.request_stop()
        return self.after_cancel(r, returned_before, what=what)

    def after_cancel(self, r: Run, returned_before: int, *, what: str):
        """run()'s results once it returns; if it does not, fail with what the selector saw:
        a select() that never woke points at a missing byte, a loop that woke and went back
        to sleep points at a byte that arrived before the state."""
        r.thread.join(CANCEL_BOUND)
        if r.thread.is_alive():
            with self.spy.cond:
                woke = self.spy.returned > returned_before
                asleep_again = self.spy.entered > self.spy.returned
            if not woke:
                fail(f"{what}: run() did not return within {CANCEL_BOUND:g} s; its select() "
                     "never woke up, because nothing it waits on became ready (no byte on "
                     "the control?)", pitfall="flag_only")
            if asleep_again:
                fail(f"{what}: the loop woke up, then went back to sleep in select() without "
                     "seeing the stop: the state was not there yet when the byte arrived",
                     pitfall="notify_before_state")
            fail(f"{what}: run() did not return within {CANCEL_BOUND:g} s")
        return r.result(what=what)

    def all_sockets(self, control) -> list[Any]:
        return [s for s in self.sockets] + [control.reader, control.writer]

    def check_no_leak(self, after: str, *, pitfall: str | None = None) -> None:
        """Every descriptor the test (and run) opened since the harness started is closed."""
        leaked = sorted(open_fds() - self.before)
        if leaked:
            shown = ", ".join(f"fd {fd} ({target})" for fd, target in leaked[:6])
            fail(f"{len(leaked)} descriptor(s) still open after {after}: {shown}",
                 pitfall=pitfall)

    def teardown(self) -> None:
        """End stray runs, close everything, then fail if the test body left a descriptor
        open (a test that already failed keeps its own diagnosis)."""
        leaked = sorted(open_fds() - self.before)
        self.spy.poison()
        # Wake any loop still parked in select(): one byte, never blocking the test thread.
        for c, reader, writer in self.controls:
            try:
                writer.send(b"!", socket.MSG_DONTWAIT)
            except (OSError, AttributeError, TypeError):
                pass
        for r in self.runs:
            r.thread.join(0.5)
            if r.thread.is_alive():
                interrupt_thread(r.thread)
                r.thread.join(0.5)
        for c, reader, writer in self.controls:
            # Close the raw sockets, never c.close(): a stuck request_stop may hold its lock.
            for s in (reader, writer):
                try:
                    s.close()
                except OSError:
                    pass
        for s in self.sockets:
            s.close()
        for obj in self.spy.made:
            try:
                _BASE.close(obj)
            except Exception:
                pass
        if leaked:
            shown = ", ".join(f"fd {fd} ({target})" for fd, target in leaked[:6])
            fail(f"{len(leaked)} descriptor(s) were still open when the test ended: {shown}")
