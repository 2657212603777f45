"""The explorer (workbook/explore): its oracle, its replay token, and that a run is a pure
function of its scenario (the same token gives the same timeline)."""
from __future__ import annotations

import pytest

from workbook import manifest, variants
from workbook.explore import driver, p03
from workbook.explore.oracle import Call, linearize
from workbook.explore.scenario import Scenario, parse_token, token
from workbook.explore.sched import POLL_WAKES

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


def _toy_run(choices):
    """Two yes/no questions then a pick of three: the decisions it took."""
    first = choices.random() < 0.5
    second = choices.random() < 0.5
    return (first, second, choices.randrange(3))


def test_bounded_schedules_cover_each_schedule_within_the_bound_exactly_once():
    from workbook.explore import bounded
    for bound, expected in ((0, 3), (1, 9), (2, 12)):
        runs = list(bounded.schedules(_toy_run, bound, 1000))
        assert len(runs) == len(set(runs)) == expected
        assert all(first + second <= bound for first, second, _ in runs)
    assert len(list(bounded.schedules(_toy_run, 2, 5))) == 5  # the limit holds


def _two_threads(choices):
    """Threads A and B, each running two steps with a preemption point between them: the
    order in which the steps ran."""
    from workbook.explore.sched import Scheduler
    sched = Scheduler(0, preempt=0.5, choices=choices)
    order: list[str] = []

    def body(name):
        def steps():
            order.append(name + "1")
            sched.point()
            order.append(name + "2")
        return steps

    sched.run([("A", body("A")), ("B", body("B"))], first_alone=False)
    return " ".join(order)


def test_no_collection_runs_inside_a_run_so_earlier_garbage_cannot_shift_the_schedule():
    """A finalizer of garbage left before the run (a learner's ``__del__`` or
    ``weakref.finalize``) must not run in a controlled thread halfway through the run: its
    lines would be extra points, and the same scenario would take another schedule."""
    import gc

    from workbook.explore.sched import Scheduler

    seen: list[bool] = []

    class Leftover:
        def __init__(self) -> None:
            self.me = self  # a cycle: only a collection frees it

        def __del__(self) -> None:  # True: inside a controlled thread of a run
            seen.append(Scheduler.active is not None and Scheduler.active.task() is not None)

    assert gc.isenabled()
    for _ in range(50):
        Leftover()
    sched = Scheduler(0)

    def allocates() -> None:  # enough young objects to start many collections
        keep = [[i] for i in range(50_000)]
        sched.point()
        del keep

    sched.run([("A", allocates), ("B", allocates)], first_alone=False)
    assert gc.isenabled()
    gc.collect()
    assert len(seen) == 50 and not any(seen)


def test_a_preempted_thread_is_not_picked_again_at_once_so_no_schedule_is_walked_twice():
    from workbook.explore import bounded
    runs = list(bounded.schedules(_two_threads, 1, 100))
    # Picking the preempted thread again would repeat "A1 A2 B1 B2" (and "B1 B2 A1 A2").
    assert sorted(runs) == ["A1 A2 B1 B2", "A1 B1 B2 A2", "B1 A1 A2 B2", "B1 B2 A1 A2"]


def test_a_systematic_run_is_carried_by_its_token_and_replays_the_same_schedule():
    from workbook.explore import bounded
    module = p03.load(REFERENCE)
    sc = p03.pairs(True)[-1]
    outs = list(bounded.schedules(lambda ch: p03.run(module, sc, ch), 1, 30))
    last = outs[-1]
    assert last.scenario.script is not None and last.scenario.bound == 1
    owner, again = parse_token(token("p03", last.scenario))
    replayed = p03.run(module, again)
    assert [(e.task, e.text) for e in replayed.events] == [(e.task, e.text) for e in last.events]
    assert len({tuple((e.task, e.text) for e in o.events) for o in outs}) > 1


def test_a_capacity_that_is_not_a_positive_int_must_be_refused_and_an_int_subclass_works():
    from workbook.explore.scenario import BAD_CAPACITIES
    module = p03.load(REFERENCE)
    for bad in BAD_CAPACITIES:
        assert p03.run(module, Scenario(1, [], [], capacity_as=bad)).problem is None
    sub = Scenario(2, ["obj"], [[["take", None, None, 0]]], capacity_as="subclass")
    assert p03.run(module, sub).problem is None


def test_a_constructor_that_takes_bool_is_caught_and_a_strict_int_check_is_allowed(tmp_path):
    source = REFERENCE.read_text()
    check = "isinstance(capacity, bool) or not isinstance(capacity, int)"
    assert check in source
    takes_bool = tmp_path / "takes_bool.py"
    takes_bool.write_text(source.replace(check, "not isinstance(capacity, int)"))
    exact = tmp_path / "exact_int.py"
    exact.write_text(source.replace(check, "type(capacity) is not int"))
    bad = p03.run(p03.load(takes_bool), Scenario(1, [], [], capacity_as="True"))
    assert "BoundedBlockingQueue(True) was accepted" in bad.problem
    sub = Scenario(2, ["obj"], [[["take", None, None, 0]]], capacity_as="subclass")
    # "an int" read strictly (type(capacity) is int) refuses an int subclass: allowed
    assert p03.run(p03.load(exact), sub).problem is None
    assert p03.run(p03.load(exact), sub).error is None


def test_an_item_kept_by_someone_else_is_not_the_queues_doing():
    # The observer's case: a finished call's frame, or any outside holder, keeps a discarded
    # item alive; only a reference the queue (or its module) owns is the learner's.
    from workbook.explore.p03_judge import kept_alive
    from workbook.explore.values import Item

    def history(item):
        put = Call(1, "put(obj1)", "put", (item, None, "obj"), call=0, ret=1,
                   outcome=("return", None))
        put.meta["discarded"] = True
        return [put]

    class Queue:
        def __init__(self):
            self.slots = [None]

    outside, q = [Item(1)], Queue()
    assert kept_alive(history(outside[0]), [q]) is None
    q.slots[0] = Item(2)  # the queue's own ring still holds it: reported
    problem = kept_alive(history(q.slots[0]), [q])
    assert problem is not None and "obj2" in problem and "discarded" in problem


def test_a_queue_that_waits_outside_the_explorers_control_fails_the_checkpoint_and_says_where():
    # A ready-made queue.Queue blocks on locks of its own module, which the explorer does not
    # replace: the first thread that waits there never comes back to the scheduler.  A
    # search that cannot run proves nothing: the checkpoint fails, saying where it waits.
    from workbook.testkit.checks import Failure
    path = str(variants.materialize(
        variants.get(manifest.get("p03"), "pitfall", "ready_made_queue")))
    with pytest.raises(Failure) as failed:
        driver.check(p03, path)
    text = str(failed.value)
    assert text.startswith(
        "Exploration could not check your code, so this checkpoint cannot pass: T"), text
    assert (" waits outside a lock, a wait or the clock the explorer controls (a primitive of "
            "another module, such as a ready-made queue, or a real system call): ") in text, text
    assert "of your file: return self._inner.get()  # WRONG: queue.Queue does the waiting.\n" \
        in text, text


def test_a_thread_the_file_starts_in_a_run_is_scheduled_and_explored_with_the_others():
    # A threading.Timer delivers the deadline: correct, and explored like any other design
    # (it used to end the search at its first run, unexplored).
    from workbook.explore import p01
    path = dict(variants.alternates(manifest.get("p01")))["deadline_on_a_timer_thread"]
    report = driver.explore(p01, str(path))
    assert report.found is None and report.uncontrolled == "", report.uncontrolled
    assert report.runs > 1000, report.runs


#: A mistake could hide behind one thread that does nothing, started in the constructor (so
#: in the first run of every exploration): it used to end the search, passed.
_DECOY = """

import threading as _threading
_real_init = {cls}.__init__


def _init(self, *args, **kwargs):
    _real_init(self, *args, **kwargs)
    _threading.Thread(target=lambda: None, daemon=True).start()


{cls}.__init__ = _init
"""

#: Per problem: a wrong variant only exploration rejects, and the class whose constructor
#: starts the decoy.
_HIDDEN = {"p01": ("none_item_ends_drain", "OutputSink"),
           "p02": ("claim_without_lock", "Control"),
           "p03": ("second_shutdown_ignored", "BoundedBlockingQueue"),
           "p04": ("wake_outside_lock", "IOLoop")}


@pytest.mark.parametrize("pid", sorted(_HIDDEN))
def test_a_thread_started_to_hide_a_mistake_hides_nothing(pid, tmp_path):
    import importlib
    problem = manifest.get(pid)
    name, cls = _HIDDEN[pid]
    v = variants.get(problem, "wrong", name)
    assert set(v.fails) == {f"{pid}.explore"}  # nothing else rejects it
    path = tmp_path / f"{problem.module}.py"
    path.write_text(variants.apply(v) + _DECOY.format(cls=cls), "utf-8")
    report = driver.explore(importlib.import_module(f"workbook.explore.{pid}"), str(path))
    assert report.uncontrolled == "", report.uncontrolled
    assert report.found is not None, "the decoy thread hid the mistake"


#: The same, with a thread that waits where the explorer cannot see (a real select).
_BLOCKING_DECOY = _DECOY.replace(
    "_threading.Thread(target=lambda: None, daemon=True).start()",
    "_threading.Thread(target=__import__('select').select, args=([], [], [], 1e6),\n"
    "                      daemon=True).start()")


@pytest.mark.parametrize("pid", ["p01", "p03"])  # their constructors run inside a run
def test_a_thread_started_to_wait_out_of_sight_fails_the_checkpoint(pid, tmp_path):
    import importlib

    from workbook.testkit.checks import Failure
    problem = manifest.get(pid)
    name, cls = _HIDDEN[pid]
    path = tmp_path / f"{problem.module}.py"
    path.write_text(variants.apply(variants.get(problem, "wrong", name))
                    + _BLOCKING_DECOY.format(cls=cls), "utf-8")
    with pytest.raises(Failure, match="^Exploration could not check your code, so this "
                       "checkpoint cannot pass: Thread\\(select\\) waits outside "):
        driver.check(importlib.import_module(f"workbook.explore.{pid}"), str(path))


def test_the_steps_of_a_thread_the_file_starts_are_drawn_in_a_column_of_its_own(tmp_path):
    problem = manifest.get("p03")
    name, cls = _HIDDEN["p03"]
    path = tmp_path / f"{problem.module}.py"
    path.write_text(variants.apply(variants.get(problem, "wrong", name)) + _DECOY.format(
        cls=cls).replace("target=lambda: None", "target=_threading.Event().wait, args=(0.5,)"),
        "utf-8")
    found = driver.explore(p03, str(path)).found
    assert found is not None and found.names[-1] == "Thread(Event.wait)", found
    header = next(line for line in found.message().splitlines() if line.startswith("step"))
    assert header.split("|")[-1].strip() == "Thread(Event.wait)", header
    assert found.timeline()["actors"][-1] == "Thread(Event.wait)"
    helper = len(found.names) - 1
    assert [c[helper] for c in (s["do"] for s in found.timeline()["steps"]) if c[helper]] == [
        "waits in a Condition.wait() (timeout 0.5)", "its wait on a Condition times out"]


def test_a_thread_the_file_starts_is_joined_and_its_end_seen_on_the_virtual_clock():
    from workbook.explore import foreign, prims
    from workbook.explore.sched import Scheduler
    seen = []

    def helper():
        prims.sleep(0.5)
        seen.append(("helper done", prims.monotonic()))

    def body():
        t = foreign.Thread(target=helper)
        t.start()
        seen.append(("alive", t.is_alive()))
        t.join(0.1)
        seen.append(("after a short join", t.is_alive(), prims.monotonic()))
        t.join()
        seen.append(("joined", t.is_alive(), prims.monotonic()))
        prims.Timer(2.0, lambda: seen.append(("rang", prims.monotonic()))).start()

    info = Scheduler(seed=1).run([("setup", body)])
    assert info.ended == "finished", info
    # To the microsecond: each reading of the clock moves it by a nanosecond (prims.TICK).
    assert [tuple(round(x, 6) if type(x) is float else x for x in e) for e in seen] == [
        ("alive", True), ("after a short join", True, 1000.1), ("helper done", 1000.5),
        ("joined", False, 1000.5), ("rang", 1002.5)]


def test_two_readings_of_the_virtual_clock_differ_as_a_real_clocks_do():
    # Code that waits until the clock is strictly past a deadline ends at the deadline, as
    # on a real machine: it used to see the same instant for ever and be called spinning.
    from workbook.explore import prims
    from workbook.explore.sched import Scheduler
    seen = []

    def body():
        first = prims.monotonic()
        seen.append(prims.monotonic() > first)
        deadline = prims.monotonic() + 0.5
        while prims.monotonic() <= deadline:  # strictly past, not at
            prims.sleep(max(deadline - prims.monotonic(), 0.0))
        seen.append(round(prims.monotonic() - first, 6))

    info = Scheduler(seed=1).run([("setup", body)])
    assert info.ended == "finished", info
    assert seen == [True, 0.5]


def test_a_graded_run_explores_with_the_settings_pinned_before_the_learner_import(monkeypatch):
    # red team 2: a wrong solution set WORKBOOK_EXPLORE_REPLAY at import, to a scenario its
    # bug survives; a graded run reads the settings once, before the import (reporter)
    from workbook.explore import p03
    seen = {}

    def fake_explore(problem, path, *, seconds=None, seed=None, examples=None):
        seen.update(seconds=seconds, seed=seed)
        return driver.Report(runs=3, seconds=0.1)

    monkeypatch.setattr(driver, "explore", fake_explore)
    monkeypatch.setattr(driver, "replay", lambda *a: pytest.fail("replayed a token"))
    monkeypatch.setattr("workbook.testkit.note", lambda text: None)
    monkeypatch.setattr(driver, "PINNED", None)
    monkeypatch.setenv("WORKBOOK_EXPLORE_SEED", "17")
    driver.pin("17")
    monkeypatch.setenv("WORKBOOK_EXPLORE_REPLAY", "x1.anything")
    monkeypatch.setenv("WORKBOOK_EXPLORE_SECONDS", "0.001")
    monkeypatch.setenv("WORKBOOK_EXPLORE_SEED", "99")
    driver.check(p03, REFERENCE)
    assert seen == {"seconds": None, "seed": 17}


def _timed_waits(tmp_path, seconds: float):
    """The reference with every untimed wait turned into ``wait(seconds)`` in its loop."""
    text = REFERENCE.read_text()
    for old in ("self._wait(self._not_full)", "self._wait(self._not_empty)",
                "self._wait(cond)"):
        assert old in text
        text = text.replace(old, old[:-1] + f", {seconds})")
    tmp_path.mkdir()
    path = tmp_path / f"{manifest.get('p03').module}.py"
    path.write_text(text)
    return p03.load(path)


def test_a_waiter_that_wakes_every_millisecond_polls_and_one_that_wakes_every_20_ms_does_not(
        tmp_path):
    blocked = Scenario(1, ["obj"], [[["put", "obj", None, 0]]], seed=1)  # waits for good
    safety_net = p03.run(_timed_waits(tmp_path / "net", 0.02), blocked)
    assert safety_net.problem is None, safety_net.problem
    poller = p03.run(_timed_waits(tmp_path / "poll", 0.001), blocked)
    assert poller.problem is not None and "it polls" in poller.problem, poller.problem
    # ended at the evidence (a wait and its time-out each wake-up), not after 3 s of idling
    assert len(poller.events) <= 2 * POLL_WAKES + 10 < len(safety_net.events)


def test_a_long_run_of_one_step_or_one_pair_of_steps_is_shown_as_a_count():
    from workbook.explore.sched import Event
    from workbook.explore.timeline import collapse
    waits = [Event(i, 1, i / 10, "waits" if i % 2 else "times out") for i in range(1, 41)]
    events = [Event(0, 1, 0.0, "calls put(x)"), *waits, Event(41, 2, 4.1, "calls take()")]
    shown = [e.text for e in collapse(events)]
    assert shown == ["calls put(x)", "waits", "times out", "waits", "times out",
                     "… the same two steps 17 more times …", "waits", "times out",
                     "calls take()"]
    few = events[:6]  # four repeats: shown as they are
    assert collapse(few) == few


def test_the_scenarios_drawn_from_a_seed_do_not_depend_on_the_numbers_in_the_learner_file(
        tmp_path, monkeypatch):
    # Two copies of the reference, one with 300 extra numbers in its source (Hypothesis would
    # mix literal numbers of 100 or more from loaded local modules into its draws: a seed
    # drawn from 0..65535 could be one of them).  Each in a folder of its own, as a learner's.
    source = REFERENCE.read_text("utf-8")
    extra = "ODD = (" + ", ".join(str(n) for n in range(30_000, 30_300)) + ")\n"
    drawn: dict[str, list[str]] = {}
    run = p03.run
    for name, text in (("plain", source), ("odd", source + "\n" + extra)):
        path = tmp_path / name / REFERENCE.name
        path.parent.mkdir()
        path.write_text(text, "utf-8")
        seen: list[str] = []
        monkeypatch.setattr(p03, "run", lambda m, sc, ch=None, seen=seen: (
            seen.append(repr(sc)), run(m, sc, ch))[1])
        report = p03.explore(path)
        assert report.found is None and len(seen) >= report.runs
        drawn[name] = seen
    assert drawn["plain"] == drawn["odd"]
