"""CORRECT: the Runner is not a class but a set of closures in the style of Twisted's
inlineCallbacks. Each step registers `add_done_callback` on the yielded Future *always*, with a
`waiting` flag: if the Future was already done the callback fires synchronously while the flag is
still up, it only records the Future, and the `while` loop of `_pump` picks it up -- iteration, not
recursion, and never re-entry (a `running` cell guards it as well). A Future that completes later
finds the flag down and schedules the next step with `add_callback` (the same turn as `add_future`
would give). `moment`/`None` schedule the next step directly. The multi is a closure too. The
Future and IOLoop are the usual ones (one lock, a socketpair waker written only by another
thread finding the list empty, snapshot turns, a heap with lazy removal).
"""
from __future__ import annotations

import functools
import heapq
import itertools
import logging
import selectors
import socket
import threading
import time
import types

log = logging.getLogger(__name__)

#: The longest one select() may sleep: poll and epoll take at most 2**31 - 1 ms (24.8 days)
#: and refuse inf; a loop whose next deadline is further away wakes after this long and
#: sleeps again (asyncio does the same).
MAX_WAIT = 24 * 3600.0


class InvalidStateError(RuntimeError):
    """A Future was asked for a result it does not have yet, or was completed twice."""


class BadYieldError(TypeError):
    """A coroutine yielded something the Runner cannot wait for."""


class Return(Exception):
    """``raise Return(value)``: the pre-PEP 380 way for a generator to return a value."""

    def __init__(self, value=None):
        super().__init__(value)
        self.value = value


# -- Future: where the producer of a result and the coroutine waiting for it meet ----------

class Future:
    """A result that is not there yet.  Not thread-safe: complete it on the loop thread."""

    def __init__(self):
        self._done = False
        self._result = None
        self._exception: BaseException | None = None
        self._callbacks: list | None = []  # run once each, in order, at completion; then None

    def done(self) -> bool:
        return self._done

    def result(self):
        if not self._done:
            raise InvalidStateError("the result is not ready yet")
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self) -> BaseException | None:
        if not self._done:
            raise InvalidStateError("the result is not ready yet")
        return self._exception

    def add_done_callback(self, fn) -> None:
        if self._done:
            fn(self)  # too late to queue it: the callbacks have already run
        else:
            self._callbacks.append(fn)

    def set_result(self, value) -> None:
        self._complete(value, None)

    def set_exception(self, exc: BaseException) -> None:
        self._complete(None, exc)

    def _complete(self, value, exc) -> None:
        if self._done:
            raise InvalidStateError("the Future is already done")
        self._result, self._exception, self._done = value, exc, True
        callbacks, self._callbacks = self._callbacks, None  # released: each runs once
        for fn in callbacks:
            try:
                fn(self)
            except Exception:  # one broken callback must not rob the others of the result
                log.exception("exception in done callback %r of %r", fn, self)


# -- IOLoop: callbacks, timeouts, and a waker for other threads ----------------------------

_current = threading.local()  # .loop: the IOLoop of the calling thread


class _Timeout:
    """The handle call_later returns; remove_timeout clears its callback."""

    __slots__ = ("callback",)

    def __init__(self, callback):
        self.callback = callback


class IOLoop:
    """One thread's event loop."""

    def __init__(self) -> None:
        # Guards _callbacks, _closed and wakeups_scheduled.  Taken by add_callback (any
        # thread) and by the loop to take the list; nobody runs a callback or waits under it.
        self._lock = threading.Lock()
        self._callbacks: list = []  # callbacks for the next iteration, in arrival order
        # Invariant: _callbacks non-empty  =>  the loop is awake and will look at the list
        # before it sleeps, or a byte is on its way through the waker.
        self._closed = False
        self.wakeups_scheduled = 0
        # Loop thread only: a heap of (deadline, sequence number, _Timeout).
        self._timeouts: list = []
        self._sequence = itertools.count()  # equal deadlines fire in call_later order
        self._selector = selectors.DefaultSelector()
        # The waker (a self-pipe, as in P02): one byte makes select() return.  Written by
        # add_callback from other threads (under _lock), read by the loop.
        self._waker_r, self._waker_w = socket.socketpair()
        self._waker_r.setblocking(False)
        self._waker_w.setblocking(False)  # a full buffer means a wakeup is already pending
        self._selector.register(self._waker_r, selectors.EVENT_READ)
        self._thread_ident = threading.get_ident()  # the loop thread (start() sets it again)
        self._stopped = False
        # A new loop becomes the current loop of the thread that makes it (as in tornado 6);
        # close() gives the thread back the loop that was current before.
        self._previous: IOLoop | None = getattr(_current, "loop", None)
        _current.loop = self

    @staticmethod
    def current() -> "IOLoop":
        """The calling thread's loop, created on first use."""
        loop = getattr(_current, "loop", None)
        if loop is None:
            loop = _current.loop = IOLoop()
        return loop

    def time(self) -> float:
        return time.monotonic()

    # -- scheduling ------------------------------------------------------------------------

    def add_callback(self, callback, *args, **kwargs) -> None:
        """Run ``callback(*args, **kwargs)`` on the loop thread, on a later iteration.

        Thread-safe.  Only the call that finds the list empty wakes the loop: the loop takes
        the whole list at once, so later calls know a wakeup is already on its way (the
        "in flight" flag of P01, here read off the list itself).  On a closed loop the
        callback is dropped, as tornado does: nobody will ever run it.
        """
        from_other_thread = threading.get_ident() != self._thread_ident
        with self._lock:
            if self._closed:
                return
            # The check and the append under one lock: the loop cannot take the list in
            # between, so "it was empty" is still true when we decide to wake.
            wake = from_other_thread and not self._callbacks
            self._callbacks.append(functools.partial(callback, *args, **kwargs))
            if wake:  # state first (the append), then the notification (P02)
                self.wakeups_scheduled += 1
                self._wake()

    def add_future(self, future: Future, callback) -> None:
        """When ``future`` is done, schedule ``callback(future)`` with add_callback."""
        future.add_done_callback(lambda f: self.add_callback(callback, f))

    def call_later(self, delay: float, callback, *args, **kwargs) -> object:
        """Run the callback after ``delay`` seconds.  Loop thread only (as in tornado).

        A NaN delay is due at once, as in tornado: NaN compares false with every deadline,
        so in the heap it would stall every timeout behind it.
        """
        if delay != delay:
            delay = 0.0
        timeout = _Timeout(functools.partial(callback, *args, **kwargs))
        heapq.heappush(self._timeouts, (self.time() + delay, next(self._sequence), timeout))
        return timeout

    def remove_timeout(self, handle: object) -> None:
        handle.callback = None  # lazy removal: the heap entry is skipped when it comes due

    def _wake(self) -> None:
        try:
            self._waker_w.send(b"x")
        except (BlockingIOError, InterruptedError):
            pass  # the buffer is full of wakeups nobody has read yet: the loop will wake

    # -- running ---------------------------------------------------------------------------

    def start(self) -> None:
        """Run turns until stop(); the loop is the thread's current loop meanwhile."""
        self._thread_ident = threading.get_ident()
        previous, _current.loop = getattr(_current, "loop", None), self
        try:
            while not self._stopped:
                self._iteration()
        finally:
            _current.loop = previous  # the thread gets its current loop back
            self._stopped = False

    def _iteration(self) -> None:
        """One turn of the loop: callbacks, due timeouts, then sleep in select()."""
        # The turn's work is fixed when it begins: the callbacks queued so far and the
        # timeouts due now.  What they add (callbacks, call_later(0)) waits for the next
        # turn, so `yield moment` in a loop cannot starve a timeout.
        with self._lock:
            callbacks, self._callbacks = self._callbacks, []
        now = self.time()
        due = []
        while self._timeouts and self._timeouts[0][0] <= now:
            due.append(heapq.heappop(self._timeouts)[2])
        # 1. The callbacks, in arrival order.
        for callback in callbacks:
            self._run(callback)
        # 2. The due timeouts, in deadline order (unless a callback just removed one).
        for timeout in due:
            if timeout.callback is not None:
                self._run(timeout.callback)
        if self._stopped:
            return
        # 3. Sleep.  Reading the list without the lock is safe: if it looks empty, whoever
        #    appends next finds it empty too and writes to the waker.
        if self._callbacks:
            wait = 0.0
        elif self._timeouts:
            wait = max(0.0, self._timeouts[0][0] - self.time())
        else:
            wait = None
        if wait is not None and wait > MAX_WAIT:  # a deadline further away than poll reaches
            wait = MAX_WAIT
        for key, _ in self._selector.select(wait):
            if key.fileobj is self._waker_r:
                try:
                    self._waker_r.recv(4096)  # one read per turn; leftovers wake us again
                except (BlockingIOError, InterruptedError):
                    pass

    def _run(self, callback) -> None:
        try:
            callback()
        except Exception:  # a failing callback is logged; the loop goes on
            log.exception("exception in callback %r", callback)

    def stop(self) -> None:
        """Make start() return once the current turn is over.  Loop thread only, as in
        tornado: another thread stops the loop with ``add_callback(loop.stop)``."""
        self._stopped = True

    def run_sync(self, func, timeout: float | None = None):
        """Run the loop until ``func()`` is done; return its result or raise its exception."""
        started: list[Future] = []  # the Future of func(), once the loop has called it

        def begin():
            try:
                outcome = func()
            except Exception as exc:
                outcome = Future()
                outcome.set_exception(exc)
            if not isinstance(outcome, Future):  # a plain function's value
                value, outcome = outcome, Future()
                outcome.set_result(value)
            started.append(outcome)
            self.add_future(outcome, lambda _: self.stop())

        expired: list[bool] = []  # set by the timeout, so a stop by anyone else is told apart

        def expire():
            expired.append(True)
            self.stop()

        self.add_callback(begin)
        handle = self.call_later(timeout, expire) if timeout is not None else None
        self.start()
        if handle is not None:
            self.remove_timeout(handle)
        if not started or not started[0].done():
            if expired:
                raise TimeoutError(f"run_sync: not done after {timeout} seconds")
            raise RuntimeError("run_sync: the loop stopped before the Future was done")
        return started[0].result()

    def close(self) -> None:
        with self._lock:  # from now on add_callback drops its callback
            self._closed = True
        self._selector.close()
        self._waker_r.close()
        self._waker_w.close()
        if getattr(_current, "loop", None) is self:  # give back the loop current before
            previous = self._previous
            _current.loop = previous if previous is not None and not previous._closed else None


# -- coroutine and the Runner (closures, inlineCallbacks style) ---------------------------

class _Moment:
    def __repr__(self) -> str:
        return "moment"


moment = _Moment()


def coroutine(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        future = Future()
        try:
            gen = func(*args, **kwargs)
            if not isinstance(gen, types.GeneratorType):
                future.set_result(gen)
                return future
            first = gen.send(None)
        except (StopIteration, Return) as e:
            future.set_result(e.value)
        except Exception as e:
            future.set_exception(e)
        else:
            _drive(gen, future, first)
        return future

    return wrapper


def _drive(gen, result_future: Future, first) -> None:
    """Run `gen` to completion on the current loop, one step per completed Future."""
    loop = IOLoop.current()
    running = [False]

    def to_future(yielded) -> Future:
        try:
            if isinstance(yielded, Future):
                return yielded
            if isinstance(yielded, (list, dict)):
                return _gather(yielded)
            raise BadYieldError(f"yielded unknown object {yielded!r}")
        except BadYieldError as e:
            failed = Future()
            failed.set_exception(e)
            return failed

    def pump(yielded) -> None:
        """Handle `yielded`, and keep stepping while what it yields is already done."""
        if running[0]:  # cannot happen by construction; the guard makes re-entry impossible
            raise RuntimeError("Runner re-entered")
        running[0] = True
        try:
            while True:
                if yielded is None or yielded is moment:
                    loop.add_callback(step_later, None)  # give up the turn
                    return
                future = to_future(yielded)
                waiting = [True, None]

                def on_done(f, waiting=waiting):
                    if waiting[0]:  # fired inside add_done_callback: done already
                        waiting[0] = False
                        waiting[1] = f
                    else:  # completed later: resume on a later turn
                        loop.add_callback(step_later, f)

                future.add_done_callback(on_done)
                if waiting[0]:  # not done yet: on_done will schedule us
                    waiting[0] = False
                    return
                yielded = step(waiting[1])
                if yielded is _FINISHED:
                    return
        finally:
            running[0] = False

    def step(future):
        """Resume the generator with `future`'s outcome (None for a moment)."""
        nonlocal result_future
        try:
            if future is None:
                return gen.send(None)
            exc = future.exception()
            if exc is None:
                return gen.send(future.result())
            return gen.throw(exc)
        except (StopIteration, Return) as e:
            out, result_future = result_future, None
            out.set_result(e.value)
        except Exception as e:
            out, result_future = result_future, None
            out.set_exception(e)
        return _FINISHED

    def step_later(future) -> None:
        yielded = step(future)
        if yielded is not _FINISHED:
            pump(yielded)

    pump(first)


_FINISHED = object()  # step()'s "the generator is over"


def _gather(children) -> Future:
    is_dict = isinstance(children, dict)
    keys = list(children) if is_dict else range(len(children))
    futures = [children[k] for k in keys]
    for f in futures:
        if not isinstance(f, Future):
            raise BadYieldError(f"yielded {type(children).__name__} holding {f!r}")
    gathered = Future()
    if not futures:
        gathered.set_result({} if is_dict else [])
        return gathered
    left = [len(futures)]

    def one_done(_):
        left[0] -= 1
        if left[0]:
            return
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            for e in errors[1:]:
                log.error("Multiple exceptions in yield list", exc_info=e)
            gathered.set_exception(errors[0])
        else:
            values = [f.result() for f in futures]
            gathered.set_result(dict(zip(keys, values)) if is_dict else values)

    for f in futures:
        f.add_done_callback(one_done)
    return gathered
