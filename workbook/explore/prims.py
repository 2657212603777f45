"""Controlled stand-ins for ``threading``'s primitives and ``time``'s clock, and the patch
that puts them in a learner module's namespace.

Each class keeps the documented behaviour of its CPython counterpart, down to the corner
cases a queue depends on: ``Condition.wait`` leaves its waiter in the wait-set until the
woken thread runs again (so a ``notify`` at the instant a wait times out is spent on it,
as in CPython), ``Semaphore`` and ``Event`` are built on a ``Condition`` the way the
standard library builds them, timeouts above ``threading.TIMEOUT_MAX`` raise
``OverflowError``.  Blocking goes through the ``Scheduler``; called from a thread the
scheduler does not control, a primitive works but refuses to block.
"""
from __future__ import annotations

import _thread
import sys
import threading
import time
import types
from collections import deque
from typing import Any, Callable

from workbook.explore import foreign
from workbook.explore.sched import BASE, DONE, INSTANT, TASKS, Scheduler

TIMEOUT_MAX = threading.TIMEOUT_MAX
#: ``time.time()`` in a controlled run: a fixed date plus the virtual clock.
EPOCH = 1_700_000_000.0


class WouldBlock(RuntimeError):
    """A primitive had to wait in a thread the scheduler does not control."""


def _sched() -> tuple[Scheduler | None, Any]:
    task = TASKS.get(_thread.get_ident())
    if task is not None:
        if task.state == DONE or task.sched is not Scheduler.active:
            task.sched._abandon(task)  # its run is over: end this thread
        return task.sched, task
    return Scheduler.active, None


def _check_timeout(blocking: bool, timeout: float) -> None:
    """The argument checks of ``_thread.lock.acquire``."""
    if not blocking and timeout != -1:
        raise ValueError("can't specify a timeout for a non-blocking call")
    if timeout < 0 and timeout != -1:
        raise ValueError("timeout value must be a non-negative number")
    if timeout > TIMEOUT_MAX:
        raise OverflowError("timeout value is too large")


def name(obj: Any, default: str) -> str:
    s = Scheduler.active
    owner = getattr(obj, "_owner", None)
    if s is None:
        return default
    if owner is not None:
        return s.name_of(owner, default)
    return s.name_of(obj, default)


class Lock:
    """``threading.Lock``: any thread may release it."""

    _kind = "Lock"

    def __init__(self) -> None:
        self._locked = False
        self._holder: Any = None
        self._owner: Any = None  # set when the lock is internal to another primitive

    def __repr__(self) -> str:
        return f"<controlled {self._kind} {'locked' if self._locked else 'unlocked'}>"

    def locked(self) -> bool:
        return self._locked

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        _check_timeout(blocking, timeout)
        s, task = _sched()
        if task is None:
            if self._locked:
                if not blocking or timeout == 0:
                    return False
                raise WouldBlock(f"{self._kind}.acquire() would block outside the explorer")
            self._locked, self._holder = True, None
            return True
        s.point()
        deadline = None if timeout == -1 else s.now + timeout
        recorded = False
        while self._locked:
            if not blocking or (deadline is not None and s.now >= deadline):
                return False
            own = self._holder is task  # parked on a lock it holds itself: a hand-made wait
            what = name(self, "a lock")
            if not recorded and self._owner is None:
                s.record(f"waits for {what}" if not own else f"sleeps on {what}", kind="block")
                recorded = True
            reason = s.block(task, self, deadline, what=f"acquire of {what}",
                             interruptible=own or s.lock_faults)
            if reason == "timeout":
                s.record(f"acquire of {what} times out", kind="wake")
                return False
            if isinstance(reason, BaseException):
                raise reason
        self._locked, self._holder = True, task
        if self._owner is None or isinstance(self._owner, Semaphore):
            task.locks_taken += 1
        if self._owner is None:
            s.point()  # just inside: another thread may run while this one holds the lock
        return True

    def release(self) -> None:
        if not self._locked:
            raise RuntimeError("release unlocked lock")
        self._locked, self._holder = False, None
        s, task = _sched()
        if s is not None:
            s.wake(self)
            if task is not None:
                s.point()

    __enter__ = acquire

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _at_fork_reinit(self) -> None:  # pragma: no cover - no fork in a run
        self._locked = False


class RLock(Lock):
    """``threading.RLock``: owned by one thread, re-entrant."""

    _kind = "RLock"

    def __init__(self) -> None:
        super().__init__()
        self._count = 0

    def _me(self) -> Any:
        s, task = _sched()
        return task if task is not None else "outside"

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me = self._me()
        if self._locked and self._holder is me:
            self._count += 1
            return True
        if not Lock.acquire(self, blocking, timeout):
            return False
        self._holder, self._count = me, 1
        return True

    __enter__ = acquire

    def release(self) -> None:
        if not self._locked or self._holder is not self._me():
            raise RuntimeError("cannot release un-acquired lock")
        self._count -= 1
        if self._count == 0:
            Lock.release(self)

    def _is_owned(self) -> bool:
        return self._locked and self._holder is self._me()

    def _release_save(self) -> Any:
        count, self._count = self._count, 1
        Lock.release(self)
        return count

    def _acquire_restore(self, count: Any) -> None:
        Lock.acquire(self)
        self._holder, self._count = self._me(), count


class _Waiter:
    __slots__ = ("task", "signalled")

    def __init__(self, task: Any) -> None:
        self.task = task
        self.signalled = False


class Condition:
    """``threading.Condition`` over a controlled lock (an ``RLock`` by default)."""

    def __init__(self, lock: Any = None, *, _internal: Any = None) -> None:
        self._lock = RLock() if lock is None else lock
        self._waiters: deque[_Waiter] = deque()
        self._owner = _internal  # the Semaphore/Event this condition belongs to, if any
        self.acquire = self._lock.acquire
        self.release = self._lock.release

    def __repr__(self) -> str:
        return f"<controlled Condition({self._lock!r}), {len(self._waiters)} waiting>"

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *args: object) -> None:
        self._lock.__exit__(*args)

    def _is_owned(self) -> bool:
        owned = getattr(self._lock, "_is_owned", None)
        if owned is not None:
            return owned()
        return bool(getattr(self._lock, "_locked", True))

    def _release_save(self) -> Any:
        save = getattr(self._lock, "_release_save", None)
        if save is not None:
            return save()
        self._lock.release()
        return None

    def _acquire_restore(self, state: Any) -> None:
        restore = getattr(self._lock, "_acquire_restore", None)
        if restore is not None:
            restore(state)
        else:
            self._lock.acquire()

    def wait(self, timeout: float | None = None) -> bool:
        if not self._is_owned():
            raise RuntimeError("cannot wait on un-acquired lock")
        s, task = _sched()
        if task is None:
            raise WouldBlock("Condition.wait() outside the explorer")
        s.point()
        what = name(self, "a Condition")
        waiter = _Waiter(task)
        self._waiters.append(waiter)
        saved = self._release_save()
        gotit = False
        try:  # the same shape as CPython's: restore the lock whatever happens
            if timeout is not None and timeout > TIMEOUT_MAX:
                raise OverflowError("timeout value is too large")
            if waiter.signalled or (timeout is not None and timeout <= 0):
                # notified while it was letting go of the lock (as CPython's waiter lock,
                # released before its owner sleeps on it, would let it pass at once)
                gotit = waiter.signalled
            else:
                deadline = None if timeout is None else s.now + timeout
                label = "waits on " + what + ("" if timeout is None else f" (timeout {timeout:g})")
                if self._owner is None:
                    s.record(label, kind="block")
                elif isinstance(self._owner, Semaphore):
                    s.record(f"waits in {what}.acquire()"
                             + ("" if timeout is None else f" (timeout {timeout:g})"), kind="block")
                else:
                    s.record(f"waits in {what}.wait()"
                             + ("" if timeout is None else f" (timeout {timeout:g})"), kind="block")
                reason = s.block(task, waiter, deadline, what=f"wait on {what}",
                                 interruptible=True, spurious_ok=self._owner is None)
                if isinstance(reason, BaseException):
                    raise reason
                if reason == "spurious":  # it leaves the wait-set as if notified
                    try:
                        self._waiters.remove(waiter)
                    except ValueError:
                        pass
                if reason == "timeout":
                    s.record(f"its wait on {what} times out", kind="wake", where=False)
                gotit = reason in ("woken", "spurious")
            return gotit
        finally:
            self._acquire_restore(saved)
            if not gotit:
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass

    def wait_for(self, predicate: Callable[[], Any], timeout: float | None = None) -> Any:
        endtime = None
        waittime = timeout
        result = predicate()
        while not result:
            if waittime is not None:
                if endtime is None:
                    endtime = monotonic() + waittime
                else:
                    waittime = endtime - monotonic()
                    if waittime <= 0:
                        break
            self.wait(waittime)
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        if not self._is_owned():
            raise RuntimeError("cannot notify on un-acquired lock")
        s, task = _sched()
        woken = []
        waiters = self._waiters
        while waiters and n > 0:
            w = waiters.popleft()
            w.signalled = True
            n -= 1
            if s is not None:
                s.wake(w)
            woken.append(w.task.name if w.task is not None else "?")
        if s is not None and task is not None:
            if self._owner is None or isinstance(self._owner, (Semaphore, Event)):
                what = name(self, "a Condition")
                if self._owner is None:
                    verb = f"notifies {what}"
                elif isinstance(self._owner, Semaphore):
                    verb = f"releases {what}"
                else:
                    verb = f"sets {what}"
                s.record(verb + (": wakes " + ", ".join(woken) if woken else ": nobody waits"),
                         kind="notify")
            s.point()

    def notify_all(self) -> None:
        self.notify(len(self._waiters))

    notifyAll = notify_all


class Semaphore:
    """``threading.Semaphore``, built like the standard library's on a Condition."""

    def __init__(self, value: int = 1) -> None:
        if value < 0:
            raise ValueError("semaphore initial value must be >= 0")
        self._cond = Condition(Lock(), _internal=self)
        self._cond._lock._owner = self
        self._value = value

    def __repr__(self) -> str:
        return f"<controlled {type(self).__name__} value={self._value}>"

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if not blocking and timeout is not None:
            raise ValueError("can't specify timeout for non-blocking acquire")
        rc = False
        endtime = None
        with self._cond:
            while self._value == 0:
                if not blocking:
                    break
                if timeout is not None:
                    if endtime is None:
                        endtime = monotonic() + timeout
                    else:
                        timeout = endtime - monotonic()
                        if timeout <= 0:
                            break
                self._cond.wait(timeout)
            else:
                self._value -= 1
                rc = True
        return rc

    __enter__ = acquire

    def release(self, n: int = 1) -> None:
        if n < 1:
            raise ValueError("n must be one or more")
        with self._cond:
            self._value += n
            self._cond.notify(n)

    def __exit__(self, *args: object) -> None:
        self.release()


class BoundedSemaphore(Semaphore):
    def __init__(self, value: int = 1) -> None:
        super().__init__(value)
        self._initial_value = value

    def release(self, n: int = 1) -> None:
        if n < 1:
            raise ValueError("n must be one or more")
        with self._cond:
            if self._value + n > self._initial_value:
                raise ValueError("Semaphore released too many times")
            self._value += n
            self._cond.notify(n)


class Event:
    """``threading.Event``, built like the standard library's on a Condition."""

    def __init__(self) -> None:
        self._cond = Condition(Lock(), _internal=self)
        self._cond._lock._owner = self
        self._flag = False

    def __repr__(self) -> str:
        return f"<controlled Event {'set' if self._flag else 'unset'}>"

    def is_set(self) -> bool:
        return self._flag

    isSet = is_set

    def set(self) -> None:
        with self._cond:
            self._flag = True
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        with self._cond:
            signaled = self._flag
            if not signaled:
                signaled = self._cond.wait(timeout)
            return signaled


class Timer(foreign.Timer):
    """``threading.Timer``: started inside a run, it waits on a controlled ``Event``, so its
    interval passes on the virtual clock."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if foreign.running_task() is not None:
            self.finished = Event()


# ---- the clock ------------------------------------------------------------------------------

#: What one reading of a clock moves the virtual clock by: two readings of a real clock are
#: never equal, so code that waits until ``now > deadline`` (not ``>=``) is not stuck at the
#: instant.  A nanosecond, as Linux's clock (a thousand fit in the judges' 1e-6 s), and a
#: power of two, so that virtual times stay exact sums in a float.
TICK = 2.0 ** -30


def tick(s: Scheduler) -> float:
    """The virtual time as a reading of a clock sees it: read by a controlled thread, the
    clock moves by ``TICK`` first.  Every clock of a run reads through here."""
    if s.task() is not None:
        s.now += TICK
    return s.now


def monotonic() -> float:
    s, task = _sched()
    if s is None:
        return BASE
    if task is not None:
        s.point()
    return BASE + tick(s)


def monotonic_ns() -> int:
    return int(monotonic() * 1e9)


def wall_time() -> float:
    """``time.time()``: not monotonic -- it jumps (``Scheduler.jump``) once time moves."""
    s = Scheduler.active
    if s is None:
        return EPOCH
    now = tick(s)  # without a point (it never was one)
    return EPOCH + now + (s.jump if now > INSTANT else 0.0)  # once time has moved


def wall_time_ns() -> int:
    return int(wall_time() * 1e9)


def sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    s, task = _sched()
    if task is None:
        return
    s.point()
    if seconds == 0:
        return
    if seconds > TIMEOUT_MAX:
        raise OverflowError("sleep length is too large")
    s.record(f"sleeps {seconds:g} s", kind="block")
    reason = s.block(task, "sleep", s.now + seconds, what="sleep", interruptible=True)
    if isinstance(reason, BaseException):
        raise reason


def allocate_lock() -> Lock:
    return Lock()


# ---- the patch ------------------------------------------------------------------------------

class _Facade(types.ModuleType):
    """A module that answers with the controlled names and delegates the rest."""

    def __init__(self, real: types.ModuleType, overrides: dict[str, Any]) -> None:
        super().__init__(real.__name__)
        self.__dict__.update(overrides)
        self._real = real

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._real, attr)


_THREADING = {"Lock": Lock, "RLock": RLock, "Condition": Condition, "Semaphore": Semaphore,
              "BoundedSemaphore": BoundedSemaphore, "Event": Event, "TIMEOUT_MAX": TIMEOUT_MAX,
              "Thread": foreign.Thread, "Timer": Timer}
_TIME = {"monotonic": monotonic, "monotonic_ns": monotonic_ns, "time": wall_time,
         "time_ns": wall_time_ns, "perf_counter": monotonic, "perf_counter_ns": monotonic_ns,
         "sleep": sleep}
_THREAD = {"allocate_lock": allocate_lock, "LockType": Lock, "RLock": RLock,
           "TIMEOUT_MAX": TIMEOUT_MAX}

fake_threading = _Facade(threading, _THREADING)
fake_time = _Facade(time, _TIME)
fake_thread = _Facade(_thread, _THREAD)

#: Real object -> controlled stand-in, for names imported with ``from ... import``.
_REPLACE: dict[int, Any] = {id(threading): fake_threading, id(time): fake_time,
                            id(_thread): fake_thread}
for _real, _table in ((threading, _THREADING), (time, _TIME), (_thread, _THREAD)):
    for _attr, _fake in _table.items():
        _value = getattr(_real, _attr, None)
        if _value is not None and not isinstance(_value, (int, float)):
            _REPLACE[id(_value)] = _fake


def patch(namespace: dict[str, Any]) -> list[str]:
    """Swap the real modules and primitives in ``namespace`` for the controlled ones;
    return the names swapped."""
    swapped = []
    for key, value in list(namespace.items()):
        fake = _REPLACE.get(id(value))
        if fake is not None:
            namespace[key] = fake
            swapped.append(key)
    return swapped


def is_controlled(obj: Any) -> bool:
    return isinstance(obj, (Lock, Condition, Semaphore, Event))


__all__ = ["Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore", "Event",
           "monotonic", "sleep", "patch", "fake_threading", "fake_time", "WouldBlock",
           "is_controlled", "sys"]
