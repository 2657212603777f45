"""P04's event-order scenarios, each written once against a small adapter (`api`).

The acceptance set runs them on the learner's module; the selftest runs the same functions
on real tornado 6 (`tests/selftest/test_p04_tornado_oracle.py`) and asserts the same
order.  A scenario takes `(api, log)` and returns `main`, a coroutine function that
`api.run` drives with `run_sync` on a fresh loop in its own thread.

What a scenario may use: `api.coroutine`, `api.Future`, `api.moment`, `api.Return`,
`api.BadYieldError`, `api.loop()` (the running loop: `add_callback`, `add_future`,
`call_later`, `remove_timeout`) and `api.done(value)` (an already-done Future).
Only behaviour that tornado 6 and this exercise share goes in here: tornado 6's Future is
asyncio's, which schedules its callbacks instead of calling them inline, so the Future's
own contract is checked elsewhere.
"""
from __future__ import annotations

from typing import Callable

SPIN_CAP = 10_000  # a spinner gives up after this many turns (a starved timeout)


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

    @api.coroutine
    def main():
        for bad in (42, "text", [api.done(1), 2]):
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
        finished = api.Future()
        loop.call_later(0.03, lambda: log("30 ms"))
        removed = loop.call_later(0.02, lambda: log("20 ms (removed)"))
        loop.call_later(0.01, lambda: log("10 ms"))
        loop.call_later(0.04, lambda: (log("40 ms"), finished.set_result(None)))
        loop.remove_timeout(removed)
        yield finished

    return main


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
        "BadYieldError for int", "BadYieldError for str", "BadYieldError for list"]),
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
}
