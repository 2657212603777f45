"""P04's event-order scenarios, each written once against a small adapter (`api`).

The acceptance set runs them on the learner's module; the selftest runs the same functions
on real tornado 6 (`tests/selftest/test_p04_tornado_oracle.py`) and asserts the same
order.  Two kinds:

* `SCENARIOS`: a scenario takes `(api, log)` and returns `main`, a coroutine function that
  `api.run` drives with `run_sync` on a fresh loop in its own thread.
* `THREAD_SCENARIOS`: a scenario takes `(api, log)` and *is* the body of a fresh thread
  (`api.in_thread`): it makes, runs and closes its loops itself (current loop, run_sync's
  outcomes, a closed loop).

What a scenario may use: `api.coroutine`, `api.Future`, `api.moment`, `api.Return`,
`api.BadYieldError`, `api.InvalidStateError`, `api.IOLoop` (the class: `IOLoop()`,
`IOLoop.current()`), `api.loop()` (the running loop: `add_callback`, `add_future`,
`call_later`, `remove_timeout`, `time`) and `api.done(value)` (an already-done Future).
Only behaviour that tornado 6 and this exercise share goes in here.  Where they differ on
purpose (tests/p04/TORNADO_DIFFERENCES.md) a scenario is written so that the difference
does not show in its events -- tornado 6's Future is asyncio's, which schedules its
callbacks instead of calling them inline, so a Future scenario lets one `moment` pass
before it looks -- and the oracle asserts the difference itself separately.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable

from workbook.testkit import (BOUND, PARKED_CPU, Stopwatch, asleep_in_selector, parked,
                              thread_cpu_seconds)

SPIN_CAP = 10_000  # a spinner gives up after this many turns (a starved timeout)
ON_TIME = 0.2 + 0.55  # latest acceptable firing of a 0.2 s timeout on a busy machine
#: A scenario whose order needs a state that a busy machine may miss (a turn that begins
#: before a deadline, a watcher that sees the loop asleep before its timeout) records
#: whether that state held and, when it did not, tries again, at most this many times; it
#: logs the events of the first try in which it held.  The state decides, not the clock.
TRIES = 5
DUE = 0.05  # seconds to a timeout that a scenario lets fall due while a callback runs
BUSY = (f"(the machine was too busy: in {TRIES} tries the turn never began before the "
        "timeout's deadline)")


def _until_the_clock_passes(loop, moment: float) -> None:
    """Sleep in short steps until the loop's clock is past ``moment`` (a deadline)."""
    end = time.monotonic() + BOUND
    while loop.time() <= moment and time.monotonic() < end:
        time.sleep(0.002)


def asyn_sum_program(api, log):
    """The seed's program: a callback completes the Future the coroutine waits on."""

    @api.coroutine
    def asyn_sum(a, b):
        log(f"begin calculate:sum {a}+{b}")
        future = api.Future()

        def callback(a, b):
            log(f"calculating the sum of {a}+{b}:")
            future.set_result(a + b)

        api.loop().add_callback(callback, a, b)
        result = yield future
        log("after yielded")
        log(f"the {a}+{b}={result}")

    @api.coroutine
    def main():
        future = asyn_sum(2, 3)
        log("the caller holds a " + ("done" if future.done() else "pending") + " Future")
        yield future

    return main


def _two_workers(api, log, pause):
    @api.coroutine
    def worker(name):
        for i in range(3):
            log(f"{name}{i}")
            yield pause()

    @api.coroutine
    def main():
        yield [worker("A"), worker("B")]

    return main


def done_futures_run_back_to_back(api, log):
    """Yielding a done Future does not give up the turn: A runs to its end before B."""
    return _two_workers(api, log, lambda: api.done(None))


def moments_alternate(api, log):
    """`yield moment` gives up the turn: A and B take turns."""
    return _two_workers(api, log, lambda: api.moment)


def none_is_a_moment(api, log):
    """`yield None` behaves like `yield moment`."""
    return _two_workers(api, log, lambda: None)


def exceptions_are_thrown_into_the_generator(api, log):
    """A failed Future raises at the yield, where the generator may catch it."""

    @api.coroutine
    def careful():
        future = api.Future()

        def fail():
            log("the callback fails the Future")
            future.set_exception(ValueError("boom"))

        api.loop().add_callback(fail)
        try:
            yield future
        except ValueError as e:
            log(f"careful caught {e}")
        return "recovered"

    @api.coroutine
    def careless():
        yield api.done(None)
        raise KeyError("lost")

    @api.coroutine
    def main():
        log(f"careful returned {(yield careful())}")
        try:
            yield careless()
        except KeyError as e:
            log(f"main caught {e} from careless")

    return main


def nested_coroutines(api, log):
    """A coroutine waits for another one; Return and return both deliver values."""

    @api.coroutine
    def inner():
        log("inner starts")
        future = api.Future()

        def complete():
            log("a callback completes inner's Future")
            future.set_result(20)

        api.loop().add_callback(complete)
        value = yield future
        log("inner resumes")
        raise api.Return(value + 1)

    @api.coroutine
    def outer():
        log("outer starts")
        pending = inner()
        log("outer holds inner's Future")
        value = yield pending
        log(f"outer resumes with {value}")
        return value * 2

    @api.coroutine
    def main():
        log(f"main gets {(yield outer())}")

    return main


def multi_results_follow_the_yield_order(api, log):
    """Futures completed in reverse order: the results still come in the order yielded."""

    @api.coroutine
    def main():
        loop = api.loop()
        futures = [api.Future() for _ in range(3)]

        def complete(i):
            log(f"complete {i}")
            futures[i].set_result(f"r{i}")

        for i in (2, 1, 0):
            loop.add_callback(complete, i)
        results = yield futures
        log(f"list gives {results}")
        named = {"x": api.Future(), "y": api.Future()}
        loop.add_callback(lambda: (log("complete y"), named["y"].set_result(2)))
        loop.add_callback(lambda: (log("complete x"), named["x"].set_result(1)))
        got = yield named
        log(f"dict gives {sorted(got.items())}")

    return main


def bad_yields_are_thrown_into_the_generator(api, log):
    """Yielding something that is not a Future raises BadYieldError at the yield."""

    class EqualToAll:
        def __eq__(self, other):
            return True

        __hash__ = object.__hash__

    @api.coroutine
    def main():
        for bad in (42, "text", [api.done(1), 2], EqualToAll()):
            try:
                yield bad
            except api.BadYieldError:
                log(f"BadYieldError for {type(bad).__name__}")
            else:
                log(f"no error for {type(bad).__name__}")

    return main


def a_moment_spinner_cannot_starve_a_timeout(api, log):
    """`while not fired: yield moment` -- the timeout still fires on the next turn."""

    @api.coroutine
    def main():
        fired = []

        def fire():
            log("the timeout fires")
            fired.append(True)

        api.loop().call_later(0, fire)
        spins = 0
        while not fired and spins < SPIN_CAP:
            spins += 1
            yield api.moment
        log("the spinner saw the timeout" if fired else "the spinner gave up")
        return spins

    return main


def a_callback_spinner_cannot_starve_a_timeout(api, log):
    """A callback that re-adds itself: a due timeout still runs before it is done."""

    @api.coroutine
    def main():
        loop = api.loop()
        finished = api.Future()
        fired = []

        def fire():
            log("the timeout fires")
            fired.append(True)

        def spin(n):
            if fired or n >= SPIN_CAP:
                log("the spinner saw the timeout" if fired else "the spinner gave up")
                finished.set_result(n)
            else:
                loop.add_callback(spin, n + 1)

        loop.call_later(0, fire)
        loop.add_callback(spin, 1)
        return (yield finished)

    return main


def callbacks_added_by_a_callback_wait_for_the_next_turn(api, log):
    """Callbacks run in arrival order; one added while a turn runs waits for the next."""

    @api.coroutine
    def main():
        loop = api.loop()

        def first():
            log("first")
            loop.add_callback(lambda: log("added by first"))

        loop.add_callback(first)
        loop.add_callback(lambda: log("second"))
        yield api.moment
        log("main after one moment")
        yield api.moment
        log("main after two moments")

    return main


def add_future_calls_back_on_a_later_turn(api, log):
    """add_future's callback does not run inside set_result, but on a later turn."""

    @api.coroutine
    def main():
        future = api.Future()
        api.loop().add_future(future, lambda f: log(f"add_future callback sees {f.result()}"))
        log("before set_result")
        future.set_result(7)
        log("after set_result")
        yield api.moment
        log("main resumes")

    return main


def a_failing_callback_does_not_stop_the_loop(api, log):
    """A callback that raises is logged; the callbacks after it still run."""

    @api.coroutine
    def main():
        loop = api.loop()

        def broken():
            log("broken raises")
            raise RuntimeError("deliberately broken callback")

        loop.add_callback(lambda: log("before"))
        loop.add_callback(broken)
        loop.add_callback(lambda: log("after"))
        yield api.moment
        log("main resumes")

    return main


def timeouts_fire_in_deadline_order(api, log):
    """Timeouts fire by deadline, not by call order; a removed one never fires."""

    @api.coroutine
    def main():
        loop = api.loop()
        for _ in range(TRIES):
            events: list = []
            finished = api.Future()
            start = loop.time()
            loop.call_later(0.03, lambda: events.append("30 ms"))
            removed = loop.call_later(0.02, lambda: events.append("20 ms (removed)"))
            loop.call_later(0.01, lambda: events.append("10 ms"))
            loop.call_later(0.04, lambda: (events.append("40 ms"), finished.set_result(None)))
            loop.remove_timeout(removed)
            # The deadlines are 10 ms apart only if the four calls took less than that: on
            # a busy machine a longer pause between them reorders the deadlines themselves.
            registered = loop.time() - start
            yield finished
            if registered < 0.01:
                break
        else:
            events.append(f"(the machine was too busy: in {TRIES} tries the four call_later "
                          "calls never took less than 10 ms)")
        for event in events:
            log(event)

    return main


class _Logged(logging.Handler):
    """The exceptions logged (with exc_info) anywhere while a scenario looks."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.exceptions: list[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.exceptions.append(record.exc_info[1])

    def __enter__(self) -> "_Logged":
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)

    def named(self, *candidates: BaseException) -> list[str]:
        """Which of ``candidates`` were logged, by their message, in the given order."""
        return [str(c.args[0]) for c in candidates if any(e is c for e in self.exceptions)]


def calling_a_coroutine_runs_it_to_its_first_yield(api, log):
    """Calling a coroutine runs its body up to the first yield, inside the call."""

    @api.coroutine
    def body():
        log("body runs")
        yield api.Future()  # never completed
        log("body resumed")

    @api.coroutine
    def main():
        future = body()
        log("the call returned a " + ("done" if future.done() else "pending") + " Future")
        yield api.moment
        log("main after a moment")

    return main


def return_values(api, log):
    """`return v`, `raise Return(v)`, `raise Return()` and a return before any yield."""

    @api.coroutine
    def returns():
        yield api.moment
        return "plain return"

    @api.coroutine
    def raises_return():
        yield api.moment
        raise api.Return("Return(value)")

    @api.coroutine
    def bare_return():
        yield api.moment
        raise api.Return()

    @api.coroutine
    def early():
        return "before any yield"
        yield  # a generator that returns before its first yield

    @api.coroutine
    def main():
        for coro in (returns, raises_return, bare_return, early):
            log(f"{coro.__name__} gives {(yield coro())!r}")
        log(f"Return(3).value is {api.Return(3).value}, Return().value is {api.Return().value}, "
            f"Return(3).args is {api.Return(3).args}")

    return main


def plain_functions_under_coroutine(api, log):
    """A plain function's value or exception goes into a Future that is done at once."""

    @api.coroutine
    def value():
        return 7

    @api.coroutine
    def raises():
        raise KeyError("plain")

    @api.coroutine
    def main():
        a = value()
        log(f"value(): done {a.done()}, result {a.result()}")
        b = raises()
        log(f"raises(): done {b.done()}, exception {type(b.exception()).__name__}")
        log(f"yield value() gives {(yield value())}")
        try:
            yield raises()
        except KeyError as e:
            log(f"yield raises() raises KeyError {e}")

    return main


def uncaught_exceptions_reach_the_future(api, log):
    """An exception raised before or after the first yield goes into the coroutine's Future."""
    err = LookupError("uncaught")

    @api.coroutine
    def before_yield():
        raise err
        yield

    @api.coroutine
    def after_yield():
        yield api.moment
        raise err

    @api.coroutine
    def main():
        first = before_yield()
        log(f"before the first yield: done at once {first.done()}, "
            f"the same exception {first.exception() is err}")
        second = after_yield()
        log(f"after a yield: done at once {second.done()}")
        try:
            yield second
        except LookupError as e:
            log(f"yield after_yield() raises the same exception {e is err}")

    return main


def exceptions_travel_up_nested_coroutines(api, log):
    """An exception five levels down reaches the top through every yield."""

    @api.coroutine
    def level(n):
        if n == 0:
            yield api.moment
            raise ZeroDivisionError("deep")
        try:
            return (yield level(n - 1))
        finally:
            log(f"level {n} unwinds")

    @api.coroutine
    def main():
        try:
            yield level(5)
        except ZeroDivisionError as e:
            log(f"main caught {e}")

    return main


def multi_results_ignore_completion_order(api, log):
    """Five Futures completed as 3, 0, 4, 1, 2 and a dict completed r, q, p."""

    @api.coroutine
    def main():
        loop = api.loop()
        futures = [api.Future() for _ in range(5)]
        for i in (3, 0, 4, 1, 2):
            loop.add_callback(futures[i].set_result, i * 10)
        named = {k: api.Future() for k in "pqr"}
        for k in "rqp":
            loop.add_callback(named[k].set_result, k.upper())
        log(f"list gives {(yield futures)}")
        got = yield named
        log(f"dict gives {got} with keys in the order {list(got)}")

    return main


def empty_multis_are_done_at_once(api, log):
    """`yield []` and `yield {}` continue at once, ahead of a callback already queued."""

    @api.coroutine
    def main():
        api.loop().add_callback(lambda: log("a callback queued before"))
        log(f"yield [] gives {(yield [])}")
        log(f"yield {{}} gives {(yield {})}")
        yield api.moment
        log("main after a moment")

    return main


def _later(loop, delay, fn, *args):
    """``fn(*args)`` after ``delay`` s, or on the next turn for delay None."""
    if delay is None:
        loop.add_callback(fn, *args)
    else:
        loop.call_later(delay, fn, *args)


def multi_waits_for_every_child_after_a_failure(api, log):
    """A child fails at once, the other succeeds 50 ms later: the multi raises after both."""

    @api.coroutine
    def main():
        loop = api.loop()
        ok, bad = api.Future(), api.Future()
        _later(loop, None, lambda: (log("bad fails"), bad.set_exception(ValueError("bad"))))
        _later(loop, 0.05, lambda: (log("ok succeeds"), ok.set_result(1)))
        try:
            yield [ok, bad]
        except ValueError as e:
            log(f"main caught {e}; ok was done by then: {ok.done()}")

    return main


def multi_several_failures_first_in_yield_order(api, log):
    """Several children fail: the first *in yield order* is raised, the later ones logged."""

    @api.coroutine
    def main():
        loop = api.loop()
        first, ok1, second, ok2, third = (api.Future() for _ in range(5))
        errors = {f: ValueError(name) for f, name in
                  ((first, "first"), (second, "second"), (third, "third"))}
        ok1.set_result("done before the yield")
        # Completion order: third, second, ok2, first -- not the yield order.
        _later(loop, None, lambda: (log("third fails"), third.set_exception(errors[third])))
        _later(loop, 0.01, lambda: (log("second fails"), second.set_exception(errors[second])))
        _later(loop, 0.02, lambda: (log("ok2 succeeds"), ok2.set_result(2)))
        _later(loop, 0.03, lambda: (log("first fails"), first.set_exception(errors[first])))
        with _Logged() as logged:
            try:
                yield [first, ok1, second, ok2, third]
            except ValueError as e:
                log(f"main caught {e}")
                log(f"the one raised is the first child's exception: {e is errors[first]}")
            log(f"logged: {logged.named(*errors.values())}")

    return main


def multi_dict_failures_before_and_after_successes(api, log):
    """A dict multi: a failure completes before one success and after another."""

    @api.coroutine
    def main():
        loop = api.loop()
        children = {k: api.Future() for k in ("a", "b", "c", "d")}
        errors = {"b": KeyError("b"), "d": KeyError("d")}
        _later(loop, None, lambda: (log("a succeeds"), children["a"].set_result("A")))
        _later(loop, 0.01, lambda: (log("d fails"), children["d"].set_exception(errors["d"])))
        _later(loop, 0.02, lambda: (log("b fails"), children["b"].set_exception(errors["b"])))
        _later(loop, 0.03, lambda: (log("c succeeds"), children["c"].set_result("C")))
        with _Logged() as logged:
            try:
                yield children
            except KeyError as e:
                log(f"main caught {e}; all done by then: "
                    f"{all(f.done() for f in children.values())}")
            log(f"logged: {logged.named(*errors.values())}")
        # Then a list multi whose only failure comes last, after the successes.
        ok, late_bad = api.Future(), api.Future()
        _later(loop, None, ok.set_result, 1)
        _later(loop, 0.01, lambda: late_bad.set_exception(RuntimeError("last")))
        try:
            yield [late_bad, ok]
        except RuntimeError as e:
            log(f"main caught {e}")

    return main


def an_uncaught_bad_yield_fails_the_coroutine(api, log):
    """Yielding object() and not catching the error fails the coroutine's Future."""

    @api.coroutine
    def careless():
        yield object()
        log("careless went on")

    @api.coroutine
    def main():
        try:
            yield careless()
        except api.BadYieldError:
            log("main caught BadYieldError from careless")

    return main


def ten_thousand_done_futures(api, log):
    """10 000 done Futures in a row: the generator adds them up without RecursionError."""

    @api.coroutine
    def add_up(n):
        total = 0
        for i in range(n):
            total += yield api.done(i)
        return total

    @api.coroutine
    def main():
        try:
            log(f"the sum of 0..9999 is {(yield add_up(10_000))}")
        except RecursionError:
            log("RecursionError")

    return main


def a_callback_runs_after_add_callback_returns(api, log):
    """A callback added on the loop thread runs later, on the loop thread, never inside."""

    @api.coroutine
    def main():
        loop_thread = threading.get_ident()
        api.loop().add_callback(
            lambda: log(f"the callback runs on the loop thread: "
                        f"{threading.get_ident() == loop_thread}"))
        log("add_callback returned")
        yield api.moment
        log("main after a moment")

    return main


def timeouts_due_when_a_turn_begins(api, log):
    """A turn takes the timeouts due when it begins: one that falls due during the turn, or
    a call_later(0) added by its callbacks, waits for the next turn, after that turn's
    callbacks."""

    def one_try(loop, events, began):
        def first():
            began.append(loop.time())  # the turn of `first` began no later than this
            events.append("first adds call_later(0) and a callback")
            loop.call_later(0, lambda: events.append("call_later(0) added by first"))
            loop.add_callback(lambda: events.append("callback added by first"))

        def slow():
            events.append("slow: the timeout falls due while it runs")
            _until_the_clock_passes(loop, latest)

        earliest = loop.time() + DUE  # the timeout's deadline is no sooner than this...
        loop.call_later(DUE, lambda: events.append("the timeout"))
        latest = loop.time() + DUE  # ... and no later than this
        loop.add_callback(first)
        loop.add_callback(slow)
        loop.add_callback(lambda: events.append("third"))
        return earliest

    @api.coroutine
    def main():
        loop = api.loop()
        for _ in range(TRIES):
            events: list = []
            began: list = []
            earliest = one_try(loop, events, began)
            finished = api.Future()
            loop.call_later(DUE + 0.05, finished.set_result, None)
            yield finished
            if began and began[0] < earliest:
                break  # the turn of `first` began before the deadline, as this order needs
        else:
            events.append(BUSY)
        for event in events:
            log(event)

    return main


def a_timeout_overdue_after_a_slow_callback_fires_at_once(api, log):
    """A callback runs past the next deadline and nothing else is queued: the loop must not
    sleep, the overdue timeout fires on the next turn."""

    @api.coroutine
    def main():
        loop = api.loop()
        fired = api.Future()
        watch = Stopwatch(loop.time)
        loop.call_later(0.01, lambda: fired.set_result(watch.read()[1]))
        loop.add_callback(time.sleep, 0.05)  # the 10 ms deadline passes while it runs
        own = yield fired  # less the CPU queue
        log(f"the overdue timeout fired promptly: {own < 0.05 + 0.45}")

    return main


def a_removed_timeout_of_this_turn_does_not_fire(api, log):
    """A callback removes a timeout that is due in the same turn: it never fires."""

    def one_try(loop, events, began, handles):
        def slow():
            began.append(loop.time())  # the turn of `slow` began no later than this
            _until_the_clock_passes(loop, latest)  # the timeout is due when the next turn begins

        earliest = loop.time() + DUE
        handles["due"] = loop.call_later(DUE, lambda: events.append("removed timeout fired"))
        latest = loop.time() + DUE
        loop.add_callback(slow)
        return earliest

    @api.coroutine
    def main():
        loop = api.loop()
        for _ in range(TRIES):
            events: list = []
            began: list = []
            handles: dict = {}
            earliest = one_try(loop, events, began, handles)
            yield api.moment  # next turn: remover runs and the timeout is due

            def remover(events=events, handles=handles):
                events.append("the callback removes the due timeout")
                loop.remove_timeout(handles["due"])

            loop.add_callback(remover)
            finished = api.Future()
            loop.call_later(0.05, finished.set_result, None)
            yield finished
            if began and began[0] < earliest:
                break  # the timeout was not yet due when the turn of `slow` began
        else:
            events.append(BUSY)
        for event in events:
            log(event)
        log("main resumes")

    return main


def call_later_passes_its_arguments_on_time(api, log):
    """call_later(0.2, fn, 1, 2, key="v") on an idle loop: on time, with its arguments, and
    asleep meanwhile: from when a watcher sees the loop thread parked (for 20 ms neither
    running nor queued for a CPU) until the timeout runs, that thread's own CPU clock stands
    (nearly) still.  If the watcher saw no such moment before the timeout (a busy machine),
    it tries again.  The lateness allowed is the loop's own: the time its thread sat
    runnable waiting for a CPU is taken off."""

    def one_try(loop, loop_thread, fired):
        seen: list = []  # the loop thread's CPU clock when the watcher saw it parked
        gone = threading.Event()  # set by the timeout once it has read its own CPU clock
        stopwatch = Stopwatch(loop.time)

        def watch():
            end = time.monotonic() + BOUND
            while not gone.is_set() and time.monotonic() < end:
                asleep = parked(loop_thread, 0.02)  # preempted (runnable) is not parked
                clock = thread_cpu_seconds(loop_thread)
                if asleep and clock is not None:
                    if not gone.is_set():  # so the clock was read before the timeout ran
                        seen.append(clock)
                    return

        def on_timeout(*args, **kwargs):
            cpu, (elapsed, own) = time.thread_time(), stopwatch.read()
            gone.set()
            fired.set_result((args, kwargs, elapsed, own, cpu))

        loop.call_later(0.2, on_timeout, 1, 2, key="v")
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        return stopwatch.start, seen, watcher

    @api.coroutine
    def main():
        loop = api.loop()
        for _ in range(TRIES):
            fired = api.Future()
            start, seen, watcher = one_try(loop, threading.current_thread(), fired)
            args, kwargs, elapsed, own, cpu = yield fired
            watcher.join(BOUND)
            if seen:
                break
        log(f"args {args} kwargs {kwargs}")
        log(f"on time: {0.19 <= elapsed and own <= ON_TIME}")  # own: less the CPU queue
        asleep = bool(seen) and cpu - seen[0] <= PARKED_CPU
        log(f"the loop slept (used no CPU) while it waited: {asleep}")
        later = loop.time()
        log(f"the clock did not go back: {later >= start + elapsed}")

    return main


def future_contract_seen_after_a_moment(api, log):
    """The Future contract, observed after one `moment` (tornado's callbacks are scheduled)."""

    @api.coroutine
    def main():
        f = api.Future()
        log(f"a new Future is done: {f.done()}")
        for method in ("result", "exception"):
            try:
                getattr(f, method)()
            except api.InvalidStateError:
                log(f"{method}() on a pending Future raises InvalidStateError")
        calls = []
        for name in "abc":
            f.add_done_callback(lambda fut, name=name: calls.append((name, fut.result())))
        f.set_result(5)
        yield api.moment
        log(f"callbacks ran: {calls}")
        for second in ("set_result", "set_exception"):
            try:
                getattr(f, second)(1 if second == "set_result" else KeyError("k"))
            except api.InvalidStateError:
                log(f"a second {second}() raises InvalidStateError; result still {f.result()}")
        f.add_done_callback(lambda fut: calls.append(("late", fut.result())))
        yield api.moment
        log(f"a callback added when done ran: {calls[3:]}")
        g = api.Future()
        err = ValueError("x")
        g.add_done_callback(lambda fut: calls.append(("failed", type(fut.exception()).__name__)))
        g.set_exception(err)
        yield api.moment
        log(f"after set_exception: {calls[4:]}, exception() is it {g.exception() is err}")
        try:
            g.result()
        except ValueError as e:
            log(f"result() raises it: {e is err}")

        def broken(fut):
            calls.append("broken")
            raise RuntimeError("deliberately broken callback")

        h = api.Future()
        h.add_done_callback(lambda fut: calls.append("first"))
        h.add_done_callback(broken)
        h.add_done_callback(lambda fut: calls.append("last"))
        with _Logged() as logged:
            h.set_result(1)
            yield api.moment
            log(f"around a broken callback: {calls[5:]}; its exception logged: "
                f"{any(isinstance(e, RuntimeError) for e in logged.exceptions)}")

    return main


def cross_thread_callbacks_wake_and_keep_order(api, log):
    """Another thread's add_callback wakes the loop asleep in select(); 4 threads x 1000
    callbacks all run, each thread's in its own order."""

    @api.coroutine
    def main():
        loop = api.loop()
        loop_thread = threading.current_thread()
        woken = api.Future()

        def wake_when_asleep():
            deadline = time.monotonic() + BOUND
            while not asleep_in_selector(loop_thread) and time.monotonic() < deadline:
                time.sleep(0.001)  # polling for a state, bounded
            loop.add_callback(woken.set_result, "woken")

        threading.Thread(target=wake_when_asleep, daemon=True).start()
        log(f"the sleeping loop was {(yield woken)} by another thread")
        threads, per_thread = 4, 1000
        ran: list = []
        finished = api.Future()

        def record(t, i):
            ran.append((t, i))
            if len(ran) == threads * per_thread:
                finished.set_result(None)

        barrier = threading.Barrier(threads)

        def producer(t):
            barrier.wait(BOUND)
            for i in range(per_thread):
                loop.add_callback(record, t, i)

        for t in range(threads):
            threading.Thread(target=producer, args=(t,), daemon=True).start()
        yield finished
        log(f"{len(ran)} callbacks ran")
        log("each thread's order kept: " + str(all(
            [i for u, i in ran if u == t] == list(range(per_thread)) for t in range(threads))))

    return main


# -- thread scenarios: the body of a fresh thread, making and closing its own loops ----------

def the_current_loop(api, log):
    """A new IOLoop() is its thread's current loop; start() and run_sync() make the loop
    current and give the thread its previous current loop back; close() too."""
    a = api.IOLoop()
    log(f"a new loop a is current: {api.IOLoop.current() is a}")
    b = api.IOLoop()
    log(f"a second new loop b is current: {api.IOLoop.current() is b}")
    log(f"asked through an instance too: {a.current() is b}")
    seen = []

    @api.coroutine
    def inside():
        seen.append(api.IOLoop.current() is a)
        yield api.moment  # scheduled on a: the loop that runs this coroutine
        seen.append(api.IOLoop.current() is a)

    a.run_sync(inside)
    log(f"inside a.run_sync, a is current (before and after a moment): {seen}")
    log(f"after a.run_sync, b is current again: {api.IOLoop.current() is b}")
    seen.clear()
    a.add_callback(lambda: (seen.append(api.IOLoop.current() is a), a.stop()))
    a.start()
    log(f"inside a.start, a is current: {seen}")
    log(f"after a.start, b is current again: {api.IOLoop.current() is b}")
    b.close()
    log(f"after b.close(), a is current again: {api.IOLoop.current() is a}")
    a.close()
    c = api.IOLoop.current()
    log(f"after a.close(), current() makes a new loop: {c is not a and c is not b}")
    log(f"... and asking again gives the same one: {api.IOLoop.current() is c}")
    c.close()


def run_sync_outcomes(api, log):
    """run_sync returns the coroutine's result, raises its exception, or TimeoutError."""
    loop = api.IOLoop()

    @api.coroutine
    def later():
        yield api.moment
        return "coroutine result"

    @api.coroutine
    def broken():
        yield api.moment
        raise ArithmeticError("from the coroutine")

    def plain_raises():
        raise PermissionError("from the plain function")

    # No timeout where the timeout is not the point: a run_sync that never returns then
    # sleeps untimed, which the stuck detector sees at once.
    log(f"run_sync(later) gives {loop.run_sync(later)!r}")
    watch = Stopwatch()
    loop.run_sync(lambda: None, timeout=1.5)
    own = watch.read()[1]
    log(f"run_sync(a plain function, timeout) returns when it is done, not at the timeout: "
        f"{own < 0.75}")
    for fn in (broken, plain_raises):
        try:
            loop.run_sync(fn)
        except Exception as e:  # noqa: BLE001 - recorded
            log(f"run_sync({fn.__name__}) raises {type(e).__name__}: {e}")
    watch = Stopwatch()
    try:
        loop.run_sync(api.Future, timeout=0.2)  # a Future nobody completes
    except Exception as e:  # noqa: BLE001 - asyncio.TimeoutError on 3.10 for tornado
        elapsed, own = watch.read()  # own: less the time spent waiting for a CPU
        log(f"run_sync(never done, timeout=0.2) raises {type(e).__name__} "
            f"on time: {0.19 <= elapsed and own <= ON_TIME}")
    else:
        log("run_sync(never done, timeout=0.2) returned")
    log(f"run_sync again afterwards gives {loop.run_sync(later)!r}")

    @api.coroutine
    def slow():
        finished = api.Future()
        api.IOLoop.current().call_later(0.3, finished.set_result, "slow result")
        return (yield finished)

    loop.run_sync(later, timeout=0.1)  # its timeout must not outlive it
    log(f"run_sync(slow) without a timeout, after one with a 0.1 s timeout, gives "
        f"{loop.run_sync(slow)!r}")
    loop.close()


def add_callback_on_a_closed_loop_is_dropped(api, log):
    """add_callback on a closed loop, from its thread or another one: no error, never runs."""
    loop = api.IOLoop()
    loop.close()
    outcome = {}

    def add(where):
        try:
            loop.add_callback(lambda: log("a callback ran on the closed loop"))
            outcome[where] = "dropped"
        except Exception as e:  # noqa: BLE001 - recorded
            outcome[where] = f"raised {type(e).__name__}"

    other = threading.Thread(target=add, args=("another thread",), daemon=True)
    other.start()
    other.join(BOUND)
    add("its own thread")
    for where in ("its own thread", "another thread"):
        log(f"add_callback on a closed loop from {where}: {outcome.get(where, 'hung')}")


def _open_fds() -> int:
    for folder in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(folder):
            return len(os.listdir(folder))
    return 0


def close_releases_the_loop_s_resources(api, log):
    """Twenty loops made and closed leave (next to) no file descriptors behind."""
    kept = []  # alive, so that no finalizer closes what close() forgot
    before = _open_fds()
    for _ in range(20):
        loop = api.IOLoop()
        loop.run_sync(lambda: None)
        loop.close()
        kept.append(loop)
    log(f"20 closed loops left at most a few fds open: {_open_fds() - before < 10}")


#: The scenarios that are the body of a thread (the others return a coroutine function).
THREAD_SCENARIOS = {the_current_loop, run_sync_outcomes, add_callback_on_a_closed_loop_is_dropped,
                    close_releases_the_loop_s_resources}

#: name -> (scenario, the events real tornado 6 records)
SCENARIOS: dict[str, tuple[Callable, list[str]]] = {
    "asyn_sum": (asyn_sum_program, [
        "begin calculate:sum 2+3", "the caller holds a pending Future",
        "calculating the sum of 2+3:", "after yielded", "the 2+3=5"]),
    "done_futures": (done_futures_run_back_to_back, ["A0", "A1", "A2", "B0", "B1", "B2"]),
    "moments": (moments_alternate, ["A0", "B0", "A1", "B1", "A2", "B2"]),
    "none_moments": (none_is_a_moment, ["A0", "B0", "A1", "B1", "A2", "B2"]),
    "exceptions": (exceptions_are_thrown_into_the_generator, [
        "the callback fails the Future", "careful caught boom", "careful returned recovered",
        "main caught 'lost' from careless"]),
    "nested": (nested_coroutines, [
        "outer starts", "inner starts", "outer holds inner's Future",
        "a callback completes inner's Future", "inner resumes", "outer resumes with 21",
        "main gets 42"]),
    "multi": (multi_results_follow_the_yield_order, [
        "complete 2", "complete 1", "complete 0", "list gives ['r0', 'r1', 'r2']",
        "complete y", "complete x", "dict gives [('x', 1), ('y', 2)]"]),
    "bad_yields": (bad_yields_are_thrown_into_the_generator, [
        "BadYieldError for int", "BadYieldError for str", "BadYieldError for list",
        "BadYieldError for EqualToAll"]),
    "moment_spinner": (a_moment_spinner_cannot_starve_a_timeout, [
        "the timeout fires", "the spinner saw the timeout"]),
    "callback_spinner": (a_callback_spinner_cannot_starve_a_timeout, [
        "the timeout fires", "the spinner saw the timeout"]),
    "next_turn": (callbacks_added_by_a_callback_wait_for_the_next_turn, [
        "first", "second", "main after one moment", "added by first",
        "main after two moments"]),
    "add_future": (add_future_calls_back_on_a_later_turn, [
        "before set_result", "after set_result", "add_future callback sees 7",
        "main resumes"]),
    "failing_callback": (a_failing_callback_does_not_stop_the_loop, [
        "before", "broken raises", "after", "main resumes"]),
    "timeouts": (timeouts_fire_in_deadline_order, ["10 ms", "30 ms", "40 ms"]),
    "first_yield": (calling_a_coroutine_runs_it_to_its_first_yield, [
        "body runs", "the call returned a pending Future", "main after a moment"]),
    "return_values": (return_values, [
        "returns gives 'plain return'", "raises_return gives 'Return(value)'",
        "bare_return gives None", "early gives 'before any yield'",
        "Return(3).value is 3, Return().value is None, Return(3).args is (3,)"]),
    "plain_functions": (plain_functions_under_coroutine, [
        "value(): done True, result 7", "raises(): done True, exception KeyError",
        "yield value() gives 7", "yield raises() raises KeyError 'plain'"]),
    "uncaught": (uncaught_exceptions_reach_the_future, [
        "before the first yield: done at once True, the same exception True",
        "after a yield: done at once False", "yield after_yield() raises the same exception True"]),
    "nested_exception": (exceptions_travel_up_nested_coroutines, [
        "level 1 unwinds", "level 2 unwinds", "level 3 unwinds", "level 4 unwinds",
        "level 5 unwinds", "main caught deep"]),
    "multi_shuffled": (multi_results_ignore_completion_order, [
        "list gives [0, 10, 20, 30, 40]",
        "dict gives {'p': 'P', 'q': 'Q', 'r': 'R'} with keys in the order ['p', 'q', 'r']"]),
    "multi_empty": (empty_multis_are_done_at_once, [
        "yield [] gives []", "yield {} gives {}", "a callback queued before",
        "main after a moment"]),
    "multi_waits_for_all": (multi_waits_for_every_child_after_a_failure, [
        "bad fails", "ok succeeds", "main caught bad; ok was done by then: True"]),
    "multi_first_failure": (multi_several_failures_first_in_yield_order, [
        "third fails", "second fails", "ok2 succeeds", "first fails", "main caught first",
        "the one raised is the first child's exception: True",
        "logged: ['second', 'third']"]),
    "multi_dict_failures": (multi_dict_failures_before_and_after_successes, [
        "a succeeds", "d fails", "b fails", "c succeeds",
        "main caught 'b'; all done by then: True", "logged: ['d']", "main caught last"]),
    "uncaught_bad_yield": (an_uncaught_bad_yield_fails_the_coroutine, [
        "main caught BadYieldError from careless"]),
    "ten_thousand": (ten_thousand_done_futures, ["the sum of 0..9999 is 49995000"]),
    "later_turn": (a_callback_runs_after_add_callback_returns, [
        "add_callback returned", "the callback runs on the loop thread: True",
        "main after a moment"]),
    "timeouts_at_turn_start": (timeouts_due_when_a_turn_begins, [
        "first adds call_later(0) and a callback",
        "slow: the timeout falls due while it runs", "third", "callback added by first",
        "call_later(0) added by first", "the timeout"]),
    "overdue": (a_timeout_overdue_after_a_slow_callback_fires_at_once, [
        "the overdue timeout fired promptly: True"]),
    "removed_in_turn": (a_removed_timeout_of_this_turn_does_not_fire, [
        "the callback removes the due timeout", "main resumes"]),
    "call_later_args": (call_later_passes_its_arguments_on_time, [
        "args (1, 2) kwargs {'key': 'v'}", "on time: True",
        "the loop slept (used no CPU) while it waited: True", "the clock did not go back: True"]),
    "future_contract": (future_contract_seen_after_a_moment, [
        "a new Future is done: False", "result() on a pending Future raises InvalidStateError",
        "exception() on a pending Future raises InvalidStateError",
        "callbacks ran: [('a', 5), ('b', 5), ('c', 5)]",
        "a second set_result() raises InvalidStateError; result still 5",
        "a second set_exception() raises InvalidStateError; result still 5",
        "a callback added when done ran: [('late', 5)]",
        "after set_exception: [('failed', 'ValueError')], exception() is it True",
        "result() raises it: True",
        "around a broken callback: ['first', 'broken', 'last']; its exception logged: True"]),
    "cross_thread": (cross_thread_callbacks_wake_and_keep_order, [
        "the sleeping loop was woken by another thread", "4000 callbacks ran",
        "each thread's order kept: True"]),
    "current_loop": (the_current_loop, [
        "a new loop a is current: True", "a second new loop b is current: True",
        "asked through an instance too: True",
        "inside a.run_sync, a is current (before and after a moment): [True, True]",
        "after a.run_sync, b is current again: True", "inside a.start, a is current: [True]",
        "after a.start, b is current again: True", "after b.close(), a is current again: True",
        "after a.close(), current() makes a new loop: True",
        "... and asking again gives the same one: True"]),
    "run_sync_outcomes": (run_sync_outcomes, [
        "run_sync(later) gives 'coroutine result'",
        "run_sync(a plain function, timeout) returns when it is done, not at the timeout: True",
        "run_sync(broken) raises ArithmeticError: from the coroutine",
        "run_sync(plain_raises) raises PermissionError: from the plain function",
        "run_sync(never done, timeout=0.2) raises TimeoutError on time: True",
        "run_sync again afterwards gives 'coroutine result'",
        "run_sync(slow) without a timeout, after one with a 0.1 s timeout, gives 'slow result'"]),
    "close_releases": (close_releases_the_loop_s_resources, [
        "20 closed loops left at most a few fds open: True"]),
    "closed_loop": (add_callback_on_a_closed_loop_is_dropped, [
        "add_callback on a closed loop from its own thread: dropped",
        "add_callback on a closed loop from another thread: dropped"]),
}
