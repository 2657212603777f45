"""Acceptance set for P04 · Future, coroutine and the Runner.

Event-order scenarios live in ``scenarios.py`` (the selftest replays them on real tornado 6);
each runs with ``run_sync`` on a fresh IOLoop in its own daemon thread, bounded.
"""
from __future__ import annotations

import gc
import weakref

import pytest

from tests.p04 import scenarios as sc
from tests.p04.support import resumption_frames, run_on_fresh_loop, run_scenario
from workbook.testkit import check, fail


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
def test_calling_a_coroutine_runs_it_to_its_first_yield_and_returns_a_future(api):
    expect_events(api, "first_yield")


# -- the Future contract ---------------------------------------------------------------------

@pytest.mark.checkpoint("p04.future")
def test_a_pending_future_has_no_result_and_a_done_one_keeps_it(impl):
    check(issubclass(impl.InvalidStateError, RuntimeError),
          "InvalidStateError must subclass RuntimeError")
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
def test_the_future_contract_seen_on_a_running_loop(api):
    expect_events(api, "future_contract")


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
def test_return_and_raise_return_set_the_result(api):
    expect_events(api, "return_values")


@pytest.mark.checkpoint("p04.returns")
def test_a_plain_function_s_value_or_exception_goes_into_the_future(api):
    expect_events(api, "plain_functions")


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
def test_an_uncaught_exception_reaches_the_coroutine_s_future(api):
    expect_events(api, "uncaught")


# -- nesting ------------------------------------------------------------------------------------

@pytest.mark.checkpoint("p04.nested")
def test_a_coroutine_waits_for_another_coroutine(api):
    expect_events(api, "nested")


@pytest.mark.checkpoint("p04.nested")
def test_an_exception_travels_up_through_nested_coroutines(api):
    expect_events(api, "nested_exception")


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
def test_multi_results_ignore_completion_order(api):
    def diagnose(got):
        if any(line.startswith(("list gives", "dict gives")) for line in got):
            return ("the results follow the order in which the Futures completed (or lost "
                    "their shape), not the order they were yielded in", "multi_completion_order")
        return None

    expect_events(api, "multi_shuffled", diagnose=diagnose)


@pytest.mark.checkpoint("p04.multi")
def test_empty_multis_are_done_at_once(api):
    expect_events(api, "multi_empty")


def _fail_fast(got):
    if any("ok was done by then: False" in line or "all done by then: False" in line
           for line in got):
        return ("the multi raised before every child had finished: like tornado 6, wait for "
                "all of them, then raise the first failure in yield order", None)
    return None


@pytest.mark.checkpoint("p04.multi")
def test_a_failing_child_still_waits_for_every_other_child(api):
    expect_events(api, "multi_waits_for_all", diagnose=_fail_fast)


@pytest.mark.checkpoint("p04.multi")
def test_several_failures_raise_the_first_in_yield_order_and_log_the_others(api):
    expect_events(api, "multi_first_failure", diagnose=_fail_fast)


@pytest.mark.checkpoint("p04.multi")
def test_a_dict_multi_with_failures_before_and_after_successes(api):
    expect_events(api, "multi_dict_failures", diagnose=_fail_fast)


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
def test_an_uncaught_bad_yield_fails_the_coroutine_s_future(api):
    expect_events(api, "uncaught_bad_yield")


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
    # Behaviour, not shape: a design may resume from varying depths, but the stack must not
    # grow with the number of done Futures (recursion adds at least a frame per Future).
    if depths[-1] - depths[0] < len(depths) // 2:
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
def test_ten_thousand_done_futures_in_a_row_do_not_recurse(api, impl):
    def diagnose(got):
        if "RecursionError" not in got:
            return None
        message, pitfall = _resumption_diagnosis(impl) or ("", "recursion_on_done")
        return ("RecursionError after a run of 10 000 done Futures"
                + (f": {message}" if message else ""), pitfall)

    expect_events(api, "ten_thousand", diagnose=diagnose)


@pytest.mark.checkpoint("p04.no_recursion")
def test_the_stack_does_not_grow_with_each_done_future(impl):
    diagnosis = _resumption_diagnosis(impl)
    if diagnosis is not None:
        fail(diagnosis[0], pitfall=diagnosis[1])


# -- run_sync --------------------------------------------------------------------------------------

@pytest.mark.checkpoint("p04.run_sync")
def test_run_sync_returns_the_result_or_raises_the_exception_or_timeout_error(api):
    expect_events(api, "run_sync_outcomes")


@pytest.mark.checkpoint("p04.run_sync")
def test_run_sync_raises_runtime_error_when_the_loop_stops_before_the_future_is_done(impl):
    """The loop stopped some other way (here by ``func`` itself, no timeout given) before
    ``func``'s Future is done: ``RuntimeError``, as tornado 6's "Event loop stopped before
    Future completed." -- not ``TimeoutError``, since no timeout passed."""

    def main():
        impl.IOLoop.current().stop()  # this turn is the loop's last
        return impl.Future()  # ... and nobody will ever finish this one

    try:
        got = run_on_fresh_loop(impl, main, what="run_sync(stopped early)")
    except NotImplementedError:  # (a RuntimeError too): a skeleton, reported as such
        raise
    except RuntimeError:
        return
    except Exception as exc:  # noqa: BLE001 - the wrong error is the finding
        fail(f"run_sync(func) whose loop was stopped before func's Future was done raised "
             f"{type(exc).__name__}: {exc}; expected RuntimeError (no timeout was given, so "
             f"none passed)")
    fail(f"run_sync(func) whose loop was stopped before func's Future was done returned "
         f"{got!r}; expected RuntimeError")


@pytest.mark.checkpoint("p04.run_sync")
def test_run_sync_returns_a_plain_function_s_value(impl):
    check(run_on_fresh_loop(impl, lambda: 99, what="run_sync(plain)") == 99,
          "run_sync(plain function) did not return its value (tornado 6 raises BadYieldError "
          "here; this exercise returns the value: tests/p04/TORNADO_DIFFERENCES.md)")


def _not_current(got):
    if any(line.startswith("a new loop a is current: False") for line in got):
        return ("IOLoop() must make the new loop its thread's current loop (as tornado 6 "
                "does); start() and run_sync() make it current while they run and then give "
                "the thread its previous current loop back", None)
    return None


@pytest.mark.checkpoint("p04.run_sync")
def test_the_current_loop_follows_tornado(api):
    expect_events(api, "current_loop", diagnose=_not_current)
