"""P04, written a fourth way: one Condition for the loop's state, an "again" flag for the Runner.

Differences from the reference:
* the loop's lock is a ``threading.Condition`` (an RLock inside), and a turn takes a counted
  slice of one long list instead of swapping lists;
* timeouts are a ``bisect``-sorted list of keys plus a dict of callbacks (removal pops the
  dict entry);
* the current loop lives in a ``threading.local`` held by the class;
* the Runner never loops on "is the Future done": every reason to resume it -- a done Future,
  a callback, the end of a moment -- sets ``again``; whoever holds ``busy`` keeps resuming
  while ``again`` is set (the way Twisted's inlineCallbacks handles re-entry);
* a multi fills a list of outcomes by position and reads them when the count reaches zero.
"""
from __future__ import annotations

import bisect
import functools
import itertools
import logging
import selectors
import socket
import threading
import time
import types

log = logging.getLogger("p04.condition_and_again_flag")

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


_PENDING, _OK, _FAILED = range(3)


class Future:
    def __init__(self):
        self._state = _PENDING
        self._payload = None
        self._callbacks = []

    def done(self):
        return self._state != _PENDING

    def result(self):
        if self._state == _PENDING:
            raise InvalidStateError("no result yet")
        if self._state == _FAILED:
            raise self._payload
        return self._payload

    def exception(self):
        if self._state == _PENDING:
            raise InvalidStateError("no result yet")
        return self._payload if self._state == _FAILED else None

    def add_done_callback(self, fn):
        if self._state == _PENDING:
            self._callbacks.append(fn)
        else:
            fn(self)

    def set_result(self, value):
        self._settle(_OK, value)

    def set_exception(self, exc):
        self._settle(_FAILED, exc)

    def _settle(self, state, payload):
        if self._state != _PENDING:
            raise InvalidStateError("already settled")
        self._state, self._payload = state, payload
        callbacks, self._callbacks = self._callbacks, None
        for fn in callbacks:
            try:
                fn(self)
            except Exception:
                log.exception("a done callback failed")


class IOLoop:
    _local = threading.local()

    def __init__(self):
        self._cv = threading.Condition()  # guards _calls, _closed, wakeups_scheduled
        self._calls = []
        self._closed = False
        self.wakeups_scheduled = 0
        self._timer_keys = []  # sorted (deadline, n)
        self._timer_calls = {}  # n -> callable, until fired or removed
        self._n = itertools.count()
        self._sel = selectors.DefaultSelector()
        self._bell_in, self._bell_out = socket.socketpair()
        self._bell_in.setblocking(False)
        self._bell_out.setblocking(False)
        self._sel.register(self._bell_in, selectors.EVENT_READ)
        self._owner = threading.get_ident()
        self._halt = False
        self._earlier = getattr(IOLoop._local, "loop", None)
        IOLoop._local.loop = self

    @staticmethod
    def current():
        loop = getattr(IOLoop._local, "loop", None)
        return loop if loop is not None else IOLoop()

    def time(self):
        return time.monotonic()

    def add_callback(self, callback, *args, **kwargs):
        bound = functools.partial(callback, *args, **kwargs)
        remote = threading.get_ident() != self._owner
        with self._cv:
            if self._closed:
                return
            ring = remote and len(self._calls) == 0
            self._calls.append(bound)
            if ring:
                self.wakeups_scheduled += 1
                try:
                    self._bell_out.send(b"b")
                except (BlockingIOError, InterruptedError):
                    pass

    def add_future(self, future, callback):
        future.add_done_callback(functools.partial(self._schedule_done, callback))

    def _schedule_done(self, callback, future):
        self.add_callback(callback, future)

    def call_later(self, delay, callback, *args, **kwargs):
        if delay != delay:  # NaN sorts nowhere: due at once, as in tornado
            delay = 0.0
        n = next(self._n)
        self._timer_calls[n] = functools.partial(callback, *args, **kwargs)
        bisect.insort(self._timer_keys, (self.time() + delay, n))
        return n

    def remove_timeout(self, handle):
        self._timer_calls.pop(handle, None)

    def _guarded(self, fn):
        try:
            fn()
        except Exception:
            log.exception("a callback failed")

    def start(self):
        self._owner = threading.get_ident()
        outside = getattr(IOLoop._local, "loop", None)
        IOLoop._local.loop = self
        try:
            while not self._halt:
                self._one_turn()
        finally:
            IOLoop._local.loop = outside
            self._halt = False

    def _one_turn(self):
        with self._cv:
            count = len(self._calls)
            batch = self._calls[:count]
            del self._calls[:count]
        cut = bisect.bisect_right(self._timer_keys, (self.time(), float("inf")))
        due, self._timer_keys = self._timer_keys[:cut], self._timer_keys[cut:]
        for fn in batch:
            self._guarded(fn)
        for _, n in due:
            fn = self._timer_calls.pop(n, None)
            if fn is not None:
                self._guarded(fn)
        if self._halt:
            return
        with self._cv:
            busy = bool(self._calls)
        if busy:
            timeout = 0.0
        elif self._timer_keys:
            timeout = min(max(0.0, self._timer_keys[0][0] - self.time()), _LONGEST_SLEEP)
        else:
            timeout = None
        if self._sel.select(timeout):
            try:
                self._bell_in.recv(1024)
            except (BlockingIOError, InterruptedError):
                pass

    def stop(self):
        self._halt = True

    def run_sync(self, func, timeout=None):
        holder = []

        def begin():
            try:
                got = func()
            except Exception as exc:
                got = Future()
                got.set_exception(exc)
            if not isinstance(got, Future):
                plain, got = got, Future()
                got.set_result(plain)
            holder.append(got)
            self.add_future(got, lambda _: self.stop())

        self.add_callback(begin)
        expired: list[bool] = []  # set by the timeout: a stop by anyone else differs

        def expire():
            expired.append(True)
            self.stop()

        handle = None if timeout is None else self.call_later(timeout, expire)
        self.start()
        if handle is not None:
            self.remove_timeout(handle)
        if not holder or not holder[0].done():
            if expired:
                raise TimeoutError(f"run_sync gave up after {timeout} s")
            raise RuntimeError("run_sync: the loop stopped before the Future was done")
        return holder[0].result()

    def close(self):
        with self._cv:
            self._closed = True
        self._sel.close()
        self._bell_in.close()
        self._bell_out.close()
        if getattr(IOLoop._local, "loop", None) is self:
            earlier = self._earlier
            IOLoop._local.loop = earlier if earlier is not None and not earlier._closed else None


class _Moment:
    pass


moment = _Moment()


def _gather(children):
    as_dict = isinstance(children, dict)
    names = list(children) if as_dict else range(len(children))
    parts = [children[k] for k in names]
    if not all(isinstance(p, Future) for p in parts):
        raise BadYieldError("a multi may hold only Futures")
    whole = Future()
    outcomes = [None] * len(parts)
    remaining = [len(parts)]
    if not parts:
        whole.set_result({} if as_dict else [])

    def settled(index, part):
        outcomes[index] = part
        remaining[0] -= 1
        if remaining[0]:
            return
        failed = [p.exception() for p in outcomes if p.exception() is not None]
        for extra in failed[1:]:
            log.error("a multi failed more than once", exc_info=extra)
        if failed:
            whole.set_exception(failed[0])
        else:
            values = [p.result() for p in outcomes]
            whole.set_result(dict(zip(names, values)) if as_dict else values)

    for index, part in enumerate(parts):
        part.add_done_callback(functools.partial(settled, index))
    return whole


class _Runner:
    def __init__(self, gen, outcome, first):
        self.gen, self.outcome = gen, outcome
        self.loop = IOLoop.current()
        self.waiting = None
        self.busy = False
        self.again = False
        self.ended = False
        self._wait_on(first)

    def wake(self, _future=None):
        """Something the generator waits for may be ready: resume it (here or up the stack)."""
        self.again = True
        if self.busy:
            return  # the call up the stack sees `again` and goes round once more
        self.busy = True
        try:
            while self.again and not self.ended:
                self.again = False
                if self.waiting is not None and self.waiting.done():
                    self._resume()
        finally:
            self.busy = False

    def _resume(self):
        future, self.waiting = self.waiting, None
        try:
            if future.exception() is not None:
                nxt = self.gen.throw(future.exception())
            else:
                nxt = self.gen.send(future.result())
        except (StopIteration, Return) as end:
            self.ended = True
            self.outcome.set_result(end.value)
        except Exception as exc:
            self.ended = True
            self.outcome.set_exception(exc)
        else:
            self._wait_on(nxt)

    def _wait_on(self, yielded):
        if yielded is None or yielded is moment:
            ticket = Future()
            self.waiting = ticket
            self.loop.add_callback(lambda: (ticket.set_result(None), self.wake()))
            return
        try:
            if isinstance(yielded, Future):
                future = yielded
            elif isinstance(yielded, (list, dict)):
                future = _gather(yielded)
            else:
                raise BadYieldError(f"cannot wait for {yielded!r}")
        except BadYieldError as exc:
            future = Future()
            future.set_exception(exc)
        self.waiting = future
        if future.done():
            self.wake()
        else:
            self.loop.add_future(future, self.wake)


def coroutine(func):
    @functools.wraps(func)
    def call(*args, **kwargs):
        outcome = Future()
        try:
            gen = func(*args, **kwargs)
            if not isinstance(gen, types.GeneratorType):
                outcome.set_result(gen)
                return outcome
            first = gen.send(None)
        except (StopIteration, Return) as end:
            outcome.set_result(end.value)
        except Exception as exc:
            outcome.set_exception(exc)
        else:
            _Runner(gen, outcome, first)
        return outcome

    return call
