"""Helpers of the P02 acceptance set.

* ``Endpoints``   -- loopback addresses whose connects complete, are refused, or stay pending
                     (a listener whose accept queue is full).  Nothing leaves 127.0.0.1.
* ``SelectorSpy`` -- replaces ``selectors.DefaultSelector`` for one test with an instrumented
                     subclass: it records register/unregister/select/close (for sockets,
                     objects with ``fileno()`` and raw descriptors alike), notices a
                     descriptor unregistered after it was closed, can inject a fault, and
                     lets the test wait until the loop is inside ``select()``.
* ``open_fds``    -- the process's open sockets and anonymous inodes, from ``/proc/self/fd``;
                     ``Tracked`` judges "closed" by the descriptor, not by the object.
* ``PressWatch``  -- a ``request_stop()`` watched at the moment its byte lands in the reader.
* ``Run``         -- ``run(...)`` in a daemon thread, with the moment it returned.
* ``Harness``     -- per-test bookkeeping that creates dials and controls and, at teardown,
                     ends any run a wrong solution left hanging and closes every socket.
"""
from __future__ import annotations

import errno
import fcntl
import os
import selectors
import socket
import struct
import termios
import threading
import time
from dataclasses import dataclass
from typing import Any

from workbook.testkit import (BOUND, PARKED_CPU, DaemonThread, Failure, cpu_used, fail,
                              finished, interrupt_thread, join, kernel_state, run_hooked,
                              start_daemon, wait_event, wait_until, watch)

#: How long a loop may take to return after a cancel before we call it "never woke".
#: Nothing else is pending in those tests, so a loop that has not woken by then never will;
#: on a loaded 2-core box a real wakeup takes milliseconds, so 2 s keeps a wide margin.
CANCEL_BOUND = min(BOUND, 2.0)

#: How long the tests watch an idle loop: it must stay inside one select() call and use
#: next to no CPU for this long (a loop polling every 0.25 s or faster is seen).
IDLE_WINDOW = 0.3
#: How long a test watches a loop that only has to be back asleep (its own subject is
#: elsewhere): a loop that wakes every 50 ms is still seen; slower polling is the subject of
#: the no-deadline test, which watches IDLE_WINDOW.
GLANCE = 0.1
SETTLE = 0.05
#: select() calls timed out with nothing ready while a test waits for the loop to settle
#: (no run's deadline passes then): more than a correct loop ever makes, however slow the
#: machine -- it sleeps until its deadline in one call.
TIMER_WAKES = 5

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

def fd_target(fd: int) -> str | None:
    """What descriptor ``fd`` refers to now ('socket:[inode]', ...), or None if it is closed."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def open_fds() -> set[tuple[int, str]]:
    """(fd, target) of every socket / anonymous inode (epoll, eventfd) this process has open.

    Pairs, not bare numbers: a socket's target names its inode, so a descriptor number
    reused by another socket counts as a different entry."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        target = fd_target(int(name))
        if target is not None and target.startswith(("socket:", "anon_inode:")):
            found.add((int(name), target))
    return found


def pending_bytes(fd: int) -> int:
    """Bytes waiting to be read on socket ``fd`` (FIONREAD); 0 once it is closed."""
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
    except OSError:
        return 0


class Tracked:
    """A socket the test made, remembered by its descriptor and the file behind it, so
    "closed" is judged from the kernel's side: ``sock.close()``, ``os.close(fd)`` and a
    detach-then-close all count."""

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock = sock
        self.name = name
        self.fd = sock.fileno()
        self.target = fd_target(self.fd)

    @property
    def closed(self) -> bool:
        return self.sock.fileno() == -1 or fd_target(self.fd) != self.target


def is_closed(sock: Any) -> bool:
    """``sock`` (a socket the harness tracks, or any socket) no longer holds its descriptor."""
    tracked = _TRACKED.get(id(sock))
    if tracked is not None and tracked.sock is sock:
        return tracked.closed
    return sock.fileno() == -1


_TRACKED: dict[int, Tracked] = {}  # id(socket) -> Tracked, for every socket a test made


def track(sock: socket.socket, name: str) -> Tracked:
    t = Tracked(sock, name)
    _TRACKED[id(sock)] = t
    return t


def _describe_fd(fd: int, fileobj: Any) -> str:
    target = fd_target(fd)
    for t in _TRACKED.values():
        if t.fd == fd and t.target == target and not t.closed:
            return t.name
    return f"fd {fd} (registered as {type(fileobj).__name__} {fileobj!r})"


# -- the instrumented selector --------------------------------------------------------------

class TestOver(RuntimeError):
    """Raised by a spy selector's select() once its test has ended (stops stray loops)."""


@dataclass
class Registration:
    """One ``register()`` call that succeeded, as the kernel saw it."""
    fd: int
    target: str | None  # what the descriptor referred to when it was registered
    name: str
    unregistered: bool = False
    unregistered_open: bool = False  # unregistered while the fd still named that same file


class SelectorSpy:
    """Watches every selector that ``selectors.DefaultSelector()`` makes during one test.

    It accepts every form the selectors API accepts (a socket, any object with
    ``fileno()``, a raw integer descriptor): registrations are keyed by the descriptor the
    selector resolved, and "still open" means the descriptor still names the same file."""

    def __init__(self) -> None:
        # Guards every field below; notified on every recorded call, so tests can wait for
        # "the loop is inside select()" without sleeping.
        self.cond = threading.Condition()
        self.made: list[Any] = []               # the SpySelector instances, in order
        self.entered = 0                        # select() calls started
        self.returned = 0                       # select() calls finished
        self.timeouts: list[float | None] = []  # the timeout of every select() call
        self.timed_out = 0                      # calls that ran out their timeout, nothing ready
        self.registered: dict[int, Registration] = {}  # fd -> currently registered
        self.ever_registered: list[Registration] = []
        self.problems: list[str] = []           # unregister-after-close and similar
        self.unregister_calls = 0
        self.fault: tuple[str, int] | None = None  # ("register"|"select", n): nth call raises
        self._calls = {"register": 0, "select": 0}
        self.poisoned = False
        #: Called in the loop's thread as each select() begins (a test's probe), or None.
        self.on_select = None
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
                rec = Registration(key.fd, fd_target(key.fd), _describe_fd(key.fd, fileobj))
                with spy.cond:
                    spy.registered[key.fd] = rec
                    spy.ever_registered.append(rec)
                    spy.cond.notify_all()
                return key

            def unregister(self, fileobj):
                try:
                    fd = self.get_key(fileobj).fd  # also finds a closed socket object
                except (KeyError, ValueError):
                    fd = None
                with spy.cond:
                    spy.unregister_calls += 1
                    rec = spy.registered.pop(fd, None) if fd is not None else None
                    if rec is not None:
                        rec.unregistered = True
                        if rec.target is not None and fd_target(fd) == rec.target:
                            rec.unregistered_open = True
                        else:
                            spy.problems.append(f"{rec.name} was unregistered after it had "
                                                "been closed")
                    spy.cond.notify_all()
                return super().unregister(fileobj)

            def select(self, timeout=None):
                with spy.cond:
                    if spy.poisoned:
                        raise TestOver("the test that started this loop is over")
                    spy.entered += 1
                    spy.timeouts.append(timeout)
                    spy.cond.notify_all()
                if spy.on_select is not None:
                    spy.on_select()
                ready = None
                try:
                    spy._maybe_fault("select")
                    ready = super().select(timeout)
                    spy.gate.wait(BOUND)
                    return ready
                finally:
                    with spy.cond:
                        spy.returned += 1
                        if ready == [] and timeout is not None and timeout > 0:
                            spy.timed_out += 1
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
                    "registered": [r.name for r in self.registered.values()],
                    "unregister_calls": self.unregister_calls}

    def wait_for(self, predicate, timeout: float) -> bool:
        """Observe for at most ``timeout`` s whether ``predicate()`` (evaluated under the
        lock) becomes true; returns whether it did.  For a wait that must succeed use
        ``Harness`` helpers, which fail through ``testkit.wait_until``."""
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    def settle(self, predicate, timeout: float, *, what: str) -> bool:
        """Like ``wait_for``, but over as soon as the stuck detector sees that nothing can
        make ``predicate()`` true (no verdict recorded: the caller words the failure)."""
        return watch(lambda: self.holds(predicate), timeout, what=what, record=False) is None

    def holds(self, predicate) -> bool:
        with self.cond:
            return bool(predicate())

    def require_selector(self) -> None:
        if not self.made:
            fail("run() never called selectors.DefaultSelector(); create the selector with "
                 "selectors.DefaultSelector() inside run (the tests watch that name)")

    def cleanup_problems(self, sockets: list[Any]) -> list[str]:
        """Everything wrong with how the loop released ``sockets`` and its selectors."""
        with self.cond:
            out = list(self.problems)
            for rec in self.ever_registered:
                if not rec.unregistered:
                    out.append(f"{rec.name} was registered but never unregistered")
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


def _describe(obj: Any) -> str:
    tracked = _TRACKED.get(id(obj))
    return tracked.name if tracked is not None and tracked.sock is obj else f"socket {obj!r}"


# -- a press watched at the moment its byte lands ------------------------------------------

class PressWatch:
    """Runs ``control.request_stop()`` in a daemon thread and looks at the control after
    every C call the press makes (``sys.setprofile``): the first call after which a new byte
    sits in the reader is the notification, however it was written (``writer.send``,
    ``sendall``, ``os.write`` on the descriptor, ...).  At that moment another thread reads
    ``stop_requested``, as a woken loop would; then ``on_byte()`` runs (it may hold the
    press there).  A control whose ``stop_requested`` waits for a lock that the press holds
    answers only once the press has finished -- and so would the loop: that is fine."""

    def __init__(self, control, reader_fd: int, on_byte=None) -> None:
        self.control = control
        self.reader_fd = reader_fd
        self.on_byte = on_byte
        self.bytes_seen = 0                 # C calls after which a new byte had landed
        self._observer: DaemonThread | None = None
        self._seen = pending_bytes(reader_fd)

    def _hook(self, frame, event, arg) -> None:
        if event != "c_return":
            return
        now = pending_bytes(self.reader_fd)
        if now > self._seen:
            self.bytes_seen += 1
            if self._observer is None:
                answered = threading.Event()

                def observe() -> bool:
                    try:
                        return bool(self.control.stop_requested)
                    finally:
                        answered.set()

                self._observer = start_daemon(observe, name="p02-observer")
                # At once, unless it waits for the press's lock: then the two wait for each
                # other, which the stuck detector sees.  (It looks from a helper thread: this
                # is a profile hook, where its own calls must not run.)
                start_daemon(wait_event, answered, CANCEL_BOUND, name="p02-answer-waiter",
                             what="stop_requested read while a press runs",
                             record=False).join(CANCEL_BOUND + 1.0)
                if self.on_byte is not None:
                    self.on_byte()
        self._seen = now

    def _press(self) -> None:
        run_hooked(self.control.request_stop, profile=self._hook)

    def start(self) -> DaemonThread:
        return start_daemon(self._press, name="p02-press")

    def state_at_byte(self) -> bool | None:
        """What a reader saw when the byte landed (None if no byte landed)."""
        if self._observer is None:
            return None
        return join(self._observer, BOUND, what="reading stop_requested while a press runs")

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
        if not finished(self.thread, timeout, what=what, record=False):
            fail(f"{what} did not return: it was still waiting, with nothing due that could "
                 f"end it (bound {timeout:g} s)", pitfall=pitfall)
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
        _TRACKED.clear()
        self.tracked: list[Tracked] = []
        self.sockets: list[socket.socket] = []
        self.before = open_fds()  # after the endpoints exist, before anything of the test
        self.controls: list[Any] = []
        self.runs: list[Run] = []
        self.in_use: list[tuple[Run, Any]] = []  # runs a test leaves going on purpose

    def dial(self, name: str, address: tuple[str, int]):
        d = self.impl.dial(name, address)
        self.sockets.append(d.sock)
        self.tracked.append(track(d.sock, f"dial {name!r}"))
        return d

    def control(self):
        c = self.impl.Control()
        self.controls.append((c, c.reader, c.writer))
        self.tracked += [track(c.reader, "control.reader"), track(c.writer, "control.writer")]
        return c

    def reader_fd(self, control) -> int:
        """The descriptor of ``control.reader`` as it was created (it may be closed now)."""
        return _TRACKED[id(control.reader)].fd

    def start(self, dials, control, timeout=None) -> Run:
        r = Run(self.impl, self.spy, dials, control, timeout)
        self.runs.append(r)
        return r

    def _wait(self, predicate, *, what: str, timeout: float = BOUND) -> None:
        """testkit's bounded wait on a spy predicate; the failure adds what the spy saw."""
        try:
            wait_until(lambda: self.spy.holds(predicate), timeout, what=what)
        except Failure as exc:
            snap = self.spy.snapshot()
            fail(f"{exc} (select calls started {snap['entered']}, finished "
                 f"{snap['returned']}; still registered: {', '.join(snap['registered'])})",
                 pitfall=exc.pitfall)

    def wait_blocked(self, r: Run, *, selects: int = 1, pending: int | None = None,
                     what: str = "the loop is waiting inside select()") -> None:
        """Wait until run ``r`` is inside its ``selects``-th (or later) select() call and,
        if ``pending`` is given, exactly that many descriptors are still registered."""
        spy = self.spy

        def ready() -> bool:
            if not r.alive:
                return True
            if spy.entered < selects or spy.entered <= spy.returned:
                return False
            return pending is None or len(spy.registered) == pending

        self._wait(ready, what=what)
        if not r.alive:
            r.result()  # re-raises what run raised (e.g. NotImplementedError)
            spy.require_selector()
            fail(f"run() returned before {what}")

    def wait_idle(self, r: Run, *, window: float = IDLE_WINDOW, what: str = "the idle loop",
                  drained: int | None = None) -> float | None:
        """Wait until run ``r`` sleeps in a select() that is a real wait (any timeout but 0:
        a ``select(0)`` look is not sleeping), then watch it for ``window`` seconds: it must
        stay inside that one call and use next to no CPU.  Returns that call's timeout.

        ``drained``: a socket whose bytes the loop has to read before it may sleep (a flood
        on the control channel); the loop has not settled while any are left."""
        spy = self.spy

        def sleeping() -> bool:
            return not r.alive or (spy.entered > spy.returned and spy.timeouts[-1] != 0)

        # Settle first: a loop still busy with what woke it (a flood of bytes, a finished
        # dial) passes through select() on its way; it has settled once it stays inside one
        # call for SETTLE seconds.  A loop that wakes on a timer that fast never settles.
        give_up = time.monotonic() + BOUND
        with spy.cond:
            timed_out = spy.timed_out
        while True:
            with spy.cond:
                ran_out = spy.timed_out - timed_out
            if ran_out >= TIMER_WAKES:
                # Its select() timed out with nothing ready again and again, while no deadline
                # of the run has passed: no need to wait out the bound to call that polling.
                fail(f"{what} never stays asleep: its select() ran out its timeout with "
                     f"nothing ready {ran_out} times in a row (latest timeouts "
                     f"{spy.timeouts[-3:]}): it wakes on a timer to look at the flag instead "
                     "of sleeping until something is ready", pitfall="short_timeout_polling")
            self._wait(sleeping, what=f"{what} sleeps inside select() (select(0) only looks)")
            if not r.alive:
                r.result()
                spy.require_selector()
                fail(f"run() returned while {what} should have been waiting")
            with spy.cond:
                returned, timeout = spy.returned, spy.timeouts[-1]
            if (not spy.wait_for(lambda: not r.alive or spy.returned != returned, SETTLE)
                    and not self._woken(r, drained)):
                break
            if time.monotonic() > give_up:
                snap = spy.snapshot()
                fail(f"{what} never stayed inside one select() call for {SETTLE * 1e3:.0f} ms "
                     f"within {BOUND:g} s ({snap['entered']} select calls, latest timeouts "
                     f"{spy.timeouts[-3:]}): it keeps waking with nothing to do",
                     pitfall="short_timeout_polling")
        used = cpu_used(r.thread, window)
        with spy.cond:
            woke = spy.returned - returned
            later = spy.timeouts[len(spy.timeouts) - woke:] if woke else []
        if woke:
            fail(f"{what}: with nothing ready, the loop left select() {woke} time(s) in "
                 f"{window:g} s (select timeouts {[timeout, *later][:4]}): it wakes up on its "
                 "own to look at the flag instead of sleeping until something is ready",
                 pitfall="short_timeout_polling")
        if used is not None and used > PARKED_CPU:
            fail(f"{what} used {used * 1e3:.1f} ms of CPU in {window:g} s while it should be "
                 "asleep in select()", pitfall="short_timeout_polling")
        return timeout

    @staticmethod
    def _woken(r: Run, drained: int | None) -> bool:
        """Whether the loop, seen inside select() for a while, may still be on its way out
        of it: bytes it has to read are left, or the kernel has made its thread runnable
        (woken, or not yet asleep) and a busy machine has not run it yet.  Quiet time alone
        does not prove that a loop has settled on a loaded machine."""
        if drained is not None and pending_bytes(drained):
            return True
        return kernel_state(r.thread) == "R"

    def cancel(self, r: Run, control, *, what: str = "run() after request_stop()"):
        """Press Cancel from this thread (not the loop's) and return run()'s results."""
        with self.spy.cond:
            returned_before = self.spy.returned
        control.request_stop()
        return self.after_cancel(r, returned_before, what=what)

    def end(self, r: Run, control, *, what: str = "run() after request_stop()"):
        """End a run with a cancel when the cancel itself is not what the test is about:
        press, and press once more if the loop woke, missed the stop and went back to
        sleep.  (That lost wakeup is judged by p02.cancel and p02.state_first; here it
        would only make an unrelated checkpoint fail at random.)"""
        spy = self.spy
        with spy.cond:
            returned_before, entered_before = spy.returned, spy.entered
        control.request_stop()
        spy.settle(lambda: not r.alive or (spy.returned > returned_before
                                           and spy.entered > entered_before
                                           and spy.entered > spy.returned), CANCEL_BOUND,
                   what="the loop to wake for the cancel")
        if r.alive:
            with spy.cond:
                returned_before = spy.returned
            control.request_stop()
            return self.after_cancel(r, returned_before, what=what)
        return r.result(what=what)

    def after_cancel(self, r: Run, returned_before: int, *, what: str):
        """run()'s results once it returns; if it does not, fail with what the selector saw:
        a select() that never woke points at a missing byte, a loop that woke and went back
        to sleep points at a byte that arrived before the state."""
        if not finished(r.thread, CANCEL_BOUND, what=what, record=False):
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
            if not finished(r.thread, 0.5, what="a stray run", record=False):
                interrupt_thread(r.thread)
                finished(r.thread, 0.5, what="a stray run", record=False)
        # Close the raw sockets, never c.close(): a stuck request_stop may hold its lock.  A
        # descriptor closed behind its object's back (os.close) is only detached, so the
        # object never closes a number that may belong to someone else by now.
        for t in self.tracked:
            try:
                if t.closed:
                    if t.sock.fileno() != -1:
                        t.sock.detach()
                else:
                    t.sock.close()
            except OSError:
                pass
        for obj in self.spy.made:
            try:
                _BASE.close(obj)
            except Exception:
                pass
        if leaked:
            shown = ", ".join(f"fd {fd} ({target})" for fd, target in leaked[:6])
            fail(f"{len(leaked)} descriptor(s) were still open when the test ended: {shown}")
