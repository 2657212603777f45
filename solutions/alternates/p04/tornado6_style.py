"""P04, written differently: shaped like tornado 6's own code.

Differences from the reference: the Runner's handle_yield() returns True when the Future is
already done and run() loops on that (tornado 6's shape); the loop keeps its callbacks in a
deque and runs a counted snapshot of it; timeouts live in a sorted list; the waker is an
os.pipe(); the lock is an RLock; a multi fills a pre-sized list of children by position.
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

app_log = logging.getLogger("p04.alternate")

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


_PENDING, _FINISHED = "pending", "finished"


class Future:
    def __init__(self):
        self._state = _PENDING
        self._value = None
        self._error = None
        self._waiters = collections.deque()

    def done(self):
        return self._state == _FINISHED

    def _check(self):
        if self._state == _PENDING:
            raise InvalidStateError("Future is pending")

    def result(self):
        self._check()
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self):
        self._check()
        return self._error

    def add_done_callback(self, fn):
        if self._state == _FINISHED:
            fn(self)
        else:
            self._waiters.append(fn)

    def set_result(self, value):
        self._settle(value=value)

    def set_exception(self, exc):
        self._settle(error=exc)

    def _settle(self, value=None, error=None):
        if self._state == _FINISHED:
            raise InvalidStateError("Future already finished")
        self._state, self._value, self._error = _FINISHED, value, error
        while self._waiters:
            fn = self._waiters.popleft()
            try:
                fn(self)
            except Exception:
                app_log.exception("done callback %r failed", fn)


_local = threading.local()


class IOLoop:
    def __init__(self):
        self._mutex = threading.RLock()  # guards _queue, _closing, wakeups_scheduled
        self._queue = collections.deque()
        self._closing = False
        self.wakeups_scheduled = 0
        self._timers = []  # sorted list of [deadline, seq, callback-or-None]
        self._counter = itertools.count()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._read_fd, selectors.EVENT_READ)
        self._owner = threading.get_ident()
        self._stop_requested = False
        self._made_over = getattr(_local, "instance", None)
        _local.instance = self

    @staticmethod
    def current():
        if getattr(_local, "instance", None) is None:
            _local.instance = IOLoop()
        return _local.instance

    def time(self):
        return time.monotonic()

    def add_callback(self, callback, *args, **kwargs):
        call = functools.partial(callback, *args, **kwargs)
        with self._mutex:
            if self._closing:
                return
            was_empty = len(self._queue) == 0
            self._queue.append(call)
            if was_empty and threading.get_ident() != self._owner:
                self.wakeups_scheduled += 1
                try:
                    os.write(self._write_fd, b"w")
                except BlockingIOError:
                    pass

    def add_future(self, future, callback):
        future.add_done_callback(lambda f: self.add_callback(callback, f))

    def call_later(self, delay, callback, *args, **kwargs):
        if delay != delay:  # NaN sorts nowhere: due at once, as in tornado
            delay = 0.0
        entry = [self.time() + delay, next(self._counter),
                 functools.partial(callback, *args, **kwargs)]
        bisect.insort(self._timers, entry)
        return entry

    def remove_timeout(self, handle):
        handle[2] = None

    def _safely(self, call):
        try:
            call()
        except Exception:
            app_log.exception("callback %r failed", call)

    def start(self):
        self._owner = threading.get_ident()
        saved = getattr(_local, "instance", None)
        _local.instance = self
        try:
            self._run_forever()
        finally:
            _local.instance = saved
            self._stop_requested = False  # even if an exception left a turn

    def _run_forever(self):
        while not self._stop_requested:
            with self._mutex:
                count = len(self._queue)
            now = self.time()
            due = 0
            while due < len(self._timers) and self._timers[due][0] <= now:
                due += 1
            fired, self._timers = self._timers[:due], self._timers[due:]
            for _ in range(count):  # only what was there when the turn began
                with self._mutex:
                    call = self._queue.popleft()
                self._safely(call)
            for entry in fired:
                if entry[2] is not None:  # read now: a callback may have removed it
                    self._safely(entry[2])
            if self._stop_requested:
                break
            if self._queue:
                timeout = 0
            elif self._timers:
                timeout = min(max(0.0, self._timers[0][0] - self.time()), _LONGEST_SLEEP)
            else:
                timeout = None
            if self._selector.select(timeout):
                try:
                    os.read(self._read_fd, 1024)
                except BlockingIOError:
                    pass

    def stop(self):
        self._stop_requested = True

    def run_sync(self, func, timeout=None):
        holder = {}

        def go():
            try:
                out = func()
            except Exception as e:
                out = Future()
                out.set_exception(e)
            if not isinstance(out, Future):
                f = Future()
                f.set_result(out)
                out = f
            holder["future"] = out
            self.add_future(out, lambda f: self.stop())

        self.add_callback(go)
        expired: list[bool] = []  # set by the timeout: a stop by anyone else differs

        def expire():
            expired.append(True)
            self.stop()

        timer = None if timeout is None else self.call_later(timeout, expire)
        self.start()
        if timer is not None:
            self.remove_timeout(timer)
        future = holder.get("future")
        if future is None or not future.done():
            if expired:
                raise TimeoutError("timed out")
            raise RuntimeError("run_sync: the loop stopped before the Future was done")
        return future.result()

    def close(self):
        with self._mutex:
            if self._closing:  # closed already: its descriptor numbers may be another's by now
                return
            self._closing = True
        self._selector.close()
        os.close(self._read_fd)
        os.close(self._write_fd)
        if getattr(_local, "instance", None) is self:
            older = self._made_over
            _local.instance = None if older is None or older._closing else older


class _Moment:
    pass


moment = _Moment()


def coroutine(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        future = Future()
        try:
            result = func(*args, **kwargs)
        except (Return, StopIteration) as e:
            future.set_result(getattr(e, "value", None))
            return future
        except Exception as e:
            future.set_exception(e)
            return future
        if not isinstance(result, types.GeneratorType):
            future.set_result(result)
            return future
        try:
            yielded = result.send(None)
        except (Return, StopIteration) as e:
            future.set_result(getattr(e, "value", None))
        except Exception as e:
            future.set_exception(e)
        else:
            Runner(result, future, yielded)
        return future

    return wrapper


def _convert(yielded):
    if isinstance(yielded, Future):
        return yielded
    if isinstance(yielded, (list, dict)):
        return _multi(yielded)
    raise BadYieldError("yielded unknown object %r" % (yielded,))


def _multi(children):
    is_dict = isinstance(children, dict)
    keys = list(children.keys()) if is_dict else None
    futures = list(children.values()) if is_dict else list(children)
    if any(not isinstance(f, Future) for f in futures):
        raise BadYieldError("a multi may only hold Futures")
    out = Future()
    slots = [None] * len(futures)
    left = [len(futures)]

    def make_callback(position):
        def callback(child):
            slots[position] = child
            left[0] -= 1
            if left[0]:
                return
            errors = [f.exception() for f in slots if f.exception() is not None]
            for extra in errors[1:]:
                app_log.error("Multiple exceptions in yield list", exc_info=extra)
            if errors:
                out.set_exception(errors[0])
            else:
                values = [f.result() for f in slots]
                out.set_result(dict(zip(keys, values)) if is_dict else values)
        return callback

    if not futures:
        out.set_result({} if is_dict else [])
    for position, f in enumerate(futures):
        f.add_done_callback(make_callback(position))
    return out


class Runner:
    def __init__(self, gen, result_future, first_yielded):
        self.gen = gen
        self.result_future = result_future
        self.future = None
        self.running = False
        self.finished = False
        self.io_loop = IOLoop.current()
        if self.handle_yield(first_yielded):
            self.run()

    def run(self):
        if self.running or self.finished:
            return
        try:
            self.running = True
            while True:
                future = self.future
                if not future.done():
                    return
                self.future = None
                try:
                    error = future.exception()
                    if error is not None:
                        yielded = self.gen.throw(error)
                    else:
                        yielded = self.gen.send(future.result())
                except (StopIteration, Return) as e:
                    self.finished = True
                    self.result_future.set_result(getattr(e, "value", None))
                    return
                except Exception as e:
                    self.finished = True
                    self.result_future.set_exception(e)
                    return
                if not self.handle_yield(yielded):
                    return
        finally:
            self.running = False

    def handle_yield(self, yielded):
        if yielded is None or yielded is moment:
            self.future = Future()
            ticket = self.future

            def after_moment():
                ticket.set_result(None)
                self.run()

            self.io_loop.add_callback(after_moment)
            return False
        try:
            self.future = _convert(yielded)
        except BadYieldError as e:
            self.future = Future()
            self.future.set_exception(e)
        if not self.future.done():
            self.io_loop.add_future(self.future, lambda f: self.run())
            return False
        return True
