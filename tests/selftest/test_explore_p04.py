"""P04's explorer, piece by piece: the judge on histories written by hand, the model on a few
programs, the token, a shipped pitfall found and replayed, and the reference defects the
explorer found (a far deadline, a NaN delay) staying fixed."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from workbook import manifest, variants
from workbook.explore import p04, tokens
from workbook.explore.p04_draw import DELAYS, TIMEOUTS
from workbook.explore.p04_judge import Arrival, Observed, Seen, SeenWait, judge
from workbook.explore.p04_scenario import Scenario
from workbook.explore.timeline import render

PROBLEM = manifest.get("p04")
REFERENCE = PROBLEM.solution_file

#: main waits for F0, which T1 sets from a callback it adds after 0.5 s.
WOKEN = Scenario([["yield", ["F", 0], True]], threads=[[[0.5, ["add", 1, [], ["set", 0, "obj"]]]]])


def _history(*, ended: str = "ready", end_time: float = 0.5, wrote: int = 1,
             wakeups: int = 1, second_x: bool = False) -> Observed:
    """The run of WOKEN as a correct loop makes it, written out event by event: the loop
    sleeps in select(None) from step 5; T1 adds x1 at 0.5 s (steps 6-7); the loop wakes,
    runs x1, then main, then stops."""
    loop = ["IOLoop()", "IOLoop() made the loop", "run_sync(main, timeout=None)",
            "main starts", "main yields F0"]
    events = {"setup": [], "loop": [Seen(k, 0.0, t) for k, t in enumerate(loop)],
              "T1": [Seen(6, 0.5, "add_callback(x1)"), Seen(7, 0.5, "add_callback returns")]}
    if second_x:  # T1 adds x2 right after x1 (steps 8-9), and the loop runs x2 first
        events["T1"] += [Seen(8, 0.5, "add_callback(x2)"), Seen(9, 0.5, "add_callback returns")]
    after = (["x2 runs"] if second_x else []) + ["x1 runs", "F0.set_result(obj1)"]
    step = 10
    for text in after:
        events["loop"].append(Seen(step, end_time, text))
        step += 1
    waits = [SeenWait(5, 8 if not second_x else 10, None, ended, 0.0, end_time),
             SeenWait(step, step, 0.0, "now", end_time, end_time)]
    for text in ("main resumes with obj1", "main ends"):
        events["loop"].append(Seen(step, end_time, text))
        step += 1
    waits.append(SeenWait(step, step, 0.0, "now", end_time, end_time))
    for text in ("run_sync returns None", "close()"):
        events["loop"].append(Seen(step, end_time, text))
        step += 1
    arrivals = {"x1": Arrival("x1", "T1", ["add", 1, [], ["set", 0, "obj"]], 6, 7, 0.5, 0.5,
                              wrote=wrote)}
    if second_x:
        arrivals["x2"] = Arrival("x2", "T1", ["add", 2, [], None], 8, 9, 0.5, 0.5)
    return Observed(events, waits, arrivals, [], wakeups, wrote, [], True, "done")


def test_the_judge_accepts_a_correct_history_written_by_hand():
    assert judge(WOKEN, _history()) is None


def test_a_loop_that_wakes_only_at_its_timeout_lost_the_wakeup():
    problem = judge(WOKEN, _history(ended="timeout", end_time=1.0))
    assert problem is not None and problem.startswith("lost wakeup: T1 added x1 at 0.5 s"), problem


def test_a_count_that_differs_from_the_writes_is_reported():
    problem = judge(WOKEN, _history(wakeups=2))
    assert problem is not None and "wakeups_scheduled is 2" in problem, problem


def test_callbacks_of_one_thread_run_in_the_order_they_were_added():
    scenario = Scenario(WOKEN.main, threads=[[[0.5, ["add", 1, [], ["set", 0, "obj"]]],
                                              [0, ["add", 2, [], None]]]])
    problem = judge(scenario, _history(second_x=True))
    assert problem is not None and "x1 was added before x2 but ran after it" in problem, problem


def test_the_model_runs_a_program_as_the_contract_says():
    """A program whose order the chapter explains: moment gives up the turn (main resumes
    behind cb1), a done Future keeps it (main goes on at once), and a timeout due when the
    turn began runs after that turn's callbacks."""
    module = p04.load(REFERENCE)
    scenario = Scenario([["cb", 1, [], None], ["later", 2, 0, None], ["yield", ["moment"], True],
                         ["yield", ["done", "0"], True], ["return", "obj", "Return"]])
    out = p04.run(module, scenario)
    assert out.problem is None and out.error is None
    texts = [e.text for e in out.events if e.task == 1 and e.kind == "info"]
    start = texts.index("main yields moment")
    assert texts[start:start + 7] == ["main yields moment", "cb1 runs",
                                      "main resumes with None", "main yields a done Future (0)",
                                      "main resumes with 0", "main returns obj1", "t2 runs"], texts


def test_a_token_carries_a_scenario_and_its_problem():
    scenario = Scenario([["later", 1, "nan", None], ["yield", ["F", 0], False]], timeout="inf",
                        threads=[[[0.5, ["add", 1, ["kw", "odd"], ["stop"]]]]], jump=100.0,
                        script=[0, 1, 0], bound=1)
    owner, data = tokens.decode(tokens.encode("p04", scenario))
    assert owner == "p04" and p04.from_data(data) == scenario


def test_a_shipped_pitfall_is_found_and_its_token_replays_the_same_run():
    path = variants.pitfall_file(PROBLEM, "never_wake")
    report = p04.explore(path, examples=0)
    found = report.found
    assert found is not None and found.problem.startswith("lost wakeup"), found
    token = tokens.encode("p04", found.scenario)
    again = p04.replay(path, token)
    assert again.problem == found.problem
    assert render(again.events, again.names) == render(found.events, found.names)


@pytest.mark.parametrize("name, change", [
    ("a far deadline handed to poll as it is",
     ("        if wait is not None and wait > MAX_WAIT:", "        if False:")),
    ("a NaN delay pushed on the heap", ("        if delay != delay:\n", "        if False:\n")),
])
def test_the_reference_defects_found_by_exploring_stay_fixed(tmp_path, name, change):
    """Every delay and timeout edge value passes on the reference; the reference without
    its fix does not (select refused a sleep past 24.8 days; NaN stalled the timeouts)."""
    module = p04.load(REFERENCE)
    shapes = [s for s in p04.systematic() if not s.threads and not s.faults and not s.subs
              and (s.main[0][:1] == ["later"] and s.main[0][2] in DELAYS or s.timeout in TIMEOUTS)]
    assert all(p04.run(module, s).problem is None for s in shapes)
    old, new = change
    text = REFERENCE.read_text("utf-8")
    assert text.count(old) == 1
    broken = tmp_path / REFERENCE.name
    broken.write_text(text.replace(old, new), "utf-8")
    assert any(p04.run(p04.load(broken), s).problem for s in shapes), name


def test_each_task_has_its_own_thread_identity_and_locals():
    """Worker threads are reused run after run: identity and threading.local follow the
    task, so a loop made in one run is never 'current' in the next."""
    module = p04.load(REFERENCE)
    assert type(module._current).__module__ == "workbook.explore.p04_env"
    scenario = Scenario([["current"], ["return", "0", "return"]],
                        threads=[[[0, ["current"]]]], after=[["current"], ["close"]])
    for seed in range(3):
        out = p04.run(module, p04.reseed(scenario, seed))
        assert out.problem is None, out.problem
    shown = [e.text for e in out.events if "IOLoop.current()" in e.text]
    assert shown == ["IOLoop.current() is the loop", "IOLoop.current() is a new loop (its #1)",
                     "IOLoop.current() is the loop"] or sorted(shown) == sorted(
        ["IOLoop.current() is the loop", "IOLoop.current() is a new loop (its #1)",
         "IOLoop.current() is the loop"]), shown
    assert math.isfinite(out.events[-1].now) and Path(module.__file__) == REFERENCE.resolve()


def test_a_second_close_may_raise_but_closing_a_raw_descriptor_twice_is_named(tmp_path):
    # The eventfd alternate closes its raw descriptors once, guarded by a flag; without the
    # guard a second close() hands the same numbers to os.close again -- numbers that by
    # then may belong to another file of the program.
    alternate = PROBLEM.alternates_dir / "eventfd_and_deques.py"
    source = alternate.read_text()
    guard = ("            if self._is_closed:  # closed already: its descriptor numbers may "
             "be another's by now\n                return\n")
    assert guard in source
    path = tmp_path / PROBLEM.learner_file.name
    path.write_text(source.replace(guard, ""))
    from workbook.explore import driver
    report = driver.explore(p04, str(path))
    assert report.found is not None, "a double close of raw descriptors went unseen"
    problem = report.found.problem
    assert re.search(r"thread 'loop' closed fd \d+ at step \d+, but that "
                     r"descriptor was closed already \(the loop's \w+ fd \d+, closed at step",
                     problem), problem
    assert "close each descriptor once (a second close() of the loop must not close it " \
        "again)" in problem, problem
    assert report.found.scenario.describe().endswith("close(); close()"), \
        report.found.scenario.describe()
    # ... while the guarded alternate (whose second close does nothing) passes, and one
    # whose second close raises without closing anything is the contract's silence
    raising = tmp_path / "raising" / PROBLEM.learner_file.name
    raising.parent.mkdir()
    raising.write_text(source.replace(guard, guard.replace(
        "return", "raise RuntimeError('the loop is closed already')")))
    assert driver.explore(p04, str(raising)).found is None
