"""BREAKS: "`close()` makes the thread's current loop the one that was current before (or none)."
HOW: close() of the current loop simply clears the thread's current loop. a = IOLoop.current();
b = IOLoop() (b becomes current); b.close(); IOLoop.current() now builds a brand-new loop c
instead of giving back a -- so callbacks that library code later adds to "the current loop" go to
c, which nobody runs, while a is started.

P04 learner file: tornado-style coroutines -- Future, IOLoop, Runner.
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
        # A new loop becomes the current loop of the thread that makes it (as in tornado 6).
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
        if getattr(_current, "loop", None) is self:  # a closed loop is nobody's current loop
            _current.loop = None


# -- coroutine and the Runner ----------------------------------------------------------------

class _Moment:
    def __repr__(self) -> str:
        return "moment"


moment = _Moment()  # `yield moment`: let the callbacks already queued run first


def coroutine(func):
    """Decorator.  Calling ``func`` runs it up to its first yield and returns a Future."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        future = Future()
        try:
            result = func(*args, **kwargs)
            if not isinstance(result, types.GeneratorType):
                future.set_result(result)  # a plain function: done at once
                return future
            first = next(result)  # synchronously, up to the first yield
        except (StopIteration, Return) as e:  # returned before yielding anything
            future.set_result(e.value)
        except Exception as e:
            future.set_exception(e)
        else:
            _Runner(result, future, first)
        return future

    return wrapper


class _Runner:
    """Drives one generator: resumes it each time the Future it yielded is done."""

    def __init__(self, gen, result_future: Future, first_yielded) -> None:
        self.gen = gen
        self.result_future = result_future  # what the caller of the coroutine holds
        self.io_loop = IOLoop.current()
        self.future: Future | None = None  # what the generator waits for now
        self.running = False  # inside run(): a nested run() must return at once
        self.finished = False
        self._wait_for(first_yielded)

    def run(self) -> None:
        """Resume the generator for as long as the Future it waits for is already done."""
        # Invariant: at most one run() drives the generator at a time.  _wait_for() calls
        # run() whenever the Future is done already; inside this loop that nested call
        # returns at once and the loop picks the result up -- iteration, not recursion.
        if self.running or self.finished:
            return
        self.running = True
        try:
            while not self.finished and self.future.done():
                future, self.future = self.future, None
                self._step(future)
        finally:
            self.running = False

    def _step(self, future: Future) -> None:
        """Hand the result (send) or the exception (throw) of ``future`` to the generator."""
        try:
            exc = future.exception()
            if exc is None:
                yielded = self.gen.send(future.result())
            else:
                yielded = self.gen.throw(exc)  # the generator may catch it at its yield
        except (StopIteration, Return) as e:
            self._finish(e.value, None)
        except Exception as e:
            self._finish(None, e)
        else:
            self._wait_for(yielded)

    def _finish(self, value, exc: BaseException | None) -> None:
        self.finished = True
        future, self.result_future = self.result_future, None
        if exc is None:
            future.set_result(value)
        else:
            future.set_exception(exc)

    def _wait_for(self, yielded) -> None:
        """Arrange for run() to be called once ``yielded`` is ready."""
        if yielded is None or yielded is moment:
            # Step aside for one turn: the callback queues behind everything already queued.
            self.future = Future()
            self.io_loop.add_callback(self._end_moment, self.future)
            return
        try:
            self.future = self._to_future(yielded)
        except BadYieldError as e:  # thrown into the generator, which may catch it
            self.future = Future()
            self.future.set_exception(e)
        if self.future.done():
            self.run()  # first yield: starts the loop; inside run(): returns at once
        else:
            self.io_loop.add_future(self.future, lambda _: self.run())

    def _end_moment(self, placeholder: Future) -> None:
        placeholder.set_result(None)
        self.run()

    def _to_future(self, yielded) -> Future:
        if isinstance(yielded, Future):
            return yielded
        if isinstance(yielded, (list, dict)):
            return self._gather(yielded)
        raise BadYieldError(f"yielded unknown object {yielded!r}")

    def _gather(self, children: list | dict) -> Future:
        """One Future for a list or dict of Futures, done when all of them are: results in
        the same shape and order, or the first failure in yield order."""
        keys = list(children) if isinstance(children, dict) else range(len(children))
        futures = [children[k] for k in keys]
        for f in futures:
            if not isinstance(f, Future):
                raise BadYieldError(f"yielded {type(children).__name__} holding {f!r}")
        gathered = Future()
        pending = len(futures)

        def on_child_done(_: Future) -> None:
            nonlocal pending
            pending -= 1
            if pending:
                return  # as in tornado 6, wait for every child, even after a failure
            # Read the children in yield order, not in completion order.
            failures = [f.exception() for f in futures if f.exception() is not None]
            if failures:
                for later in failures[1:]:
                    log.error("another child of a multi failed too", exc_info=later)
                gathered.set_exception(failures[0])  # the first failure in yield order
            else:
                results = [f.result() for f in futures]
                gathered.set_result(dict(zip(keys, results))
                                    if isinstance(children, dict) else results)

        if not futures:
            gathered.set_result({} if isinstance(children, dict) else [])
        for f in futures:
            f.add_done_callback(on_child_done)
        return gathered
