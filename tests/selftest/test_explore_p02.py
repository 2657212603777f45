"""The P02 explorer (workbook/explore/p02*.py): its judgement on hand-built histories, its
replay token, that a run is a pure function of its scenario, and that a shipped pitfall is
found and replays to the same timeline."""
from __future__ import annotations

import pytest

from workbook import manifest, variants
from workbook.explore import bounded, io, p02, tokens
from workbook.explore.oracle import Call
from workbook.explore.p02_judge import judge
from workbook.explore.p02_scenario import Scenario
from workbook.explore.sched import Scheduler

REFERENCE = manifest.get("p02").solution_file
LOOP = [["run", None, 0]]


def _record(calls, **fields):
    """A judged record of a run nobody made: only the calls (and what ``fields`` say)."""
    sched = Scheduler(0)
    rec = p02.Record(Scenario(["late"], None, [list(LOOP)]), sched, io.attach(sched))
    rec.calls = calls
    for key, value in fields.items():
        setattr(rec, key, value)
    return rec


def _press(task, call, ret, outcome=("return", None)):
    return Call(task, "request_stop()", "press", (), call=call, ret=ret, outcome=outcome)


def _look(task, call, ret, value):
    return Call(task, "stop_requested", "look", (), call=call, ret=ret, outcome=("return", value))


def test_the_state_must_be_explained_by_some_order_of_the_calls():
    assert judge(_record([_press(2, 1, 2), _look(3, 3, 4, True)])) is None
    assert judge(_record([_press(2, 1, 4), _look(3, 2, 3, False)])) is None  # overlapping
    stale = judge(_record([_press(2, 1, 2), _look(3, 3, 4, False)]))
    assert stale is not None and "no order of these calls" in stale


def test_a_press_never_raises_while_the_control_is_in_use_nor_stays_waiting():
    raised = judge(_record([_press(2, 1, 2, ("raise", RuntimeError("closed")))]))
    assert "while the control was still in use" in raised
    full = judge(_record([_press(2, 1, 2, ("raise", BlockingIOError(11, "full")))]))
    assert "never raises" in full
    sched_rec = _record([_press(2, 1, None)])
    sched_rec.sched.tasks = [None, None, type("T", (), {"waiting_what": "acquire of a lock"})()]
    assert "never returned (it waits in acquire of a lock)" in judge(sched_rec)


def test_a_drain_reads_once_at_most_4096_bytes_and_reports_what_it_read():
    def drain(nbytes_read, result):
        sched = Scheduler(0)
        world = io.attach(sched)
        reader = world.track(7, "socket")
        world.transfers = [io.Transfer(1, reader, 7, "recv", n, 2, 0.0) for n in nbytes_read]
        rec = p02.Record(Scenario([], None, [[["drain", None, 0]]]), sched, world, reader=reader)
        rec.calls = [Call(1, "drain()", "drain", (), call=1, ret=3, outcome=result)]
        return judge(rec)

    assert drain([5], ("return", 5)) is None
    assert drain([-1], ("return", 0)) is None
    assert "read the control 2 times" in drain([4096, 10], ("return", 4106))
    assert "at EOF" in drain([0], ("return", 0))
    assert drain([0], ("raise", ConnectionError("eof"))) is None
    assert "EAGAIN means empty" in drain([-1], ("raise", BlockingIOError(11, "again")))


def test_a_token_carries_its_scenario_and_replays_it():
    sc = Scenario(["late", "up"], "inf", [list(LOOP), [["press", None, 0.5], ["eof", None, 0]]],
                  early=1, bad="a shared socket", fault=[1, "wait", 2, "KeyboardInterrupt"],
                  signal=[1, 7], pause=[1, 3, 1], lag=[1, 4, 0.5], slow=0.001, jump=-100.0,
                  preempt=0.3, seed=9, script=[0, 1, 0], bound=1)
    owner, data = tokens.decode(tokens.encode("p02", sc))
    assert owner == "p02" and p02.from_data(data) == sc


def test_the_same_scenario_gives_the_same_run():
    sc = Scenario(["late", "up", "stuck"], 1.0,
                  [list(LOOP), [["connect", 0, 0.5], ["press", None, 0.5]], [["stray", 9000, 0]]],
                  preempt=0.3, seed=5)
    module = p02.load(REFERENCE)
    first, again = p02.run(module, sc), p02.run(module, sc)
    assert first.problem is None and len(first.events) > 10
    assert [(e.task, e.now, e.text, e.line) for e in first.events] == \
           [(e.task, e.now, e.text, e.line) for e in again.events]


def test_the_reference_survives_faults_signals_pauses_and_a_flood():
    module = p02.load(REFERENCE)
    base = dict(dials=["up", "late", "stuck"], timeout=None,
                threads=[list(LOOP), [["connect", 0, 0.5], ["press", None, 1.0]]])
    shapes = [Scenario(**base, fault=[1, kind, n, exc])
              for kind, n in (("selector", 1), ("register", 2), ("wait", 1), ("recv", 1),
                              ("unregister", 1), ("close", 2))
              for exc in ("OSError", "KeyboardInterrupt")]
    shapes += [Scenario(**base, signal=[1, k]) for k in (5, 25, 45)]
    shapes += [Scenario(["up"], None, [list(LOOP), [["at pause press", None, 0]]],
                        pause=[1, k, 0]) for k in (10, 40, 60)]
    shapes.append(Scenario(["late"], 0.5, [list(LOOP), [["flood", None, 0]]], slow=0.001,
                           preempt=0.3))
    for sc in shapes:
        out = p02.run(module, sc)
        assert out.problem is None and out.error is None, (sc.describe(), out.problem)
        texts = " ".join(e.text for e in out.events)
        if sc.fault:
            assert "injected into" in texts, sc.describe()  # the fault did land
        if sc.signal:
            assert "in a signal handler returns" in texts, sc.describe()
        if sc.pause:
            assert "is stopped before this line" in texts, sc.describe()


def test_a_pitfall_is_found_and_its_token_replays_the_same_timeline():
    variant = variants.get(manifest.get("p02"), "pitfall", "flag_only")
    path = variants.materialize(variant)
    report = p02.explore(path, examples=0)
    assert report.found is not None and "missed the stop" in report.found.problem
    message = report.found.message()
    assert "--replay x1." in message and "T1" in message and "(L" in message
    again = p02.replay(path, tokens.encode("p02", report.found.scenario))
    assert again.problem == report.found.problem
    assert [(e.task, e.text, e.line) for e in again.events] == \
           [(e.task, e.text, e.line) for e in report.found.events]


def test_a_dial_that_leaves_its_socket_to_the_garbage_collector_is_caught(tmp_path):
    """The defect the explorer found in the old reference: dial() raised (gaierror, a bad
    port) and left its socket open; the reference now closes it whatever it raises."""
    source = REFERENCE.read_text("utf-8")
    fixed = "    except BaseException:\n        sock.close()"
    assert fixed in source
    old = tmp_path / "old_dial.py"
    old.write_text(source.replace(fixed, "    except BaseException:\n        pass"))
    gai = Scenario(["up"], None, [list(LOOP)], fault=[0, "connect", 1, "OSError"])
    port = Scenario(["port 70000"], None, [list(LOOP)])
    for sc in (gai, port):
        assert p02.run(p02.load(REFERENCE), sc).problem is None
        problem = p02.run(p02.load(old), sc).problem
        assert problem is not None and "raised" in problem and "open" in problem, problem


def test_a_systematic_pair_carries_its_schedule_in_the_token():
    module = p02.load(REFERENCE)
    sc = p02.pairs(True)[0]
    outs = list(bounded.deviations(lambda ch: p02.run(module, sc, ch), 1, 6))
    last = outs[-1]
    assert last.scenario.script is not None and last.problem is None
    replayed = p02.run(module, p02.from_data(tokens.decode(tokens.encode("p02", last.scenario))[1]))
    assert [(e.task, e.text) for e in replayed.events] == [(e.task, e.text) for e in last.events]


def test_deviations_leave_the_default_schedule_at_exactly_one_point():
    def toy(choices):
        return (choices.random() < 0.5, choices.random() < 0.5, choices.randrange(3))

    runs = list(bounded.deviations(toy, 1, 100))
    assert runs[0] == (False, False, 0)
    assert sorted(runs[1:]) == sorted([(True, False, 0), (False, True, 0), (False, False, 1),
                                       (False, False, 2)])
    assert len(list(bounded.deviations(toy, 1, 3))) == 3  # the limit holds, spread


@pytest.mark.parametrize("again", [
    "            os.close(self._rfd)\n            os.close(self._wfd)\n",
    "            _close(self.reader)\n            self.reader.close()\n"
    "            _close(self.writer)\n"],
    ids=["by_number", "by_the_socket_object"])
def test_a_control_that_closes_its_raw_descriptors_again_after_run_is_named(tmp_path, again):
    # The raw-fds alternate closes by number once (its sockets let go first); closing the
    # saved numbers, or a socket object whose number is gone, instead closes them again --
    # numbers that by then may belong to another file of the program.
    from workbook.explore import driver
    problem = manifest.get("p02")
    source = (problem.alternates_dir / "raw_fds.py").read_text()
    once = "            _close(self.reader)\n            _close(self.writer)\n"
    assert once in source
    path = tmp_path / problem.learner_file.name
    if "reader.close" in again:  # _close takes the number without letting the object go
        detach = ("    fd = sock.detach()  # the object lets go, so it will never close a "
                  "reused number\n")
        assert detach in source
        source = source.replace(detach, "    fd = sock.fileno()  # WRONG: the object keeps it\n")
    path.write_text(source.replace(once, again))
    report = driver.explore(p02, str(path))
    assert report.found is not None, "a double close of raw descriptors went unseen"
    problem_text = report.found.problem
    assert "but that descriptor was closed already" in problem_text, problem_text
    assert "(Control.close() after run() has closed its sockets must not close it again)" \
        in problem_text, problem_text
    assert " again (it was " in report.found.message(), report.found.message()
