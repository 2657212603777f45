"""CORRECT: a differently built IOLoop and Runner.

* Waker: an ``os.pipe()`` (both ends non-blocking) instead of a socketpair; still one byte, written
  only by a call from another thread that found the callback list empty, under the lock.
* Callbacks: a ``collections.deque`` of ``(fn, args, kwargs)`` triples, swapped out whole at the
  start of a turn.
* Timeouts: a list kept sorted with ``bisect.insort`` on ``(deadline, sequence, handle)``;
  ``remove_timeout`` deletes the entry at once (a sorted list stays sorted when an element is
  deleted, unlike a heap) and also marks the handle, for a timeout already collected by the
  current turn.
* Future: an explicit state field (PENDING / FINISHED) with ``__slots__``.
* Runner: tornado's own shape -- ``handle_yield`` returns True when the new Future is already
  done and ``run()`` goes round its ``while`` loop again; ``running`` guards against re-entry.
Everything observable follows the same rules as the spec: snapshot of callbacks and due timeouts
at the start of a turn, zero wait with callbacks pending, select clamped to a day, current-loop
bookkeeping as in tornado 6, run_sync's TimeoutError vs RuntimeError.
"""
from __future__ import annotations

import bisect
import collections
import functools
import itertools
import logging
import os
import selectors
import threading
import time
import types

log = logging.getLogger(__name__)

_MAX_SLEEP = 86400.0  # poll/epoll cannot sleep 2**31 ms; wake up once a day and look again


class InvalidStateError(RuntimeError):
    """A Future was asked for a result it does not have yet, or was completed twice."""


class BadYieldError(TypeError):
    """A coroutine yielded something the Runner cannot wait for."""


class Return(Exception):
    def __init__(self, value=None):
        super().__init__(value)
        self.value = value


_PENDING, _FINISHED = "PENDING", "FINISHED"


class Future:
    __slots__ = ("_state", "_value", "_error", "_waiting", "__weakref__")

    def __init__(self):
        self._state = _PENDING
        self._value = None
        self._error: BaseException | None = None
        self._waiting: list | None = []

    def done(self) -> bool:
        return self._state is _FINISHED

    def _check(self) -> None:
        if self._state is _PENDING:
            raise InvalidStateError("Future is still pending")

    def result(self):
        self._check()
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self):
        self._check()
        return self._error

    def add_done_callback(self, fn) -> None:
        if self._state is _FINISHED:
            fn(self)
            return
        self._waiting.append(fn)

    def set_result(self, value) -> None:
        self._finish(value, None)

    def set_exception(self, exc: BaseException) -> None:
        self._finish(None, exc)

    def _finish(self, value, error) -> None:
        if self._state is _FINISHED:
            raise InvalidStateError("Future already completed")
        self._value, self._error, self._state = value, error, _FINISHED
        waiting, self._waiting = self._waiting, None
        while waiting:
            fn = waiting.pop(0)  # the list shrinks as it runs: nothing is held afterwards
            try:
                fn(self)
            except Exception:
                log.exception("done callback %r of %r failed", fn, self)


_local = threading.local()


class _Handle:
    __slots__ = ("fn", "entry")

    def __init__(self, fn):
        self.fn = fn
        self.entry = None


class IOLoop:
    def __init__(self) -> None:
        self._mutex = threading.Lock()  # guards _pending, _closed, wakeups_scheduled
        self._pending: collections.deque = collections.deque()
        self._closed = False
        self.wakeups_scheduled = 0
        self._timers: list = []  # sorted (deadline, seq, _Handle); loop thread only
        self._seq = itertools.count()
        self._selector = selectors.DefaultSelector()
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._selector.register(self._rfd, selectors.EVENT_READ)
        self._owner = threading.get_ident()
        self._stopping = False
        self._before = getattr(_local, "loop", None)
        _local.loop = self

    @staticmethod
    def current() -> "IOLoop":
        loop = getattr(_local, "loop", None)
        if loop is None:
            loop = IOLoop()  # __init__ makes it current
        return loop

    def time(self) -> float:
        return time.monotonic()

    def add_callback(self, callback, *args, **kwargs) -> None:
        foreign = threading.get_ident() != self._owner
        with self._mutex:
            if self._closed:
                return
            ring = foreign and not self._pending
            self._pending.append((callback, args, kwargs))
            if ring:
                self.wakeups_scheduled += 1
                try:
                    os.write(self._wfd, b"\0")
                except (BlockingIOError, InterruptedError):
                    pass  # the pipe is full of unread wakeups

    def add_future(self, future: Future, callback) -> None:
        future.add_done_callback(lambda f: self.add_callback(callback, f))

    def call_later(self, delay: float, callback, *args, **kwargs) -> object:
        if delay != delay:  # NaN: due at once (it would not sort)
            delay = 0.0
        handle = _Handle(functools.partial(callback, *args, **kwargs))
        handle.entry = (self.time() + delay, next(self._seq), handle)
        bisect.insort(self._timers, handle.entry)
        return handle

    def remove_timeout(self, handle: object) -> None:
        handle.fn = None
        entry = handle.entry
        if entry is None:
            return
        i = bisect.bisect_left(self._timers, entry)
        if i < len(self._timers) and self._timers[i][2] is handle:
            del self._timers[i]
        handle.entry = None

    def start(self) -> None:
        self._owner = threading.get_ident()
        saved = getattr(_local, "loop", None)
        _local.loop = self
        try:
            while not self._stopping:
                self._turn()
        finally:
            _local.loop = saved
            self._stopping = False

    def _turn(self) -> None:
        with self._mutex:
            batch, self._pending = self._pending, collections.deque()
        now = self.time()
        n = 0
        while n < len(self._timers) and self._timers[n][0] <= now:
            n += 1
        due = [entry[2] for entry in self._timers[:n]]
        del self._timers[:n]
        for handle in due:
            handle.entry = None
        while batch:
            fn, args, kwargs = batch.popleft()
            self._call(fn, *args, **kwargs)
        for handle in due:
            fn, handle.fn = handle.fn, None
            if fn is not None:
                self._call(fn)
        if self._stopping:
            return
        if self._pending:
            timeout = 0.0
        elif self._timers:
            timeout = min(max(0.0, self._timers[0][0] - self.time()), _MAX_SLEEP)
        else:
            timeout = None
        if self._selector.select(timeout):
            try:
                os.read(self._rfd, 4096)
            except (BlockingIOError, InterruptedError):
                pass

    def _call(self, fn, *args, **kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:
            log.exception("exception in callback %r", fn)

    def stop(self) -> None:
        self._stopping = True

    def run_sync(self, func, timeout: float | None = None):
        box: list[Future] = []
        timed_out = []

        def begin():
            try:
                out = func()
            except Exception as e:
                out = Future()
                out.set_exception(e)
            if not isinstance(out, Future):
                value, out = out, Future()
                out.set_result(value)
            box.append(out)
            self.add_future(out, lambda _: self.stop())

        def expire():
            timed_out.append(True)
            self.stop()

        self.add_callback(begin)
        handle = None if timeout is None else self.call_later(timeout, expire)
        self.start()
        if handle is not None:
            self.remove_timeout(handle)
        if box and box[0].done():
            return box[0].result()
        if timed_out:
            raise TimeoutError(f"operation timed out after {timeout} seconds")
        raise RuntimeError("Event loop stopped before Future completed.")

    def close(self) -> None:
        with self._mutex:
            self._closed = True
        self._selector.close()
        os.close(self._rfd)
        os.close(self._wfd)
        if getattr(_local, "loop", None) is self:
            before = self._before
            _local.loop = before if before is not None and not before._closed else None


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
            yielded = gen.send(None)
        except (StopIteration, Return) as e:
            future.set_result(e.value)
        except Exception as e:
            future.set_exception(e)
        else:
            _Runner(gen, future, yielded)
        return future

    return wrapper


class _Runner:
    """tornado's shape: handle_yield() says whether run() may go on at once."""

    def __init__(self, gen, result_future: Future, first_yielded) -> None:
        self.gen = gen
        self.result_future = result_future
        self.io_loop = IOLoop.current()
        self.future: Future | None = None
        self.running = False
        self.finished = False
        if self.handle_yield(first_yielded):
            self.run()

    def run(self) -> None:
        if self.running or self.finished:
            return
        self.running = True
        try:
            while True:
                future = self.future
                if future is None or not future.done():
                    return
                self.future = None
                try:
                    error = future.exception()
                    if error is None:
                        yielded = self.gen.send(future.result())
                    else:
                        yielded = self.gen.throw(error)
                except (StopIteration, Return) as e:
                    self._done(e.value, None)
                    return
                except Exception as e:
                    self._done(None, e)
                    return
                if not self.handle_yield(yielded):
                    return
        finally:
            self.running = False

    def _done(self, value, error) -> None:
        self.finished = True
        out, self.result_future = self.result_future, None
        if error is None:
            out.set_result(value)
        else:
            out.set_exception(error)

    def handle_yield(self, yielded) -> bool:
        if yielded is None or yielded is moment:
            placeholder = self.future = Future()

            def end_moment():
                placeholder.set_result(None)
                self.run()

            self.io_loop.add_callback(end_moment)
            return False
        try:
            if isinstance(yielded, Future):
                self.future = yielded
            elif isinstance(yielded, (list, dict)):
                self.future = _multi(yielded)
            else:
                raise BadYieldError(f"yielded unknown object {yielded!r}")
        except BadYieldError as e:
            self.future = Future()
            self.future.set_exception(e)
        if self.future.done():
            return True
        self.io_loop.add_future(self.future, lambda _: self.run())
        return False


def _multi(children):
    is_dict = isinstance(children, dict)
    keys = list(children) if is_dict else None
    futures = [children[k] for k in keys] if is_dict else list(children)
    for f in futures:
        if not isinstance(f, Future):
            raise BadYieldError(f"yielded a {type(children).__name__} holding {f!r}")
    out = Future()
    if not futures:
        out.set_result({} if is_dict else [])
        return out
    remaining = [len(futures)]

    def child_done(_):
        remaining[0] -= 1
        if remaining[0]:
            return
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            for e in errors[1:]:
                log.error("Multiple exceptions in yield list", exc_info=e)
            out.set_exception(errors[0])
        else:
            values = [f.result() for f in futures]
            out.set_result(dict(zip(keys, values)) if is_dict else values)

    for f in futures:
        f.add_done_callback(child_done)
    return out
