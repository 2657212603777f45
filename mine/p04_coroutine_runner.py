"""P04 · Tornado-style coroutines — Future, IOLoop, Runner.

Your task: rebuild the machinery behind tornado's generator coroutines.

* ``Future`` -- a result that is not there yet; callbacks run when it completes.
* ``IOLoop`` -- one thread's event loop: it runs callbacks and timeouts in turns, and sleeps
  in a selector's ``select()`` when it has nothing to do.  Other threads may call
  ``add_callback`` and nothing else, as in tornado; to stop a loop from another thread,
  ``loop.add_callback(loop.stop)``.
* ``coroutine`` and ``_Runner`` -- the trampoline: resume the generator with ``send`` (or
  ``throw``) whenever the Future it yielded is done.

Run ``./check.sh p04`` to check, ``./check.sh hint p04`` when stuck,
``./check.sh book p04`` for the chapter.  Work in this order: Future, IOLoop, coroutine.
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


class InvalidStateError(RuntimeError):
    """A Future was asked for a result it does not have yet, or was completed twice."""


class BadYieldError(TypeError):
    """A coroutine yielded something the Runner cannot wait for."""


class Return(Exception):
    """``raise Return(value)``: the pre-PEP 380 way for a generator to return a value."""

    def __init__(self, value=None):
        super().__init__(value)
        self.value = value


# -- Future ---------------------------------------------------------------------------------

class Future:
    """A result that is not there yet.  Not thread-safe: complete it on the loop thread."""

    def __init__(self):
        self._done = False
        self._result = None
        self._exception: BaseException | None = None
        self._callbacks: list | None = []

    def done(self) -> bool:
        """True once a result or an exception has been set."""
        raise NotImplementedError  # TODO

    def result(self):
        """The value, or raise the stored exception; InvalidStateError if not done."""
        raise NotImplementedError  # TODO

    def exception(self) -> BaseException | None:
        """The stored exception or None; InvalidStateError if not done."""
        raise NotImplementedError  # TODO

    def add_done_callback(self, fn) -> None:
        """Call ``fn(self)`` when the Future completes -- immediately if it already has."""
        raise NotImplementedError  # TODO

    def set_result(self, value) -> None:
        """Complete with ``value``; InvalidStateError if already done.

        Runs the callbacks once each, in registration order.  A callback that raises is
        logged (``log.exception``) and the others still run.  Then drop the list."""
        raise NotImplementedError  # TODO

    def set_exception(self, exc: BaseException) -> None:
        """Complete with ``exc``; otherwise exactly like set_result."""
        raise NotImplementedError  # TODO


# -- IOLoop ---------------------------------------------------------------------------------

_current = threading.local()  # .loop: the IOLoop of the calling thread


class IOLoop:
    """One thread's event loop.

    A new ``IOLoop()`` becomes the current loop of the thread that makes it (as in tornado 6).

    Attributes:
        wakeups_scheduled: the number of waker writes made by ``add_callback``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # TODO: say what it guards
        self._callbacks: list = []
        self._closed = False
        self.wakeups_scheduled = 0
        self._timeouts: list = []  # a heap; see heapq
        self._sequence = itertools.count()
        # Sleep in self._selector.select(timeout): the tests see the loop asleep when the
        # kernel has its thread waiting in poll, epoll_wait or select (read from /proc).
        self._selector = selectors.DefaultSelector()
        # TODO: how does another thread end that sleep? (the chapter's "Timeline: the waker")
        self._thread_ident = threading.get_ident()
        self._stopped = False
        # TODO: anything else your loop needs (a new loop becomes its thread's current loop)

    @staticmethod
    def current() -> "IOLoop":
        """The calling thread's current loop; a new one if it has none (see ``_current``)."""
        raise NotImplementedError  # TODO

    def time(self) -> float:
        """The loop's clock: monotonic seconds."""
        raise NotImplementedError  # TODO

    def add_callback(self, callback, *args, **kwargs) -> None:
        """Run ``callback(*args, **kwargs)`` on the loop thread, on a later turn.

        Thread-safe and never blocks; never runs the callback itself.  Callbacks run in
        the order they were added.  A call from another thread wakes a sleeping loop; a
        burst of calls made before the loop has collected the first of them costs one
        wakeup, not one per call; each wakeup is counted in ``wakeups_scheduled``.  A call
        on the loop thread never counts one.  On a closed loop the callback is dropped (no
        error), as in tornado.
        """
        raise NotImplementedError  # TODO

    def add_future(self, future: Future, callback) -> None:
        """When ``future`` is done, schedule ``callback(future)`` with add_callback."""
        raise NotImplementedError  # TODO

    def call_later(self, delay: float, callback, *args, **kwargs) -> object:
        """Run the callback after ``delay`` seconds (loop thread only); returns a handle."""
        raise NotImplementedError  # TODO

    def remove_timeout(self, handle: object) -> None:
        """Cancel a timeout made by call_later (if it has not fired yet)."""
        raise NotImplementedError  # TODO

    def start(self) -> None:
        """Run turns until stop(); meanwhile this is the thread's current loop, and when
        start() returns the thread has its previous current loop back.

        The guarantees (the chapter's "One turn of the IOLoop" explains them):
        a callback added by a callback, and a ``call_later(0)`` made in a callback, run on
        a later turn, after the callbacks that were already queued; timeouts run in
        deadline order and never early, a removed one never; a loop with nothing to do
        sleeps in the selector (no CPU) until a deadline or a call from another thread.
        A callback that raises is logged; the loop goes on.
        """
        raise NotImplementedError  # TODO

    def stop(self) -> None:
        """Make start() return after the current turn.  Loop thread only (from another
        thread: ``add_callback(loop.stop)``)."""
        raise NotImplementedError  # TODO

    def run_sync(self, func, timeout: float | None = None):
        """Start the loop, call ``func()`` on it, stop when its Future is done.

        ``func`` is a coroutine function or a plain function.  Returns the result or raises
        the exception; raises ``TimeoutError`` if ``timeout`` seconds pass first, and
        ``RuntimeError`` if the loop is stopped some other way before the Future is done.
        The loop is the thread's current loop while it runs (see start())."""
        raise NotImplementedError  # TODO

    def close(self) -> None:
        """Release the selector and the waker sockets.  If this was the thread's current
        loop, the loop that was current when this one was made (if still open) is again."""
        raise NotImplementedError  # TODO


# -- coroutine and the Runner ------------------------------------------------------------------

class _Moment:
    def __repr__(self) -> str:
        return "moment"


moment = _Moment()  # `yield moment`: let the callbacks already queued run first


def coroutine(func):
    """Decorator.  Calling the decorated function returns a Future.

    A generator runs synchronously up to its first yield, then a _Runner drives it.  Its
    ``return v`` / ``raise Return(v)`` sets the result; an uncaught exception sets the
    exception.  A plain function's return value (or exception) goes into the Future.
    """
    raise NotImplementedError  # TODO


class _Runner:
    """Drives one generator: resumes it each time the Future it yielded is done."""

    def __init__(self, gen, result_future: Future, first_yielded) -> None:
        self.gen = gen
        self.result_future = result_future
        self.io_loop = IOLoop.current()
        self.future: Future | None = None
        self.running = False
        self.finished = False
        # TODO: start waiting for first_yielded

    def run(self) -> None:
        """Resume the generator for as long as the Future it waits for is already done.

        Guarantees: 10 000 done Futures in a row do not grow the stack (no RecursionError),
        and a call made while run() is already running returns at once (no re-entry)."""
        raise NotImplementedError  # TODO

    def _wait_for(self, yielded) -> None:
        """Arrange for run() to be called once ``yielded`` is ready.

        Future: when done (add_future).  ``moment`` or None: on the next turn.  A list or
        dict of Futures: when every child has finished, even after a failure (results in
        the same shape and order; if any failed, the first failure in yield order is
        raised and the later ones are logged).  Anything else: BadYieldError, thrown into
        the generator."""
        raise NotImplementedError  # TODO
