"""Test helpers for P03: seeing a parked thread by its behaviour, holding a woken one,
interrupting the main thread.

*Parked* is decided from behaviour only, never from which primitive or frame a thread
waits in: over an observation window the thread uses next to no CPU of its own, makes no
wake-ups (voluntary context switches: a thread polling with ``time.sleep`` makes one per
sleep, a thread waiting for the GIL one every few milliseconds) and is not runnable; and
the queue stays usable by other threads (``len()`` from another thread returns, so the
lock is free).  A correct queue may park on a Condition, a Semaphore, an Event or its own
per-waiter locks: all of them look the same from outside.  Frames are read only to
*explain* a failure (``where``).

A ``Probe`` is a per-thread profile hook (``sys.setprofile``).  Once its thread is seen
parked, ``arm`` names the C call the thread is blocked in (whatever it is: a lock's
``acquire``, a pipe's ``read``...); when that call returns -- the thread has been woken --
the probe counts the wakeup and runs an action: hold the thread at a ``Gate`` so that
another thread can go first, or interrupt it.  The interleavings the chapter describes are
forced this way through the public API, without knowing the queue's internals.
"""
from __future__ import annotations

import signal
import threading
import time
from typing import Any, Callable

from workbook.stuck.code import is_kit
from workbook.stuck.procfs import SLEEP_CALLS, Call, kernel_tid, thread_syscall
from workbook.testkit import (BOUND, PARKED_CPU, DaemonThread, Failure, fail, interrupt_thread,
                              kernel_state, run_hooked, stacks, start_daemon,
                              thread_cpu_seconds, wait_until)
# The windows and thresholds, with their reasons: workbook/tuning.py.
from workbook.tuning import QUIET_SWITCHES, QUIET_WINDOW, SPIN_CPU, SPIN_SWITCHES, TIMED_QUIET

#: A thread that should be able to go on now, but stays parked this long, was not woken.
ASLEEP = 0.5


# -- behaviour of one thread, seen from outside ------------------------------------------

def switches(thread: threading.Thread) -> int | None:
    """Voluntary context switches of ``thread`` so far (each sleep or blocking wait that
    actually slept counts one), or None where /proc is not available."""
    tid = kernel_tid(thread)
    if tid is None or not thread.is_alive():
        return None
    try:
        with open(f"/proc/self/task/{tid}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def usage(thread: threading.Thread) -> tuple[float, int] | None:
    """(CPU seconds, wake-ups) used by ``thread`` so far; None once it has ended."""
    cpu = thread_cpu_seconds(thread)
    if cpu is None:
        return None
    return cpu, switches(thread) or 0


def spinning(thread: threading.Thread, first: tuple[float, int] | None
             ) -> tuple[float, int] | None:
    """(CPU seconds, wake-ups) ``thread`` has used since the ``usage`` sample ``first``, when
    they are evidence that it spins or polls (it never parked meanwhile); else None."""
    now = usage(thread)
    if now is None or first is None:
        return None
    cpu, woke = now[0] - first[0], now[1] - first[1]
    return (cpu, woke) if cpu > SPIN_CPU or woke > SPIN_SWITCHES else None


def quiet(thread: threading.Thread, window: float = QUIET_WINDOW) -> bool:
    """True when ``thread`` is alive and blocked for the whole next ``window`` seconds: no
    CPU to speak of, no wake-ups, not runnable at the end."""
    before = usage(thread)
    time.sleep(window)  # an observation window, not a proof of state: the usage is the proof
    return _at_rest(thread, before, usage(thread))


def _at_rest(thread: threading.Thread, before, after) -> bool:
    """Between two ``usage`` samples: no CPU to speak of, no wake-ups, not runnable now."""
    return (before is not None and after is not None
            and after[0] - before[0] <= PARKED_CPU and after[1] - before[1] <= QUIET_SWITCHES
            and kernel_state(thread) != "R")


def _ends_soon(call: Call | None) -> bool:
    """The thread sleeps (``time.sleep``), or waits with a timeout that ends within
    ``TIMED_QUIET``: it will wake by itself before one could call it parked."""
    if call is None or call.timed is not True:
        return False
    if call.name in SLEEP_CALLS:
        return True
    left = call.ends - time.monotonic() if call.ends is not None else call.timeout
    return left is not None and left < TIMED_QUIET


class Quiet:
    """``quiet`` without sleeping, for the predicate of a bounded wait: each call compares
    ``thread``'s usage with the sample taken at least one ``QUIET_WINDOW`` earlier, so the wait
    around it (and its stuck detector) keeps its own pace.  ``since()`` is how long the
    thread has been quiet in every window since, 0.0 while it is not."""

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread
        self.sample = usage(thread)
        self.at = time.monotonic()
        self.quiet_from: float | None = None
        self.woke = 0  # wake-ups in the quiet windows since ``quiet_from``

    def since(self) -> float:
        now = time.monotonic()
        if now - self.at >= QUIET_WINDOW:
            after = usage(self.thread)
            before, self.sample, start, self.at = self.sample, after, self.at, now
            still = _at_rest(self.thread, before, after)
            if still and self.quiet_from is None:
                self.woke = 0
            if still:
                self.woke += after[1] - before[1]  # type: ignore[index]
            self.quiet_from = (self.quiet_from or start) if still else None
        return 0.0 if self.quiet_from is None else now - self.quiet_from

    def settled(self) -> bool:
        """Parked for good, as far as one can tell: quiet for a window in a wait that does
        not end by itself soon; quiet for every window of ``TIMED_QUIET`` in a sleep, or in a
        wait the kernel shows ending within that time (a poller's, or a safety-net timeout's).
        (A wait whose end the kernel does not show counts as a long one.)"""
        since = self.since()
        if since < QUIET_WINDOW:
            return False
        return since >= TIMED_QUIET or not _ends_soon(thread_syscall(self.thread))

    def parked(self) -> bool:
        """Quiet since ``since()`` began, and asleep rather than waking now and then: a
        thread in a 20 ms ``time.sleep`` loop is quiet in each short window (one wake-up
        in it), yet it wakes by itself dozens of times a second."""
        return self.quiet_from is not None and self.woke <= QUIET_SWITCHES


def where(thread: threading.Thread) -> str:
    """Where ``thread`` is, for a diagnosis only: its innermost frames outside threading."""
    names = []
    for frame in stacks().get(thread.ident, []) if thread.ident is not None else []:
        code = frame.f_code
        if not code.co_filename.endswith(("threading.py", "support.py")) \
                and not is_kit(code.co_filename):
            names.append(f"{code.co_name} (line {frame.f_lineno})")
        if len(names) == 3:
            break
    return " in ".join(names) if names else "somewhere unknown"


def _stopped(thread: threading.Thread, what: str, returned_pitfall: str | None) -> None:
    """``thread`` ended while it should be waiting: report what it did."""
    if isinstance(thread, DaemonThread) and thread.error is not None:
        raise thread.error  # NotImplementedError reaches the harness this way
    result = getattr(thread, "result", None)
    fail(f"{what} should have blocked, but it returned {result!r}", pitfall=returned_pitfall)


def wait_parked(thread: threading.Thread, what: str, *, q: object = None,
                pitfall: str | None = "spin_holding_lock", returned_pitfall: str | None = None,
                timeout: float = BOUND) -> None:
    """Wait until ``thread`` is parked (see ``quiet``) and, with ``q``, check that the queue
    stays usable meanwhile.  Fails fast when the thread returns, or spins or polls."""
    first = usage(thread)
    started = time.monotonic()

    still = Quiet(thread)

    def parked_now() -> bool:
        if not thread.is_alive():
            _stopped(thread, what, returned_pitfall)
        if still.settled():
            return True
        busy = spinning(thread, first)
        if busy is not None:
            spot = where(thread)
            named = spinner_pitfall(thread, pitfall)
            interrupt_thread(thread)  # stop a spinner: it may be holding the lock
            fail(f"{what} should wait with the lock released, but in "
                 f"{time.monotonic() - started:.2f} s it used {busy[0]:.3f} s of CPU and woke "
                 f"up {busy[1]} times without returning: it spins or polls instead of waiting "
                 f"(it is in {spot})", pitfall=named)
        return False

    # Every thread at rest with nothing pending is this wait's goal, not a failure of it.
    wait_until(parked_now, timeout, what=f"{what} is parked (waiting, not spinning)",
               pitfall=pitfall, rest_is_success=True)
    if not thread.is_alive():
        _stopped(thread, what, returned_pitfall)
    if q is not None:
        usable(q, f"while {what} waits")


def usable(q: object, when: str, *, pitfall: str | None = "spin_holding_lock") -> int:
    """``len(q)`` from another thread; fails fast if it cannot get the queue's lock."""
    probe = start_daemon(len, q, name="len()")
    still = Quiet(probe)

    def done() -> bool:
        if not probe.is_alive():
            return True
        if still.since() >= 2 * QUIET_WINDOW:
            fail(f"len() from another thread stayed blocked {when}: the waiting thread "
                 "holds the queue's lock", pitfall=pitfall)
        return False

    wait_until(done, what=f"len() returned {when}", pitfall=pitfall)
    if probe.error is not None:
        raise probe.error
    return probe.result


def _wakes_itself(thread: threading.Thread) -> bool:
    """The kernel says ``thread`` is in a wait with a timeout (``time.sleep``, say), or
    running: quiet, but it wakes by itself, so nobody failed to wake it; the bound decides,
    and its message says where the time went."""
    call = thread_syscall(thread)
    return call is None or call.timed is True  # None: running right now, or unreadable


def finish(thread: DaemonThread, what: str, *, pitfall: str | None = None,
           timeout: float = BOUND, asleep: float = ASLEEP, reraise: bool = True,
           cpu_before: float | None = None) -> Any:
    """Join ``thread``, which should be able to finish now; fail fast once it has stayed
    parked for ``asleep`` seconds (nobody woke it), or after ``timeout``.  Returns its
    result; re-raises what it raised (unless ``reraise`` is false).

    ``cpu_before``: the thread's CPU clock before the call that should have ended its wait.
    If the clock has moved since and the thread sleeps again, it *was* woken and went back
    to waiting: ``pitfall`` (nobody woke it) is then not what happened, and the failure
    says so instead."""
    try:
        return _finish(thread, what, pitfall=pitfall, timeout=timeout, asleep=asleep,
                       reraise=reraise)
    except Failure as exc:
        after = thread_cpu_seconds(thread)
        if cpu_before is None or after is None or after <= cpu_before or exc.pitfall is None:
            raise
        exc.pitfall = None
        exc.args = (f"{exc.args[0]}\n{thread.name} was woken (it ran again after the call) "
                    "and went back to waiting: its wait loop does not see what changed",)
        raise


def _finish(thread: DaemonThread, what: str, *, pitfall: str | None, timeout: float,
            asleep: float, reraise: bool) -> Any:
    still = Quiet(thread)

    def done() -> bool:
        if not thread.is_alive():
            return True
        asleep_for = still.since()
        if asleep_for >= asleep and still.parked() and not _wakes_itself(thread):
            fail(f"{what}: it could go on, but it has stayed asleep for {asleep_for:.1f} s "
                 "(nobody woke it?)", pitfall=pitfall)
        return False

    wait_until(done, timeout, what=f"{what} finished", pitfall=pitfall)
    if thread.error is not None and reraise:
        raise thread.error
    return thread.result


def _queue_in(value: object, depth: int = 3) -> object | None:
    """The queue a thread's call works on: the object of a bound method, or one found in
    its arguments, a function's defaults or its closure's cells (a test's lambda,
    ``run_hooked``'s function)."""
    if hasattr(value, "take") and hasattr(value, "put") and hasattr(type(value), "__len__"):
        return value
    if depth == 0:
        return None
    inner: list = []
    if isinstance(value, (tuple, list)):
        inner = list(value)
    elif isinstance(value, dict):
        inner = list(value.values())
    elif callable(value):
        inner = [getattr(value, "__self__", None), *(getattr(value, "__defaults__", None) or ()),
                 *(c.cell_contents for c in (getattr(value, "__closure__", None) or ())
                   if _filled(c))]
    for item in inner:
        found = _queue_in(item, depth - 1)
        if found is not None:
            return found
    return None


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


#: What a call that polls with the queue's lock released breaks: the contract's rule (a wrong
#: variant of that name), not the pitfall of sleeping while holding the lock.
POLLS = "sleeps_instead_of_waiting"


def spinner_pitfall(thread: threading.Thread, pitfall: str | None) -> str | None:
    """The pitfall to name for ``thread``, seen spinning or polling: "spin_holding_lock"
    only while another thread cannot take the queue's lock meanwhile (``len()`` from a probe
    thread parks); a queue whose lock the spinner lets go of polls (``POLLS``).  A call not
    made on a queue method (no queue to probe) keeps ``pitfall``."""
    if pitfall != "spin_holding_lock" or not isinstance(thread, DaemonThread):
        return pitfall
    q = _queue_in(thread._call)
    if q is None:
        return pitfall
    probe = start_daemon(len, q, name="len() beside a spinner")
    still = Quiet(probe)
    deadline = time.monotonic() + BOUND
    while probe.is_alive() and still.since() < 2 * QUIET_WINDOW and time.monotonic() < deadline:
        time.sleep(QUIET_WINDOW / 5)  # a bounded look at the probe's state, not a proof
    return POLLS if not probe.is_alive() and probe.error is None else pitfall


def settle(thread: threading.Thread, what: str, *,
           pitfall: str | None = "spin_holding_lock") -> None:
    """Wait until ``thread`` has nothing left to do: it finished, or it is parked.  Fails
    fast when it spins or polls instead."""
    first = usage(thread)
    still = Quiet(thread)

    def settled() -> bool:
        if not thread.is_alive() or still.settled():
            return True
        busy = spinning(thread, first)
        if busy is not None:
            spot = where(thread)
            named = spinner_pitfall(thread, pitfall)
            interrupt_thread(thread)
            fail(f"{what}: instead of returning or going to sleep until woken, it used "
                 f"{busy[0]:.3f} s of CPU and woke up {busy[1]} times: it spins or polls "
                 f"(it is in {spot})", pitfall=named)
        return False

    wait_until(settled, what=what, pitfall=pitfall, rest_is_success=True)


def conditions(obj: object) -> list[threading.Condition]:
    """The ``threading.Condition`` objects the queue holds: its attributes and the elements
    of container attributes (per-waiter conditions, say).  A wakeup on one of them that
    changes nothing is a legitimate spurious wakeup.  The private Conditions inside a
    Semaphore or an Event are not included: those primitives never wake spuriously."""
    found: list[threading.Condition] = []

    def add(value: object) -> None:
        if isinstance(value, threading.Condition) and all(value is not c for c in found):
            found.append(value)

    values = list(getattr(obj, "__dict__", {}).values())
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for slot in [slots] if isinstance(slots, str) else slots:
            if hasattr(obj, slot):
                values.append(getattr(obj, slot))
    for value in values:
        add(value)
        if isinstance(value, (list, tuple, set, dict)) or type(value).__name__ == "deque":
            for inner in (value.values() if isinstance(value, dict) else value):
                add(inner)
    return found


def notify_all(conds: list[threading.Condition]) -> None:
    """A wakeup that changes nothing: ``notify_all`` on each condition, under its lock."""
    for cond in conds:
        if not cond.acquire(timeout=BOUND):
            fail("could not take the queue's lock within the bound to deliver a wakeup: "
                 "some thread holds it while waiting", pitfall="spin_holding_lock")
        try:
            cond.notify_all()
        finally:
            cond.release()


# -- forcing interleavings: a profile hook on the waiting thread -------------------------

class Gate:
    """Holds woken threads until ``open()`` is called."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards held
        self.held = 0
        self.opened = threading.Event()

    def hold(self) -> None:
        if self.opened.is_set():
            return
        with self._lock:
            self.held += 1
        self.opened.wait(BOUND)

    def open(self) -> None:
        self.opened.set()


class Probe:
    """A profile hook for one thread: acts when the blocking call it is parked in returns.

    ``run(fn, *args)`` runs ``fn`` in the calling thread with the hook installed.  While the
    thread is parked, another thread calls ``arm(action)``: the C call on top of the
    thread's stack is the one it is blocked in, and the first return (or exception) of that
    call is the thread's wakeup: ``wakeups`` counts it and ``action()`` runs there, in the
    woken thread, before it does anything else.
    """

    def __init__(self) -> None:
        self._stack: list[object] = []  # C calls under way, innermost last (own thread only)
        self._armed: object = None
        self._action: Callable[[], Any] | None = None
        self.wakeups = 0

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            self._stack.append(arg)
        elif event in ("c_return", "c_exception"):
            if self._stack:
                self._stack.pop()
            armed = self._armed
            # The same call: 3.12+ may hand the hook equal, not identical, bound methods.
            if armed is not None and (arg is armed or type(arg) is type(armed) and arg == armed):
                self._armed = None
                self.wakeups += 1
                action, self._action = self._action, None
                if action is not None:
                    action()

    def arm(self, action: Callable[[], Any] | None = None) -> bool:
        """Call while the thread is parked.  False if it is not blocked in a C call that
        the hook saw start (then no interleaving can be forced on it)."""
        stack = list(self._stack)
        if not stack:
            return False
        self._action = action
        self._armed = stack[-1]
        return True

    def disarm(self) -> None:
        self._armed = None
        self._action = None

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return run_hooked(fn, *args, profile=self._profile)


def start_probed(probe: Probe, fn: Callable[..., Any], *args: Any,
                 name: str | None = None) -> DaemonThread:
    return start_daemon(probe.run, fn, *args, name=name)


def call(fn: Callable[..., Any], *args: Any, what: str, pitfall: str | None = None,
         timeout: float = BOUND) -> Any:
    """``fn(*args)`` in a daemon thread: its result, or a failure if it does not return
    (fast, once the thread has stayed parked for a while)."""
    return finish(start_daemon(fn, *args), what, pitfall=pitfall, timeout=timeout)


def abandon(*threads: threading.Thread) -> None:
    """Stop helper threads left running by a failed check.  A parked one just stays
    parked: an asynchronous exception pending for a thread that never runs would keep the
    interpreter's eval breaker set (3.11 and earlier), slowing every other thread."""
    for thread in threads:
        if thread.is_alive() and not quiet(thread, 0.02):
            interrupt_thread(thread)


# -- interrupting the main thread with a real signal ---------------------------------------

class Interrupted(Exception):
    """Raised by the SIGUSR1 handler: Python's counterpart of Java's InterruptedException."""


SIGNAL = getattr(signal, "SIGUSR1", None)


class MainInterrupt:
    """``with MainInterrupt(rescue) as mi: mi.arm(); <blocking call in the main thread>``.

    A helper thread waits until the main thread is parked, then sends it SIGUSR1; the
    handler raises ``Interrupted`` there (once).  A signal that lands just before the main
    thread enters the blocking system call only marks the handler as pending, so the helper
    sends again while the handler has not run.  If the call swallows the exception (the
    main thread parks again) or never parks, the helper runs ``rescue`` in another daemon so
    the run goes on.

    With ``probe`` (a ``Probe`` whose ``run`` wraps the blocking call) and ``before``, the
    helper does not signal the parked thread at once: it calls ``prepare()`` (another
    waiter, say), arms the probe so that the signal is sent the moment the main thread is
    woken, then calls ``before()`` (which wakes it, e.g. a put); if ``before()`` leaves the
    main thread parked, it is signalled as usual.
    """

    RESEND = 0.02  # seconds between signals while the handler has not run yet

    def __init__(self, rescue: Callable[[], Any], *, probe: Probe | None = None,
                 prepare: Callable[[], Any] | None = None,
                 before: Callable[[], Any] | None = None) -> None:
        self._rescue = rescue
        self._probe = probe
        self._prepare = prepare
        self._before = before
        self._lock = threading.Lock()  # guards sending against __exit__ closing
        self._closed = False
        self.armed = threading.Event()  # set by the main thread just before the call
        self.done = threading.Event()  # set by the main thread when the call is over
        self.parked = False  # the main thread was seen parked before the signal
        self.sent = 0
        self.fired = 0  # handler runs (main thread only); only the first one raises
        self.on_wake = False  # the first signal was sent by the probe, as the thread woke
        self.swallowed = False  # the main thread parked again after the handler raised
        self.rescued = False
        self.error: BaseException | None = None  # raised by before()

    def _handler(self, signum: int, frame: Any) -> None:
        self.fired += 1
        if self.fired == 1 and not self.done.is_set():
            raise Interrupted(f"signal {signum} while blocked")

    def __enter__(self) -> "MainInterrupt":
        if SIGNAL is None or not hasattr(signal, "pthread_kill"):
            fail("this check needs POSIX signals (signal.pthread_kill and SIGUSR1)")
        if threading.current_thread() is not threading.main_thread():
            fail("the interrupt checks must run in the main thread")
        self._main = threading.main_thread()
        self._old = signal.signal(SIGNAL, self._handler)
        self._helper = start_daemon(self._run, name="interrupter")
        return self

    def arm(self) -> None:
        """Called by the main thread right before the blocking call (not earlier: starting
        the helper thread itself waits)."""
        self.armed.set()

    def _send(self) -> None:
        with self._lock:
            if not self._closed:
                self.sent += 1
                signal.pthread_kill(self._main.ident, SIGNAL)

    def _send_on_wake(self) -> None:
        self.on_wake = not self.sent
        self._send()

    def _run(self) -> None:
        if not self.armed.wait(BOUND):
            return
        deadline, first = time.monotonic() + BOUND, usage(self._main)
        while not self.done.is_set() and time.monotonic() < deadline:
            if quiet(self._main):
                self.parked = True
                break
            if spinning(self._main, first) is not None:
                break  # it spins or polls: the signal below ends that too
        if self.done.is_set():
            return  # the call did not block at all
        if self.parked and self._probe is not None and self._before is not None:
            try:
                if self._prepare is not None:
                    self._prepare()
            except BaseException as exc:  # reported by the test
                self.error = exc
            if self.error is None and self._probe.arm(self._send_on_wake):
                try:
                    self._before()
                except BaseException as exc:  # reported by the test
                    self.error = exc
                # If the main thread was not the one woken, it is still parked: signal it.
                wait_until(lambda: self.sent or self.done.is_set() or quiet(self._main),
                           what="the main thread woke up or went on waiting")
                self._probe.disarm()
        if not self.sent and not self.done.is_set():
            self._send()  # sent even if it never parked: the signal also ends a spin or sleep
        last, deadline = time.monotonic(), time.monotonic() + BOUND
        while not self.done.is_set() and time.monotonic() < deadline:
            if quiet(self._main, 0.02):
                if self.fired:
                    if quiet(self._main):  # parked again after the handler raised
                        self.swallowed = True
                        break
                elif time.monotonic() - last >= self.RESEND:
                    self._send()
                    last = time.monotonic()
        if not self.done.is_set():
            self.rescued = True
            start_daemon(self._rescue, name="rescue")

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self._helper.join(BOUND)
        with self._lock:
            self._closed = True
        # Every signal sent so far reaches the main thread at its next system call; a few
        # short sleeps let its (no longer raising) handler run before the old one returns.
        for _ in range(3):
            time.sleep(0.001)
        signal.signal(SIGNAL, self._old)
