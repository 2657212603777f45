"""The explorer (workbook/explore): its oracle, its replay token, and that a run is a pure
function of its scenario (the same token gives the same timeline)."""
from __future__ import annotations

import pytest

from workbook import manifest, variants
from workbook.explore import driver, p03
from workbook.explore.oracle import Call, linearize
from workbook.explore.scenario import Scenario, parse_token, token

REFERENCE = manifest.get("p03").solution_file


def _counter_step(state, c):
    if c.kind == "inc":
        yield state + 1
    elif c.outcome == ("return", state):
        yield state


def test_the_oracle_accepts_an_overlapping_order_and_rejects_a_stale_read():
    inc = Call(1, "inc()", "inc", (), call=0, ret=3, outcome=("return", None))
    read = Call(2, "read()", "read", (), call=1, ret=2, outcome=("return", 1))
    assert linearize([inc, read], 0, _counter_step, lambda s, c: False) is not None
    late = Call(2, "read()", "read", (), call=4, ret=5, outcome=("return", 0))  # after inc
    assert linearize([inc, late], 0, _counter_step, lambda s, c: False) is None


def test_a_pending_call_must_be_blocked_in_the_model():
    inc = Call(1, "inc()", "inc", (), call=0, ret=1, outcome=("return", None))
    stuck = Call(2, "read()", "read", (), call=2)
    assert linearize([inc, stuck], 0, _counter_step, lambda s, c: s == 0) is None
    assert linearize([inc, stuck], 0, _counter_step, lambda s, c: s == 1) is not None


def test_a_token_carries_its_scenario():
    sc = Scenario(2, ["obj"], [[["put", "odd", None, 0.5]], [["poll", None, "inf", 0]]],
                  fault="Cancelled", late=True, spurious=1, preempt=0.3, seed=7)
    assert parse_token(token("p03", sc)) == ("p03", sc)
    with pytest.raises(ValueError):
        parse_token("x1.garbage!")


def test_the_same_scenario_gives_the_same_run():
    sc = Scenario(1, ["obj"], [[["take", None, None, 0], ["put", "obj", None, 0]],
                               [["poll", None, 1.0, 0]], [["offer", "0", 0.5, 0.5]]],
                  fault="KeyboardInterrupt", spurious=2, preempt=0.3, lines=True, seed=11)
    module = p03.load(REFERENCE)
    first, again = p03.run(module, sc), p03.run(module, sc)
    assert first.problem is None and first.events
    assert [(e.task, e.now, e.text, e.line) for e in first.events] == \
           [(e.task, e.now, e.text, e.line) for e in again.events]


def test_a_pitfall_is_found_and_its_token_replays_the_failure():
    variant = variants.get(manifest.get("p03"), "pitfall", "single_condition_notify")
    path = variants.materialize(variant)
    report = p03.explore(path, examples=0)
    assert report.found is not None and "still waiting" in report.found.problem
    message = report.found.message()
    assert "--replay x1." in message and "T3" in message
    again = p03.replay(path, token("p03", report.found.scenario))
    assert again.problem == report.found.problem


def test_the_seed_of_the_environment_draws_the_scenarios_and_is_named(monkeypatch):
    seen = {}

    def fake_explore(problem, path, *, seconds=None, seed=None, examples=None):
        seen["seed"] = seed
        return driver.Report(runs=3, seconds=0.1)

    notes = []
    monkeypatch.setattr(driver, "explore", fake_explore)
    monkeypatch.setattr("workbook.testkit.note", notes.append)
    monkeypatch.setenv("WORKBOOK_EXPLORE_SEED", "17")
    monkeypatch.delenv("WORKBOOK_EXPLORE_REPLAY", raising=False)
    driver.check(p03, REFERENCE)
    assert seen["seed"] == 17 and "(seed 17)" in notes[0]
    monkeypatch.delenv("WORKBOOK_EXPLORE_SEED")
    driver.check(p03, REFERENCE)
    assert seen["seed"] == p03.DEFAULT_SEED
