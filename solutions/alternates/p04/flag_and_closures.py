"""P04, written differently again: a wakeup flag instead of "was the list empty", and a
Runner made of closures.

* The loop keeps a ``wake_pending`` flag (P01's "in flight" flag): the first add_callback
  after the loop took the callbacks sets it (and, from another thread, writes the waker
  byte); the loop clears it when it takes the callbacks.  Both under a Condition's lock.
  The loop thread's own calls set it too: they leave the list non-empty, and a call from
  another thread then must not write (the loop looks at the list before it sleeps).
* The coroutine driver is a closure over the generator with a ``busy``/``again`` pair, the
  way Twisted's inlineCallbacks turns re-entry into another pass of its loop.
* Timeouts are a dict of handles plus a heap of ids; futures keep callbacks in a tuple.
"""
from __future__ import annotations

import functools
import heapq
import logging
import selectors
import socket
import threading
import time
import types

logger = logging.getLogger("p04.flag_and_closures")

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


_UNSET = object()


class Future:
    def __init__(self):
        self._outcome = _UNSET  # ("ok", value) or ("err", exception)
        self._listeners = ()

    def done(self):
        return self._outcome is not _UNSET

    def result(self):
        kind, payload = self._get()
        if kind == "err":
            raise payload
        return payload

    def exception(self):
        kind, payload = self._get()
        return payload if kind == "err" else None

    def _get(self):
        if self._outcome is _UNSET:
            raise InvalidStateError("not done")
        return self._outcome

    def add_done_callback(self, fn):
        if self.done():
            fn(self)
        else:
            self._listeners += (fn,)

    def set_result(self, value):
        self._finish(("ok", value))

    def set_exception(self, exc):
        self._finish(("err", exc))

    def _finish(self, outcome):
        if self.done():
            raise InvalidStateError("done already")
        self._outcome = outcome
        listeners, self._listeners = self._listeners, ()
        for fn in listeners:
            try:
                fn(self)
            except Exception:
                logger.exception("listener %r raised", fn)


_threads = threading.local()


class IOLoop:
    def __init__(self):
        self._cond = threading.Condition(threading.Lock())  # guards _pending, _wake_pending, _shut
        self._pending = []
        self._wake_pending = False
        self._shut = False
        self.wakeups_scheduled = 0
        self._handles = {}  # id -> callable, for timeouts not yet fired or removed
        self._heap = []  # (deadline, id)
        self._next_id = 0
        self._selector = selectors.DefaultSelector()
        self._rsock, self._wsock = socket.socketpair()
        for s in (self._rsock, self._wsock):
            s.setblocking(False)
        self._selector.register(self._rsock, selectors.EVENT_READ)
        self._loop_thread = threading.get_ident()
        self._halt = False
        self._before = getattr(_threads, "loop", None)  # current until this one existed
        _threads.loop = self

    @staticmethod
    def current():
        loop = getattr(_threads, "loop", None)
        if loop is None:
            loop = _threads.loop = IOLoop()
        return loop

    def time(self):
        return time.monotonic()

    def _ring(self):
        try:
            self._wsock.send(b"!")
        except (BlockingIOError, InterruptedError):
            pass

    def add_callback(self, callback, *args, **kwargs):
        foreign = threading.get_ident() != self._loop_thread
        with self._cond:
            if self._shut:
                return  # nobody will run it
            self._pending.append(functools.partial(callback, *args, **kwargs))
            if not self._wake_pending:  # the first since the loop took the list
                self._wake_pending = True
                if foreign:
                    self.wakeups_scheduled += 1
                    self._ring()

    def add_future(self, future, callback):
        future.add_done_callback(functools.partial(self._future_done, callback))

    def _future_done(self, callback, future):
        self.add_callback(callback, future)

    def call_later(self, delay, callback, *args, **kwargs):
        if delay != delay:  # NaN would stall the heap: due at once, as in tornado
            delay = 0.0
        self._next_id += 1
        handle = self._next_id
        self._handles[handle] = functools.partial(callback, *args, **kwargs)
        heapq.heappush(self._heap, (self.time() + delay, handle))
        return handle

    def remove_timeout(self, handle):
        self._handles.pop(handle, None)

    @staticmethod
    def _invoke(fn):
        try:
            fn()
        except Exception:
            logger.exception("callback %r raised", fn)

    def start(self):
        self._loop_thread = threading.get_ident()
        outer, _threads.loop = getattr(_threads, "loop", None), self
        try:
            self._turns()
        finally:
            _threads.loop = outer
            self._halt = False  # even if an exception left a turn: the loop can run again

    def _turns(self):
        while not self._halt:
            with self._cond:
                batch, self._pending = self._pending, []
                self._wake_pending = False  # anyone who appends from now on must ring again
            now = self.time()
            due = []
            while self._heap and self._heap[0][0] <= now:
                due.append(heapq.heappop(self._heap)[1])
            for fn in batch:
                self._invoke(fn)
            for handle in due:
                fn = self._handles.pop(handle, None)  # None: removed meanwhile
                if fn is not None:
                    self._invoke(fn)
            if self._halt:
                break
            with self._cond:
                busy = bool(self._pending)
            if busy:
                wait = 0
            elif self._heap:
                wait = min(max(0.0, self._heap[0][0] - self.time()), _LONGEST_SLEEP)
            else:
                wait = None
            if self._selector.select(wait):
                try:
                    self._rsock.recv(512)
                except (BlockingIOError, InterruptedError):
                    pass

    def stop(self):
        self._halt = True

    def run_sync(self, func, timeout=None):
        box = []

        def kick():
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

        self.add_callback(kick)
        expired: list[bool] = []  # set by the timeout: a stop by anyone else differs

        def expire():
            expired.append(True)
            self.stop()

        guard = self.call_later(timeout, expire) if timeout is not None else None
        self.start()
        if guard is not None:
            self.remove_timeout(guard)
        if not box or not box[0].done():
            if expired:
                raise TimeoutError("run_sync timed out")
            raise RuntimeError("run_sync: the loop stopped before the Future was done")
        return box[0].result()

    def close(self):
        with self._cond:
            self._shut = True
        self._selector.close()
        self._rsock.close()
        self._wsock.close()
        if getattr(_threads, "loop", None) is self:
            before = self._before
            _threads.loop = before if before is not None and not before._shut else None


class _Moment:
    pass


moment = _Moment()


def _as_future(obj):
    if isinstance(obj, Future):
        return obj
    if isinstance(obj, (list, dict)):
        items = list(obj.items()) if isinstance(obj, dict) else list(enumerate(obj))
        if not all(isinstance(f, Future) for _, f in items):
            raise BadYieldError("only Futures in a multi")
        combined = Future()

        def check(_child):
            if combined.done() or not all(f.done() for _, f in items):
                return
            errors = [f.exception() for _, f in items if f.exception() is not None]
            for extra in errors[1:]:
                logger.error("a multi had more than one failure", exc_info=extra)
            if errors:
                combined.set_exception(errors[0])
            else:
                values = [f.result() for _, f in items]
                combined.set_result(dict(zip([k for k, _ in items], values))
                                    if isinstance(obj, dict) else values)

        if not items:
            combined.set_result({} if isinstance(obj, dict) else [])
        for _, f in items:
            f.add_done_callback(check)
        return combined
    raise BadYieldError(f"cannot wait for {obj!r}")


def _drive(gen, outcome, first):
    loop = IOLoop.current()
    state = {"waiting_on": None, "busy": False, "finished": False}

    def wait_for(yielded):
        if yielded is None or yielded is moment:
            ticket = Future()
            state["waiting_on"] = ticket
            loop.add_callback(lambda: (ticket.set_result(None), advance()))
            return
        try:
            fut = _as_future(yielded)
        except BadYieldError as e:
            fut = Future()
            fut.set_exception(e)
        state["waiting_on"] = fut
        if fut.done():
            advance()  # when called from advance() itself, `busy` makes this a no-op
        else:
            loop.add_future(fut, lambda _: advance())

    def advance():
        if state["busy"] or state["finished"]:
            return
        state["busy"] = True
        try:
            while not state["finished"] and state["waiting_on"].done():
                fut, state["waiting_on"] = state["waiting_on"], None
                try:
                    if fut.exception() is not None:
                        nxt = gen.throw(fut.exception())
                    else:
                        nxt = gen.send(fut.result())
                except (StopIteration, Return) as e:
                    state["finished"] = True
                    outcome.set_result(e.value)
                except Exception as e:
                    state["finished"] = True
                    outcome.set_exception(e)
                else:
                    wait_for(nxt)
        finally:
            state["busy"] = False

    wait_for(first)


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
        except (StopIteration, Return) as e:
            outcome.set_result(e.value)
            return outcome
        except Exception as e:
            outcome.set_exception(e)
            return outcome
        _drive(gen, outcome, first)
        return outcome

    return call
