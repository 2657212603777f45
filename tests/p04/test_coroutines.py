"""Acceptance set for P04 · Future, coroutine and the Runner.

Event-order scenarios live in ``scenarios.py`` (the selftest replays them on real tornado 6);
each runs with ``run_sync`` on a fresh IOLoop in its own daemon thread, bounded.
"""
from __future__ import annotations

import gc
import time
import weakref

import pytest

from tests.p04 import scenarios as sc
from tests.p04.support import resumption_frames, run_on_fresh_loop, run_scenario
from workbook.testkit import BOUND, check, fail, join, start_daemon


def expect_events(api, name: str, *, pitfall: str | None = None, diagnose=None):
    """Run scenario ``name``; fail with a diagnosis unless it records tornado's events."""
    scenario, want = sc.SCENARIOS[name]
    got, result = run_scenario(api, scenario, pitfall=pitfall)
    if got != want:
        extra = diagnose(got) if diagnose else None
        message, named = extra if extra else ("", pitfall)
        fail(f"{scenario.__doc__.strip()}\n  real tornado records: {want}\n  yours recorded:      "
             f"{got}" + (f"\n  {message}" if message else ""), pitfall=named)
    return result


# -- asyn_sum ---------------------------------------------------------------------------------

@pytest.mark.checkpoint("p04.asyn_sum")
def test_the_seed_asyn_sum_program_prints_its_lines_in_tornado_order(api):
    expect_events(api, "asyn_sum")


@pytest.mark.checkpoint("p04.asyn_sum")
def test_calling_a_coroutine_runs_it_to_its_first_yield_and_returns_a_future(impl, api):
    steps = []

    @impl.coroutine
    def body():
        steps.append("body runs")
        yield impl.Future()  # never completed

    def main():
        future = body()
        steps.append("call returned")
        return future.done(), all(hasattr(future, m) for m in ("done", "result", "add_done_callback"))

    done, is_future = run_on_fresh_loop(impl, main, what="calling a coroutine")
    check(steps == ["body runs", "call returned"],
          f"calling the coroutine recorded {steps}: the generator must run synchronously up "
          "to its first yield, inside the call")
    check(is_future and not done,
          "calling a coroutine that waits on a pending Future must return a pending Future")


# -- the Future contract ---------------------------------------------------------------------

@pytest.mark.checkpoint("p04.future")
def test_a_pending_future_has_no_result_and_a_done_one_keeps_it(impl):
    f = impl.Future()
    check(not f.done(), "a new Future says it is done")
    for method in ("result", "exception"):
        try:
            getattr(f, method)()
        except impl.InvalidStateError:
            pass
        else:
            fail(f"{method}() on a pending Future did not raise InvalidStateError")
    f.set_result(42)
    check(f.done() and f.result() == 42 and f.exception() is None,
          f"after set_result(42): done()={f.done()}, result()={f.result()!r}")
    g = impl.Future()
    err = ValueError("x")
    g.set_exception(err)
    check(g.done() and g.exception() is err, "set_exception(e): exception() must return e")
    try:
        g.result()
    except ValueError as e:
        check(e is err, "result() raised a different exception than the one set")
    else:
        fail("result() of a failed Future did not raise its exception")


@pytest.mark.checkpoint("p04.future")
def test_a_future_completes_only_once(impl):
    for first in ("set_result", "set_exception"):
        for second in ("set_result", "set_exception"):
            f = impl.Future()
            arg = {"set_result": 1, "set_exception": KeyError("k")}
            getattr(f, first)(arg[first])
            try:
                getattr(f, second)(arg[second])
            except impl.InvalidStateError:
                pass
            else:
                fail(f"{second}() after {first}() did not raise InvalidStateError")
            check(f.exception() is None if first == "set_result" else
                  isinstance(f.exception(), KeyError),
                  f"a refused {second}() after {first}() changed the outcome")


@pytest.mark.checkpoint("p04.future")
def test_callbacks_run_once_each_in_registration_order_when_the_result_is_set(impl):
    f = impl.Future()
    calls = []
    for name in "abc":
        f.add_done_callback(lambda fut, name=name: calls.append((name, fut.result())))
    check(calls == [], f"callbacks ran before the Future was done: {calls}")
    f.set_result(5)
    check(calls == [("a", 5), ("b", 5), ("c", 5)],
          f"callbacks after set_result(5): {calls}, expected a, b, c once each")
    g = impl.Future()
    g.add_done_callback(lambda fut: calls.append(("failed", type(fut.exception()).__name__)))
    g.set_exception(KeyError("k"))
    check(calls[-1] == ("failed", "KeyError"), "a callback did not run on set_exception")


@pytest.mark.checkpoint("p04.future")
def test_a_callback_added_to_a_done_future_runs_at_once(impl):
    f = impl.Future()
    f.set_result("ready")
    calls = []
    f.add_done_callback(lambda fut: calls.append(fut.result()))
    check(calls == ["ready"],
          f"add_done_callback on a done Future: the callback ran {len(calls)} times, expected "
          "once, at once", pitfall="done_callback_never_called")


@pytest.mark.checkpoint("p04.future")
def test_a_failing_callback_is_logged_and_the_others_still_run(impl, logged):
    f = impl.Future()
    calls = []

    def broken(fut):
        calls.append("broken")
        raise RuntimeError("deliberately broken callback")

    f.add_done_callback(lambda fut: calls.append("first"))
    f.add_done_callback(broken)
    f.add_done_callback(lambda fut: calls.append("last"))
    try:
        f.set_result(1)
    except RuntimeError:
        fail("the exception of a done callback escaped from set_result",
             pitfall="one_callback_stops_rest")
    check(calls == ["first", "broken", "last"],
          f"callbacks that ran: {calls}; a failing callback must not stop the rest",
          pitfall="one_callback_stops_rest")
    check(any(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in logged),
          "the callback's exception was not logged (logging, with its exception)")


@pytest.mark.checkpoint("p04.future")
def test_callbacks_are_released_once_they_have_run(impl):
    class Callback:
        def __call__(self, fut):
            pass

    f = impl.Future()
    cb = Callback()
    ref = weakref.ref(cb)
    f.add_done_callback(cb)
    del cb
    f.set_result(None)
    gc.collect()
    check(ref() is None, "the Future still holds its callback after running it")


# -- return, Return, exceptions -----------------------------------------------------------------

@pytest.mark.checkpoint("p04.returns")
def test_return_and_raise_return_set_the_result(impl):
    @impl.coroutine
    def returns():
        yield impl.moment
        return "plain return"

    @impl.coroutine
    def raises_return():
        yield impl.moment
        raise impl.Return("Return(value)")

    @impl.coroutine
    def bare_return():
        yield impl.moment
        raise impl.Return()

    @impl.coroutine
    def early():
        return "before any yield"
        yield  # a generator that returns before its first yield

    @impl.coroutine
    def main():
        return [(yield returns()), (yield raises_return()), (yield bare_return()),
                (yield early())]

    got = run_on_fresh_loop(impl, main, what="coroutines that return")
    check(got == ["plain return", "Return(value)", None, "before any yield"],
          f"results: {got}")
    check(impl.Return(3).value == 3 and impl.Return().value is None, "Return(v).value wrong")


@pytest.mark.checkpoint("p04.returns")
def test_a_plain_function_s_value_or_exception_goes_into_the_future(impl):
    @impl.coroutine
    def value():
        return 7

    @impl.coroutine
    def raises():
        raise KeyError("plain")

    def main():
        a, b = value(), raises()
        return a.done() and a.result(), b.done() and type(b.exception()).__name__

    got = run_on_fresh_loop(impl, main, what="plain functions under @coroutine")
    check(got == (7, "KeyError"), f"a plain function returning 7 and one raising KeyError "
          f"gave {got}; both Futures must be done at once, the exception must not escape")


@pytest.mark.checkpoint("p04.returns")
def test_exceptions_are_thrown_into_the_generator_which_may_catch_them(api):
    def diagnose(got):
        if "careful caught boom" not in got:
            return ("the generator never saw the exception at its yield: throw() it into the "
                    "generator instead of failing the coroutine's Future directly",
                    "exceptions_not_thrown")
        return None

    expect_events(api, "exceptions", diagnose=diagnose)


@pytest.mark.checkpoint("p04.returns")
def test_an_uncaught_exception_reaches_the_coroutine_s_future(impl):
    err = LookupError("uncaught")

    @impl.coroutine
    def before_yield():
        raise err
        yield

    @impl.coroutine
    def after_yield():
        yield impl.moment
        raise err

    def main():
        first, second = before_yield(), after_yield()
        check(first.done() and first.exception() is err,
              "an exception raised before the first yield must go into the Future at once")
        return second

    try:
        run_on_fresh_loop(impl, main, what="a coroutine that raises")
    except LookupError as e:
        check(e is err, "run_sync raised a different exception object")
    else:
        fail("the coroutine's exception did not reach its Future")


# -- nesting ------------------------------------------------------------------------------------

@pytest.mark.checkpoint("p04.nested")
def test_a_coroutine_waits_for_another_coroutine(api):
    expect_events(api, "nested")


@pytest.mark.checkpoint("p04.nested")
def test_an_exception_travels_up_through_nested_coroutines(impl):
    @impl.coroutine
    def level(n):
        if n == 0:
            yield impl.moment
            raise ZeroDivisionError("deep")
        return (yield level(n - 1))

    @impl.coroutine
    def main():
        try:
            yield level(5)
        except ZeroDivisionError as e:
            return f"caught {e}"
        return "nothing raised"

    got = run_on_fresh_loop(impl, main, what="five nested coroutines")
    check(got == "caught deep", f"an exception 5 levels down gave {got!r} at the top")


# -- multi ------------------------------------------------------------------------------------

def _multi_diagnosis(got):
    for line in got:
        if line.startswith("list gives") and line != "list gives ['r0', 'r1', 'r2']":
            return ("the list's results follow the order in which the Futures completed",
                    "multi_completion_order")
    return None


@pytest.mark.checkpoint("p04.multi")
def test_list_and_dict_results_keep_the_yield_order(api):
    expect_events(api, "multi", diagnose=_multi_diagnosis)


@pytest.mark.checkpoint("p04.multi")
def test_multi_results_ignore_completion_order(impl):
    @impl.coroutine
    def main():
        loop = impl.IOLoop.current()
        futures = [impl.Future() for _ in range(5)]
        for i in (3, 0, 4, 1, 2):
            loop.add_callback(futures[i].set_result, i * 10)
        named = {k: impl.Future() for k in "pqr"}
        for k in "rqp":
            loop.add_callback(named[k].set_result, k.upper())
        return (yield futures), (yield named)

    as_list, as_dict = run_on_fresh_loop(impl, main, what="multi with shuffled completions")
    check(as_list == [0, 10, 20, 30, 40],
          f"yield [f0..f4] completed as 3, 0, 4, 1, 2 gave {as_list}",
          pitfall="multi_completion_order")
    check(as_dict == {"p": "P", "q": "Q", "r": "R"} and list(as_dict) == ["p", "q", "r"],
          f"yield {{p, q, r}} completed r, q, p gave {as_dict}", pitfall="multi_completion_order")


@pytest.mark.checkpoint("p04.multi")
def test_empty_multis_are_done_at_once_and_the_first_failure_propagates(impl):
    @impl.coroutine
    def main():
        empty = (yield []), (yield {})
        loop = impl.IOLoop.current()
        ok, bad = impl.Future(), impl.Future()
        loop.add_callback(bad.set_exception, ValueError("child failed"))
        try:
            yield [ok, bad]
        except ValueError as e:
            loop.add_callback(ok.set_result, 1)  # completing the other one later is harmless
            yield impl.moment
            return empty, str(e)
        return empty, "no exception"

    got = run_on_fresh_loop(impl, main, what="empty and failing multis")
    check(got == (([], {}), "child failed"),
          f"yield [] / yield {{}} / a failing child gave {got}")


# -- moment and turns -------------------------------------------------------------------------

@pytest.mark.checkpoint("p04.moment")
def test_two_coroutines_yielding_done_futures_run_one_after_the_other(api):
    expect_events(api, "done_futures")


@pytest.mark.checkpoint("p04.moment")
def test_two_coroutines_yielding_moment_take_turns(api):
    expect_events(api, "moments")


@pytest.mark.checkpoint("p04.moment")
def test_yielding_none_is_the_same_as_yielding_moment(api):
    expect_events(api, "none_moments")


def _starved(got):
    if "the spinner gave up" in got:
        return (f"the spinner ran {sc.SPIN_CAP} times before the due timeout fired: "
                "callbacks added during a turn ran in that same turn", "same_iteration")
    return None


@pytest.mark.checkpoint("p04.moment")
def test_a_coroutine_spinning_on_moment_cannot_starve_a_timeout(api):
    spins = expect_events(api, "moment_spinner", diagnose=_starved)
    check(spins <= 3, f"the due timeout fired only after {spins} spins of yield moment "
          "(expected within 2 turns)", pitfall="same_iteration")


@pytest.mark.checkpoint("p04.moment")
def test_a_callback_re_adding_itself_cannot_starve_a_timeout(api):
    spins = expect_events(api, "callback_spinner", diagnose=_starved)
    check(spins <= 3, f"the due timeout fired only after {spins} turns of a callback that "
          "re-adds itself (expected within 2 turns)", pitfall="same_iteration")


# -- bad yields ------------------------------------------------------------------------------------

@pytest.mark.checkpoint("p04.bad_yield")
def test_bad_yields_raise_bad_yield_error_at_the_yield(api, impl):
    expect_events(api, "bad_yields")
    check(issubclass(impl.BadYieldError, TypeError), "BadYieldError must subclass TypeError")


@pytest.mark.checkpoint("p04.bad_yield")
def test_an_uncaught_bad_yield_fails_the_coroutine_s_future(impl):
    @impl.coroutine
    def careless():
        yield object()

    try:
        run_on_fresh_loop(impl, careless, what="a coroutine yielding object()")
    except impl.BadYieldError:
        return
    fail("yielding object() and not catching the error must fail the coroutine's Future "
         "with BadYieldError")


# -- the trampoline ------------------------------------------------------------------------------

def _done(impl, value):
    future = impl.Future()
    future.set_result(value)
    return future


def _resumption_diagnosis(impl) -> tuple[str, str | None] | None:
    """Resume a generator after 50 done Futures; (message, pitfall) if the stack grows."""
    seen = []

    @impl.coroutine
    def probe():
        for i in range(50):
            yield _done(impl, i)
            seen.append(resumption_frames())

    run_on_fresh_loop(impl, probe, what="50 done Futures")
    if len(seen) != 50:
        return (f"a coroutine yielding 50 done Futures was resumed {len(seen)} times", None)
    depths = [d for d, _ in seen[1:]]
    if len(set(depths)) <= 1:
        return None
    runs = [r for _, r in seen[1:]]
    reentered = runs[-1] > runs[0]
    return (f"after each done Future the generator was resumed from a deeper stack (depth "
            f"{depths[0]} -> {depths[-1]} over {len(depths)} Futures)"
            + ("; run() was entered again while it was still running: keep a running flag "
               "and let the outer loop pick the result up" if reentered else
               "; a done Future must be handled by the run() loop, not by a nested call"),
            "no_running_guard" if reentered else "recursion_on_done")


@pytest.mark.checkpoint("p04.no_recursion")
def test_ten_thousand_done_futures_in_a_row_do_not_recurse(impl):
    @impl.coroutine
    def add_up(n):
        total = 0
        for i in range(n):
            total += yield _done(impl, i)
        return total

    try:
        got = run_on_fresh_loop(impl, lambda: add_up(10_000), what="10 000 done Futures")
    except RecursionError:
        message, pitfall = _resumption_diagnosis(impl) or ("", "recursion_on_done")
        fail("RecursionError after a run of 10 000 done Futures"
             + (f": {message}" if message else ""), pitfall=pitfall)
    check(got == sum(range(10_000)), f"the sum of 0..9999 came out as {got!r}")


@pytest.mark.checkpoint("p04.no_recursion")
def test_each_done_future_resumes_the_generator_from_the_same_stack_depth(impl):
    diagnosis = _resumption_diagnosis(impl)
    if diagnosis is not None:
        fail(diagnosis[0], pitfall=diagnosis[1])


# -- run_sync --------------------------------------------------------------------------------------

@pytest.mark.checkpoint("p04.run_sync")
def test_run_sync_returns_the_result_of_a_coroutine_or_a_plain_function(impl):
    @impl.coroutine
    def later():
        yield impl.moment
        return "coroutine result"

    check(run_on_fresh_loop(impl, later, what="run_sync(coroutine)") == "coroutine result",
          "run_sync(coroutine function) did not return the coroutine's result")
    check(run_on_fresh_loop(impl, lambda: 99, what="run_sync(plain)") == 99,
          "run_sync(plain function) did not return its value")


@pytest.mark.checkpoint("p04.run_sync")
def test_run_sync_raises_the_exception_of_the_function(impl):
    @impl.coroutine
    def broken():
        yield impl.moment
        raise ArithmeticError("from the coroutine")

    def plain():
        raise PermissionError("from the plain function")

    for fn, exc_type in ((broken, ArithmeticError), (plain, PermissionError)):
        try:
            run_on_fresh_loop(impl, fn, what=f"run_sync({fn.__name__})")
        except exc_type:
            continue
        fail(f"run_sync({fn.__name__}) did not raise its {exc_type.__name__}")


@pytest.mark.checkpoint("p04.run_sync")
def test_run_sync_raises_timeout_error_when_the_timeout_passes(impl):
    def body():
        loop = impl.IOLoop.current()
        start = time.monotonic()
        try:
            loop.run_sync(impl.Future, timeout=0.2)  # a Future nobody completes
        except TimeoutError:
            return "timeout", time.monotonic() - start
        finally:
            loop.close()
        return "returned", time.monotonic() - start

    outcome, elapsed = join(start_daemon(body, name="ioloop"), 2 * BOUND,
                            what="run_sync(never-done, timeout=0.2)")
    check(outcome == "timeout", "run_sync with a Future that never completes returned "
          "instead of raising TimeoutError")
    check(0.19 <= elapsed <= 0.2 + 1.5,
          f"run_sync(timeout=0.2) raised TimeoutError after {elapsed:.2f} s")
