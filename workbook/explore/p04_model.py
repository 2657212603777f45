"""P04 exploration: a sequential model of the contract -- Future, IOLoop, coroutine and its
Runner -- with the API of the learner's module, so that ``p04_program`` runs the same program
on both.

The model is the spec written as code (tests/p04/CONTRACT.md): a Future runs its callbacks
inline, once each, in order, logging one that fails; a turn of the loop takes the callbacks
queued and the timeouts due when it begins, runs the callbacks then the timeouts (in
deadline order, then ``call_later`` order), and sleeps; ``run_sync`` runs ``func`` in a
callback and stops the loop with ``add_future``; the Runner resumes a generator with
``send``/``throw``, continues at once past a done Future, steps aside for one turn on
``moment``/``None``, gathers a list or dict in yield order.

What is not sequential -- when callbacks from other threads arrive, how long the loop sleeps,
the clock -- is asked of a ``driver`` (``p04_judge.Driver``), which answers from the run being
judged and checks, at each question, that the answer is one the contract allows.  A
BaseException that is not an Exception on its way out of a callback or a generator raises
``Relax``: the contract leaves what follows open.
"""
from __future__ import annotations

import functools
import heapq
import itertools
import math
import types
from typing import Any, Callable

from workbook.explore.p04_program import Passing, Relax


class InvalidStateError(RuntimeError):
    pass


class BadYieldError(TypeError):
    pass


class Return(Exception):
    def __init__(self, value: Any = None) -> None:
        super().__init__(value)
        self.value = value


class Model:
    """The state the model's objects share: the clock, each thread's current loop, which
    thread is running, the expected log records, and the driver."""

    active: "Model | None" = None

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.now = 0.0
        self.thread = "setup"
        self.current: dict[str, Any] = {}
        self.seq = itertools.count()
        self.log_base = False  # a callback's BaseException: logged, not let out
        # A NaN delay: due at once (tornado's reading), or never (the other one the contract
        # allows: it says only "in deadline order, never early", and NaN has no order).
        self.nan_never = False
        # run_sync's timeout falling due once main's Future is done: it stops the loop in
        # its own turn (tornado), or leaves the stop to the Future's callback a turn later.
        self.done_stops_later = False


def _m() -> Model:
    return Model.active  # type: ignore[return-value]


def _guarded(fn: Callable[[], Any]) -> None:
    """Run a callback as the contract says: an Exception is logged and the caller goes on;
    any other BaseException leaves the contract's exact events."""
    try:
        fn()
    except Passing:
        raise
    except Exception as exc:  # noqa: BLE001 - logged, as the contract says
        _m().driver.log(exc)
    except BaseException as exc:  # noqa: BLE001
        m = _m()
        if m.log_base:  # the other reading: logged like any failure (asyncio's Handle)
            m.driver.log(exc)
            return
        raise Relax(exc) from None


class Future:
    def __init__(self) -> None:
        self._done = False
        self._result: Any = None
        self._exception: BaseException | None = None
        self._callbacks: list | None = []

    def done(self) -> bool:
        return self._done

    def result(self) -> Any:
        if not self._done:
            raise InvalidStateError("not done")
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self) -> BaseException | None:
        if not self._done:
            raise InvalidStateError("not done")
        return self._exception

    def add_done_callback(self, fn: Callable[[Any], Any]) -> None:
        if self._done:
            fn(self)
        else:
            self._callbacks.append(fn)  # type: ignore[union-attr]

    def set_result(self, value: Any) -> None:
        self._complete(value, None)

    def set_exception(self, exc: BaseException) -> None:
        self._complete(None, exc)

    def _complete(self, value: Any, exc: BaseException | None) -> None:
        if self._done:
            raise InvalidStateError("done already")
        self._result, self._exception, self._done = value, exc, True
        callbacks, self._callbacks = self._callbacks, None
        for fn in callbacks:  # type: ignore[union-attr]
            _guarded(functools.partial(fn, self))


class Entry:
    """A callback in a loop's list, with what the driver needs to place it in time."""
    __slots__ = ("fn", "visible", "name", "lo", "hi", "cross")

    def __init__(self, fn: Callable[[], Any], visible: bool = True, name: str = "",
                 cross: Any = None) -> None:
        self.fn, self.visible, self.name, self.cross = fn, visible, name, cross
        self.lo: float = 0.0  # the instant it was appended lies in (lo, hi), in event steps
        self.hi: float = math.inf


class Timer:
    __slots__ = ("fn", "deadline", "removed", "name", "visible")

    def __init__(self, fn: Callable[[], Any], deadline: float, name: str) -> None:
        self.fn, self.deadline, self.removed, self.name = fn, deadline, False, name
        self.visible = True  # False: it records nothing when it runs (run_sync's own)


class IOLoop:
    """The loop of the contract; its turns are driven (see the module docstring)."""

    def __init__(self) -> None:
        m = _m()
        self.pending: list[Entry] = []
        self.closed = False
        self.stopped = False
        self.why = ""  # what stopped it: said when the run does not stop
        self.running = False
        self.timers: list[tuple[float, int, Timer]] = []
        self.all_timers: list[Timer] = []
        self.owner = m.thread
        self.previous = m.current.get(m.thread)
        m.current[m.thread] = self
        self.wakeups_scheduled = 0  # not modelled: the judge counts writes instead

    @staticmethod
    def current() -> "IOLoop":
        m = _m()
        loop = m.current.get(m.thread)
        return loop if loop is not None else IOLoop()

    def time(self) -> float:
        return _m().now

    def add_callback(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._add(Entry(functools.partial(callback, *args, **kwargs)))

    def _add(self, entry: Entry) -> None:
        if self.closed:
            return
        self.pending.append(entry)
        _m().driver.appended(self, entry)

    def add_future(self, future: Future, callback: Callable[[Any], Any]) -> None:
        future.add_done_callback(lambda f: self.add_callback(callback, f))

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any,
                   **kwargs: Any) -> Timer:
        m = _m()
        # NaN is due at once, as tornado 6 (asyncio) has it: it compares false with
        # everything, so "not yet due" is never true of it.  Or never (``nan_never``).
        deadline = (math.inf if m.nan_never else m.now) if math.isnan(delay) else m.now + delay
        timer = Timer(functools.partial(callback, *args, **kwargs), deadline,
                      getattr(callback, "__name__", "a timeout"))
        heapq.heappush(self.timers, (deadline, next(m.seq), timer))
        self.all_timers.append(timer)
        return timer

    def remove_timeout(self, handle: Timer) -> None:
        handle.removed = True

    def stop(self) -> None:
        self.stopped = True
        if not self.why:
            self.why = "stop() was called"

    def _stop_for(self, why: str) -> None:
        self.why = why
        self.stop()

    def start(self) -> None:
        m = _m()
        thread = m.thread
        previous, m.current[thread] = m.current.get(thread), self
        self.owner, self.running = thread, True
        m.driver.started(self)
        try:
            first = True
            while not self.stopped:
                self._turn(first)
                first = False
            m.driver.stopping(self)
        finally:
            m.current[thread] = previous
            self.stopped = self.running = False
            self.why = ""

    def _turn(self, first: bool) -> None:
        m = _m()
        arrivals = m.driver.turn(self, first)  # the sleep before it, and who arrived since
        batch, self.pending = self.pending, []
        m.driver.drained(self, batch)
        due = []
        while self.timers and self.timers[0][0] <= m.now:
            due.append(heapq.heappop(self.timers)[2])
        for entry in batch:
            self._arrivals(arrivals, entry)
            m.driver.running(self, entry)
            _guarded(entry.fn)
        self._arrivals(arrivals, None)
        m.driver.timeouts(self)
        for timer in due:
            if not timer.removed:
                _guarded(timer.fn)

    def _arrivals(self, arrivals: list, before: Entry | None) -> None:
        """Callbacks of other threads whose turn it is now, before ``before`` (the driver
        knows from the run)."""
        m = _m()
        while True:
            entry = m.driver.arrival(self, arrivals, before)
            if entry is None:
                return
            _guarded(entry.fn)

    def run_sync(self, func: Callable[[], Any], timeout: float | None = None) -> Any:
        started: list[Future] = []

        def begin() -> None:
            try:
                outcome = func()
            except Passing:
                raise
            except Exception as exc:  # noqa: BLE001
                outcome = Future()
                outcome.set_exception(exc)
            except BaseException as exc:  # noqa: BLE001
                raise Relax(exc) from None
            if not isinstance(outcome, Future):
                value, outcome = outcome, Future()
                outcome.set_result(value)
            started.append(outcome)
            stop = functools.partial(self._stop_for, "run_sync stops it once main's Future "
                                     "is done")
            outcome.add_done_callback(lambda f: self._add(Entry(stop, visible=False,
                                                                name="run_sync's stop")))

        expired: list[bool] = []

        def expire() -> None:
            if _m().done_stops_later and started and started[0].done():
                return
            expired.append(True)
            self._stop_for(f"run_sync's timeout of {timeout:g} s passed")

        expire.__name__ = "run_sync's timeout"

        self._add(Entry(begin, name="run_sync's start"))
        handle = self.call_later(timeout, expire) if timeout is not None else None
        if handle is not None:
            handle.visible = False
        self.start()
        if handle is not None:
            self.remove_timeout(handle)
        if not started or not started[0].done():
            if expired:
                raise TimeoutError("timed out")
            raise RuntimeError("stopped before the Future was done")
        return started[0].result()

    def close(self) -> None:
        m = _m()
        self.closed = True
        if m.current.get(m.thread) is self:
            previous = self.previous
            m.current[m.thread] = previous if previous is not None and not previous.closed \
                else None

    def expected_sleep(self) -> tuple[float | None, float | None]:
        """The sleep the contract asks for now, as (shortest, longest) in seconds: 0 with
        callbacks pending, else until the next deadline (a removed timeout may still be
        waited for: removal may be lazy), else for ever (None)."""
        if self.pending:
            return 0.0, 0.0
        now = _m().now
        live = [d for d, _, t in self.timers if not t.removed]
        every = [d for d, _, _ in self.timers]
        longest = max(0.0, min(live) - now) if live else None
        shortest = max(0.0, min(every) - now) if every else None
        return shortest, longest


class _Moment:
    def __repr__(self) -> str:
        return "moment"


moment = _Moment()


def coroutine(func: Callable[..., Any]) -> Callable[..., Future]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Future:
        future = Future()
        try:
            result = func(*args, **kwargs)
            if not isinstance(result, types.GeneratorType):
                future.set_result(result)
                return future
            first = next(result)
        except (StopIteration, Return) as e:
            future.set_result(e.value)
        except Passing:
            raise
        except Exception as e:  # noqa: BLE001
            future.set_exception(e)
        except BaseException as e:  # noqa: BLE001
            raise Relax(e) from None
        else:
            _Runner(result, future, first)
        return future

    return wrapper


class _Runner:
    def __init__(self, gen: Any, result_future: Future, first: Any) -> None:
        self.gen = gen
        self.result_future = result_future
        self.io_loop = IOLoop.current()
        self.future: Future | None = None
        self.running = False
        self.finished = False
        self._wait_for(first)

    def run(self) -> None:
        if self.running or self.finished:
            return
        self.running = True
        try:
            while not self.finished and self.future.done():  # type: ignore[union-attr]
                future, self.future = self.future, None
                self._step(future)  # type: ignore[arg-type]
        finally:
            self.running = False

    def _step(self, future: Future) -> None:
        try:
            exc = future.exception()
            yielded = self.gen.throw(exc) if exc is not None else self.gen.send(future.result())
        except (StopIteration, Return) as e:
            self._finish(e.value, None)
        except Passing:
            raise
        except Exception as e:  # noqa: BLE001
            self._finish(None, e)
        except BaseException as e:  # noqa: BLE001
            raise Relax(e) from None
        else:
            self._wait_for(yielded)

    def _finish(self, value: Any, exc: BaseException | None) -> None:
        self.finished = True
        if exc is None:
            self.result_future.set_result(value)
        else:
            self.result_future.set_exception(exc)

    def _wait_for(self, yielded: Any) -> None:
        if yielded is None or yielded is moment:
            self.future = Future()
            self.io_loop.add_callback(self._end_moment, self.future)
            return
        try:
            self.future = self._to_future(yielded)
        except BadYieldError as e:
            self.future = Future()
            self.future.set_exception(e)
        if self.future.done():
            self.run()
        else:
            self.io_loop.add_future(self.future, lambda _: self.run())

    def _end_moment(self, placeholder: Future) -> None:
        placeholder.set_result(None)
        self.run()

    @staticmethod
    def _to_future(yielded: Any) -> Future:
        if isinstance(yielded, Future):
            return yielded
        if isinstance(yielded, (list, dict)):
            return _gather(yielded)
        raise BadYieldError(f"yielded {yielded!r}")


def _gather(children: list | dict) -> Future:
    keys = list(children) if isinstance(children, dict) else list(range(len(children)))
    futures = [children[k] for k in keys]  # type: ignore[index]
    for f in futures:
        if not isinstance(f, Future):
            raise BadYieldError(f"yielded a multi holding {f!r}")
    gathered = Future()
    pending = [len(futures)]

    def on_child_done(_: Future) -> None:
        pending[0] -= 1
        if pending[0]:
            return
        failures = [f.exception() for f in futures if f.exception() is not None]
        if failures:
            for later in failures[1:]:
                if later is not failures[0]:
                    _m().driver.log(later)
            gathered.set_exception(failures[0])
        else:
            results = [f.result() for f in futures]
            gathered.set_result(dict(zip(keys, results)) if isinstance(children, dict)
                                else results)

    if not futures:
        gathered.set_result({} if isinstance(children, dict) else [])
    for f in futures:
        f.add_done_callback(on_child_done)
    return gathered
