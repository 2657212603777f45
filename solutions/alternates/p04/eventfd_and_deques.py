"""P04, written a third way: an eventfd waker, a raw lock, deques, and tornado's own multi.

Differences from the reference:
* the waker is one Linux ``eventfd`` (a counter: writes add, a read empties it), falling back
  to an ``os.pipe()`` elsewhere; the lock is a bare ``_thread`` lock;
* callbacks live in a deque that the loop swaps for an empty one at the start of a turn;
* the current loop is found in a dict keyed by thread id, not in a ``threading.local``;
* timeouts are handle objects with a ``cancelled`` flag in a heap;
* the Runner is itself the callback it registers (``__call__``), and its trampoline is a
  ``while`` loop over ``_advance()``, which returns whether to keep going;
* a multi keeps tornado's ``set`` of unfinished children (so ``yield [f, f]`` works) and
  collects results only once the set is empty.
"""
from __future__ import annotations

import _thread
import collections
import functools
import heapq
import itertools
import logging
import os
import selectors
import threading
import time
import types

log = logging.getLogger("p04.eventfd_and_deques")

# poll/epoll refuse a sleep past 2**31 - 1 ms (24.8 days) or inf: sleep at most a day.
_LONGEST_SLEEP = 24 * 3600.0


class InvalidStateError(RuntimeError):
    pass


class BadYieldError(TypeError):
    pass


class Return(Exception):
    def __init__(self, value=None):
        super().__init__(value)
        self.value = value


class Future:
    __slots__ = ("_finished", "_value", "_error", "_callbacks")

    def __init__(self):
        self._finished = False
        self._value = None
        self._error = None
        self._callbacks = collections.deque()

    def done(self):
        return self._finished

    def result(self):
        if not self._finished:
            raise InvalidStateError("pending")
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self):
        if not self._finished:
            raise InvalidStateError("pending")
        return self._error

    def add_done_callback(self, fn):
        if self._finished:
            fn(self)
        else:
            self._callbacks.append(fn)

    def set_result(self, value):
        self._finish(value, None)

    def set_exception(self, exc):
        self._finish(None, exc)

    def _finish(self, value, error):
        if self._finished:
            raise InvalidStateError("finished twice")
        self._value, self._error, self._finished = value, error, True
        pending, self._callbacks = self._callbacks, None
        while pending:
            fn = pending.popleft()
            try:
                fn(self)
            except Exception:
                log.exception("done callback %r", fn)


class _Waker:
    """One fd to sleep on, written from other threads."""

    def __init__(self):
        if hasattr(os, "eventfd"):
            self.read_fd = self.write_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._token = (1).to_bytes(8, "little")
        else:
            self.read_fd, self.write_fd = os.pipe()
            os.set_blocking(self.read_fd, False)
            os.set_blocking(self.write_fd, False)
            self._token = b"."

    def ring(self):
        try:
            os.write(self.write_fd, self._token)
        except BlockingIOError:
            pass  # the counter (or pipe) is full: the loop is due to wake anyway

    def drain(self):
        try:
            os.read(self.read_fd, 4096)
        except BlockingIOError:
            pass

    def close(self):
        os.close(self.read_fd)
        if self.write_fd != self.read_fd:
            os.close(self.write_fd)


class _Timer:
    __slots__ = ("deadline", "order", "call", "cancelled")

    def __init__(self, deadline, order, call):
        self.deadline, self.order, self.call, self.cancelled = deadline, order, call, False

    def __lt__(self, other):
        return (self.deadline, self.order) < (other.deadline, other.order)


# thread id -> (that thread, its current loop).  Ids are reused once a thread has ended,
# so an entry counts only for the very thread that made it.
_loops_by_thread: dict[int, tuple[threading.Thread, "IOLoop"]] = {}


def _get_current():
    entry = _loops_by_thread.get(threading.get_ident())
    if entry is None or entry[0] is not threading.current_thread():
        return None
    return entry[1]


def _set_current(loop):
    if loop is None:
        _loops_by_thread.pop(threading.get_ident(), None)
    else:
        _loops_by_thread[threading.get_ident()] = (threading.current_thread(), loop)


class IOLoop:
    def __init__(self):
        self._guard = _thread.allocate_lock()  # guards _queue, _is_closed, wakeups_scheduled
        self._queue = collections.deque()
        self._is_closed = False
        self.wakeups_scheduled = 0
        self._timers = []
        self._orders = itertools.count()
        self._waker = _Waker()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._waker.read_fd, selectors.EVENT_READ)
        self._thread_id = threading.get_ident()
        self._stopping = False
        self._replaced = _get_current()
        _set_current(self)

    @staticmethod
    def current():
        loop = _get_current()
        if loop is None:
            loop = IOLoop()  # registers itself
        return loop

    def time(self):
        return time.monotonic()

    def add_callback(self, callback, *args, **kwargs):
        item = functools.partial(callback, *args, **kwargs)
        elsewhere = threading.get_ident() != self._thread_id
        with self._guard:
            if self._is_closed:
                return
            first = not self._queue
            self._queue.append(item)
            if first and elsewhere:
                self.wakeups_scheduled += 1
                self._waker.ring()

    def add_future(self, future, callback):
        future.add_done_callback(lambda done: self.add_callback(callback, done))

    def call_later(self, delay, callback, *args, **kwargs):
        if delay != delay:  # NaN would stall the heap: due at once, as in tornado
            delay = 0.0
        timer = _Timer(self.time() + delay, next(self._orders),
                       functools.partial(callback, *args, **kwargs))
        heapq.heappush(self._timers, timer)
        return timer

    def remove_timeout(self, handle):
        handle.cancelled = True

    def _call(self, fn):
        try:
            fn()
        except Exception:
            log.exception("callback %r", fn)

    def start(self):
        self._thread_id = threading.get_ident()
        before = _get_current()
        _set_current(self)
        try:
            while not self._stopping:
                self._turn()
        finally:
            self._stopping = False
            _set_current(before)

    def _turn(self):
        with self._guard:
            batch, self._queue = self._queue, collections.deque()
        now = self.time()
        due = []
        while self._timers and self._timers[0].deadline <= now:
            due.append(heapq.heappop(self._timers))
        for fn in batch:
            self._call(fn)
        for timer in due:
            if not timer.cancelled:
                self._call(timer.call)
        if self._stopping:
            return
        if self._queue:
            wait = 0.0
        elif self._timers:
            wait = min(max(0.0, self._timers[0].deadline - self.time()), _LONGEST_SLEEP)
        else:
            wait = None
        if self._selector.select(wait):
            self._waker.drain()

    def stop(self):
        self._stopping = True

    def run_sync(self, func, timeout=None):
        cell = {}

        def launch():
            try:
                got = func()
            except Exception as exc:
                got = Future()
                got.set_exception(exc)
            if not isinstance(got, Future):
                plain, got = got, Future()
                got.set_result(plain)
            cell["future"] = got
            self.add_future(got, lambda _: self.stop())

        self.add_callback(launch)
        expired: list[bool] = []  # set by the timeout: a stop by anyone else differs

        def expire():
            expired.append(True)
            self.stop()

        timer = self.call_later(timeout, expire) if timeout is not None else None
        self.start()
        if timer is not None:
            self.remove_timeout(timer)
        future = cell.get("future")
        if future is None or not future.done():
            if expired:
                raise TimeoutError(f"not done after {timeout} s")
            raise RuntimeError("run_sync: the loop stopped before the Future was done")
        return future.result()

    def close(self):
        with self._guard:
            if self._is_closed:  # closed already: its descriptor numbers may be another's by now
                return
            self._is_closed = True
        self._selector.close()
        self._waker.close()
        if _get_current() is self:
            older = self._replaced
            _set_current(older if older is not None and not older._is_closed else None)


class _Moment:
    pass


moment = _Moment()


def _multi(children):
    keyed = isinstance(children, dict)
    keys = list(children) if keyed else None
    futures = list(children.values()) if keyed else list(children)
    for f in futures:
        if not isinstance(f, Future):
            raise BadYieldError(f"a multi holds {f!r}")
    unfinished = set(futures)
    combined = Future()
    if not futures:
        combined.set_result({} if keyed else [])

    def child_done(child):
        unfinished.discard(child)
        if unfinished or combined.done():
            return
        values, first_error = [], None
        for f in futures:
            error = f.exception()
            if error is None:
                values.append(f.result())
            elif first_error is None:
                first_error = error
            elif error is not first_error:
                log.error("Multiple exceptions in yield list", exc_info=error)
        if first_error is not None:
            combined.set_exception(first_error)
        else:
            combined.set_result(dict(zip(keys, values)) if keyed else values)

    for f in set(futures):
        f.add_done_callback(child_done)
    return combined


class _Runner:
    def __init__(self, gen, outcome, first):
        self.gen, self.outcome = gen, outcome
        self.loop = IOLoop.current()
        self.awaiting = None
        self.active = False
        self.over = False
        self._await(first)
        self()

    def __call__(self, _future=None):
        """Registered as the callback for whatever the generator waits on."""
        if self.active or self.over:
            return
        self.active = True
        try:
            while self._advance():
                pass
        finally:
            self.active = False

    def _advance(self):
        """Resume the generator once if what it waits for is done; True to go on."""
        future = self.awaiting
        if self.over or future is None or not future.done():
            return False
        self.awaiting = None
        try:
            if future.exception() is not None:
                nxt = self.gen.throw(future.exception())
            else:
                nxt = self.gen.send(future.result())
        except (StopIteration, Return) as stop:
            self.over = True
            self.outcome.set_result(stop.value)
            return False
        except Exception as exc:
            self.over = True
            self.outcome.set_exception(exc)
            return False
        return self._await(nxt)

    def _await(self, yielded):
        """Point ``awaiting`` at what was yielded; True if it is done already."""
        if yielded is None or yielded is moment:
            self.awaiting = Future()
            self.loop.add_callback(self._after_moment, self.awaiting)
            return False
        try:
            if isinstance(yielded, Future):
                future = yielded
            elif isinstance(yielded, (list, dict)):
                future = _multi(yielded)
            else:
                raise BadYieldError(f"yielded unknown object {yielded!r}")
        except BadYieldError as exc:
            future = Future()
            future.set_exception(exc)
        self.awaiting = future
        if future.done():
            return True
        self.loop.add_future(future, self)
        return False

    def _after_moment(self, ticket):
        ticket.set_result(None)
        self()


def coroutine(func):
    @functools.wraps(func)
    def start(*args, **kwargs):
        outcome = Future()
        try:
            gen = func(*args, **kwargs)
            if not isinstance(gen, types.GeneratorType):
                outcome.set_result(gen)
                return outcome
            first = next(gen)
        except (StopIteration, Return) as stop:
            outcome.set_result(stop.value)
        except Exception as exc:
            outcome.set_exception(exc)
        else:
            _Runner(gen, outcome, first)
        return outcome

    return start
