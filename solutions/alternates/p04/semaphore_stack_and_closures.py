"""P04, written a fifth way: a binary semaphore for a lock, a stack of current loops, closures.

Differences from the reference:
* the loop's critical sections are guarded by ``threading.Semaphore(1)``, not a Lock;
* the waker is a raw ``os.pipe()``;
* each thread keeps a *stack* of current loops: ``IOLoop()`` and ``start()`` push, ``start()``
  pops when it returns, ``close()`` takes the loop out wherever it is; the top is current;
* a Future keeps its callbacks in a dict (insertion-ordered) keyed by a counter;
* the Runner is a handful of closures sharing ``nonlocal`` state, with a ``driving`` flag.
"""
from __future__ import annotations

import functools
import heapq
import itertools
import logging
import os
import selectors
import threading
import time
import types

log = logging.getLogger("p04.semaphore_stack_and_closures")

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


_NOTHING = object()


class Future:
    def __init__(self):
        self._value = _NOTHING
        self._error = None
        self._waiting = {}
        self._keys = itertools.count()

    def done(self):
        return self._value is not _NOTHING or self._error is not None

    def result(self):
        if not self.done():
            raise InvalidStateError("not done")
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self):
        if not self.done():
            raise InvalidStateError("not done")
        return self._error

    def add_done_callback(self, fn):
        if self.done():
            fn(self)
        else:
            self._waiting[next(self._keys)] = fn

    def set_result(self, value):
        if self.done():
            raise InvalidStateError("done already")
        self._value = value
        self._notify()

    def set_exception(self, exc):
        if self.done():
            raise InvalidStateError("done already")
        self._value, self._error = None, exc
        self._notify()

    def _notify(self):
        waiting, self._waiting = self._waiting, {}
        for fn in waiting.values():
            try:
                fn(self)
            except Exception:
                log.exception("done callback raised")


_stacks = threading.local()


def _stack() -> list:
    if not hasattr(_stacks, "loops"):
        _stacks.loops = []
    return _stacks.loops


class IOLoop:
    def __init__(self):
        self._mutex = threading.Semaphore(1)  # guards _todo, _closed, wakeups_scheduled
        self._todo = []
        self._closed = False
        self.wakeups_scheduled = 0
        self._timeouts = []  # heap of [deadline, n, callable or None]
        self._count = itertools.count()
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._r, selectors.EVENT_READ)
        self._thread = threading.get_ident()
        self._stop = False
        _stack().append(self)

    @staticmethod
    def current():
        loops = _stack()
        return loops[-1] if loops else IOLoop()

    def time(self):
        return time.monotonic()

    def add_callback(self, callback, *args, **kwargs):
        job = functools.partial(callback, *args, **kwargs)
        foreign = threading.get_ident() != self._thread
        with self._mutex:
            if self._closed:
                return
            wake = foreign and not self._todo
            self._todo.append(job)
            if wake:
                self.wakeups_scheduled += 1
                try:
                    os.write(self._w, b"1")
                except BlockingIOError:
                    pass

    def add_future(self, future, callback):
        future.add_done_callback(lambda f: self.add_callback(callback, f))

    def call_later(self, delay, callback, *args, **kwargs):
        if delay != delay:  # NaN would stall the heap: due at once, as in tornado
            delay = 0.0
        entry = [self.time() + delay, next(self._count), functools.partial(callback, *args, **kwargs)]
        heapq.heappush(self._timeouts, entry)
        return entry

    def remove_timeout(self, handle):
        handle[2] = None

    @staticmethod
    def _run_one(job):
        try:
            job()
        except Exception:
            log.exception("callback raised")

    def start(self):
        self._thread = threading.get_ident()
        loops = _stack()
        loops.append(self)
        try:
            while not self._stop:
                with self._mutex:
                    jobs, self._todo = self._todo, []
                now = self.time()
                due = []
                while self._timeouts and self._timeouts[0][0] <= now:
                    due.append(heapq.heappop(self._timeouts))
                for job in jobs:
                    self._run_one(job)
                for entry in due:
                    if entry[2] is not None:
                        self._run_one(entry[2])
                if self._stop:
                    break
                self._sleep()
        finally:
            self._stop = False
            loops.pop()

    def _sleep(self):
        if self._todo:
            wait = 0.0
        elif self._timeouts:
            wait = min(max(0.0, self._timeouts[0][0] - self.time()), _LONGEST_SLEEP)
        else:
            wait = None
        if self._selector.select(wait):
            try:
                os.read(self._r, 4096)
            except BlockingIOError:
                pass

    def stop(self):
        self._stop = True

    def run_sync(self, func, timeout=None):
        out = []

        def first():
            try:
                result = func()
            except Exception as exc:
                result = Future()
                result.set_exception(exc)
            if not isinstance(result, Future):
                value, result = result, Future()
                result.set_result(value)
            out.append(result)
            self.add_future(result, lambda _: self.stop())

        self.add_callback(first)
        expired: list[bool] = []  # set by the timeout: a stop by anyone else differs

        def expire():
            expired.append(True)
            self.stop()

        deadline = self.call_later(timeout, expire) if timeout is not None else None
        self.start()
        if deadline is not None:
            self.remove_timeout(deadline)
        if not out or not out[0].done():
            if expired:
                raise TimeoutError(f"not finished after {timeout} s")
            raise RuntimeError("run_sync: the loop stopped before the Future was done")
        return out[0].result()

    def close(self):
        with self._mutex:
            if self._closed:  # closed already: its descriptor numbers may be another's by now
                return
            self._closed = True
        self._selector.close()
        os.close(self._r)
        os.close(self._w)
        loops = _stack()
        loops[:] = [loop for loop in loops if loop is not self]


class _Moment:
    pass


moment = _Moment()


def _all_of(children):
    is_dict = isinstance(children, dict)
    keys = list(children) if is_dict else None
    members = list(children.values()) if is_dict else list(children)
    if any(not isinstance(m, Future) for m in members):
        raise BadYieldError("a multi may only hold Futures")
    result = Future()
    left = len(members)
    if not members:
        result.set_result({} if is_dict else [])

    def one_done(_):
        nonlocal left
        left -= 1
        if left:
            return
        errors = [m.exception() for m in members if m.exception() is not None]
        if errors:
            for other in errors[1:]:
                log.error("more than one child of a multi failed", exc_info=other)
            result.set_exception(errors[0])
        else:
            values = [m.result() for m in members]
            result.set_result(dict(zip(keys, values)) if is_dict else values)

    for m in members:
        m.add_done_callback(one_done)
    return result


def _run_generator(gen, outcome, first):
    loop = IOLoop.current()
    current = None
    driving = False
    over = False

    def drive(_=None):
        nonlocal current, driving, over
        if driving or over:
            return
        driving = True
        try:
            while not over and current is not None and current.done():
                done, current = current, None
                try:
                    error = done.exception()
                    yielded = gen.throw(error) if error is not None else gen.send(done.result())
                except (StopIteration, Return) as stop:
                    over = True
                    outcome.set_result(stop.value)
                except Exception as exc:
                    over = True
                    outcome.set_exception(exc)
                else:
                    follow(yielded)
        finally:
            driving = False

    def follow(yielded):
        nonlocal current
        if yielded is None or yielded is moment:
            current = Future()
            loop.add_callback(end_moment, current)
            return
        try:
            if isinstance(yielded, Future):
                current = yielded
            elif isinstance(yielded, (list, dict)):
                current = _all_of(yielded)
            else:
                raise BadYieldError(f"yielded {yielded!r}")
        except BadYieldError as exc:
            current = Future()
            current.set_exception(exc)
        if current.done():
            drive()
        else:
            loop.add_future(current, drive)

    def end_moment(ticket):
        ticket.set_result(None)
        drive()

    follow(first)


def coroutine(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
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
            _run_generator(gen, outcome, first)
        return outcome

    return wrapper
