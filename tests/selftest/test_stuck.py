"""The stuck detector: wrong variants that hang are failed at once, with a diagnosis that
names the threads, the learner lines and who holds what, in one panel per root cause; the
references are never called stuck.

The variants are diffs against the references, kept in tests/selftest/fixtures/."""
from __future__ import annotations

import re
from pathlib import Path

from rich.console import Console

from tests.selftest.conftest import checked
from workbook import ROOT, manifest, render, run, variants

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_file(problem_id: str, name: str) -> str:
    """The reference of ``problem_id`` with ``fixtures/<problem_id>_<name>.diff`` applied."""
    problem = manifest.get(problem_id)
    variant = variants.Variant(problem, "wrong", f"selftest-{name}",
                               FIXTURES / f"{problem_id}_{name}.diff", "", ())
    return str(variants.materialize(variant))


def report(result, problem_id: str) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(render.result_view(result, manifest.get(problem_id)))
    return console.export_text()


def failed(result):
    return [cp for cp in result.checkpoints if cp.status == "failed"]


def line_of(path: str, needle: str, after: int = 0) -> int:
    lines = Path(path).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if i > after and needle in text)


def test_a_put_that_takes_its_own_lock_twice_is_one_stuck_diagnosis_naming_both_lines():
    path = fixture_file("p01", "put_double_lock")
    result = checked("p01", path)
    outer = line_of(path, "self._lock.acquire()  # WRONG")
    inner = line_of(path, "with self._lock:", after=outer)
    bad = failed(result)
    assert len(bad) == len(result.checkpoints), "every checkpoint calls put()"
    # The explorer runs the sink under its own scheduler: no real thread hangs there, so it
    # is no stuck verdict but its counterexample, which names the same line.
    explored = next(cp for cp in bad if cp.id == "p01.explore")
    assert f"L{inner}: with self._lock:" in explored.message, explored.message
    assert "its own thread holds" in explored.message and "--replay" in explored.message
    bad = [cp for cp in bad if cp is not explored]
    stuck = [cp for cp in bad if cp.stuck]
    assert len(stuck) == len(bad), [(cp.id, cp.message) for cp in bad]
    # The hook's checkpoint nests two bounded waits (the loop's join of the blocked producer
    # inside the main thread's wait for the loop): whichever decides, the message carries
    # the verdict that names the learner lines.
    named = [cp for cp in stuck if f"p01_output_sink.py:{inner}" in cp.message
             and f"which this same thread took at line {outer}" in cp.message
             and "OutputSink.put()" in cp.message]
    assert len(named) == len(stuck), [(cp.id, cp.message) for cp in stuck]
    assert len({cp.cause for cp in named}) == 1, {cp.cause for cp in named}
    text = report(result, "p01")
    assert text.count(f"which this same thread took at line {outer}") == 1, text
    assert f"Same cause in {len(named)} checkpoints" in text or len(named) == 1


def test_an_enqueue_that_takes_the_lock_again_is_one_panel_and_no_spin_guess():
    path = fixture_file("p03", "insert_double_lock")
    result = checked("p03", path)
    inner = line_of(path, "with self._lock:  # WRONG")
    bad = failed(result)
    assert len(bad) == len(result.checkpoints)
    # The explorer runs the queue under its own scheduler: no real thread hangs there, so
    # it is no stuck verdict but its counterexample, which names the same line.
    explored = next(cp for cp in bad if cp.id == "p03.explore")
    assert f"L{inner}: with self._lock:  # WRONG" in explored.message, explored.message
    assert "still waiting" in explored.message and "--replay" in explored.message
    bad = [cp for cp in bad if cp is not explored]
    for cp in bad:
        assert cp.stuck, (cp.id, cp.message)
        # Decided by the detector, never by the per-test last resort: a test that sits out
        # run.TEST_TIMEOUT had a thread the detector did not see (a hooked main thread once).
        assert cp.seconds < run.TEST_TIMEOUT, (cp.id, cp.seconds)
        assert "_insert()" in cp.message and f":{inner}:" in cp.message, cp.message
        assert re.search(r"which this same thread took at line \d+ in "
                         r"BoundedBlockingQueue\.(put|offer)\(\)", cp.message), cp.message
        assert cp.pitfall != "spin_holding_lock", cp.message
    text = report(result, "p03")
    # one panel for the stuck cause, one for the explorer's counterexample of the same line
    assert text.count("╭") == 2, text
    assert f"Same cause in {len(bad)} checkpoints" in text
    assert "was spinning" not in text


def test_a_missing_notify_names_the_parked_thread_and_the_condition_it_waits_on():
    problem = manifest.get("p03")
    result = checked("p03", str(variants.pitfall_file(problem, "missing_notify")))
    stuck = [cp for cp in failed(result) if cp.stuck]
    assert stuck, [(cp.id, cp.message) for cp in failed(result)]
    messages = "\n".join(cp.message for cp in stuck)
    assert re.search(r"thread '[^']+' is blocked in BoundedBlockingQueue\.\w+\(\) at "
                     r"\S+\.py:\d+", messages), messages
    assert "waits for a notify on `" in messages, messages


def test_a_thread_that_sleeps_holding_the_lock_others_wait_for_is_named_with_its_lines(tmp_path):
    """The many-producers test of spin_holding_lock (its other tests fail sooner, on their
    own evidence): one thread sleeps inside `with self._lock`, six wait for the lock."""
    import subprocess
    problem = manifest.get("p03")
    path = variants.pitfall_file(problem, "spin_holding_lock")
    command = run.pytest_command(problem, path, tmp_path / "report.jsonl")
    out = subprocess.run([*command, "-k", "many_producers", "--tb=short"], cwd=ROOT,
                         env=run.child_env(), capture_output=True, text=True,
                         timeout=120).stdout
    found = re.search(r"thread '([^']+)' keeps `self\._lock` \(taken at line (\d+) in "
                      r"BoundedBlockingQueue\.(put|take)\(\)\) and never lets go, while "
                      r"6 thread\(s\) wait for it", out)
    assert found, out
    holder, line = found.group(1), int(found.group(2))
    assert line == line_of(str(path), "with self._lock:",
                           after=line_of(str(path), f"    def {found.group(3)}("))
    assert out.count(f"which thread '{holder}' took at line {line}") == 6, out
    assert "time.sleep(0.001)" in out, out


def test_a_cross_thread_call_that_never_wakes_the_loop_reads_as_a_sleeping_loop():
    problem = manifest.get("p01")
    result = checked("p01", str(variants.pitfall_file(problem, "asyncio_queue")))
    messages = "\n".join(cp.message or "" for cp in failed(result) if cp.stuck)
    assert "the event loop is asleep in select()" in messages, messages
    assert "ready but the loop was not woken" in messages, messages


def test_a_loop_asleep_with_items_queued_says_how_many_and_which_put_should_have_woken_it():
    problem = manifest.get("p01")
    path = str(variants.pitfall_file(problem, "flag_before_append"))
    result = checked("p01", path)
    messages = "\n".join(cp.message or "" for cp in failed(result) if cp.stuck)
    assert re.search(r"the loop is asleep in select\(\); \d+ items? (is|are) queued in the "
                     r"sink; no wakeup reached the loop after the last put\(\)", messages), messages
    assert f"(OutputSink.put, line {line_of(path, '    def put(')})" in messages, messages


def test_a_spinning_thread_is_reported_with_its_hottest_learner_line(tmp_path):
    """Directly through testkit: a learner function spins in a thread while a bounded wait
    waits for something it never does; the timeout names the thread and its hottest line.
    (The acceptance sets catch P01's never_clear spin earlier, by CPU, with their own words.)"""
    import subprocess
    import sys
    learner = tmp_path / "spinner.py"
    learner.write_text("import time\n\n\ndef spin(stop):\n"
                       "    while not stop():\n"
                       "        x = sum(range(50))\n")
    script = tmp_path / "drive.py"
    script.write_text(f"""
import sys, threading
sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(tmp_path)!r})
from workbook import testkit
import spinner
testkit.set_learner_file(spinner.__file__)
done = []
t = threading.Thread(target=spinner.spin, args=(lambda: done,), name="spinner", daemon=True)
t.start()
try:
    testkit.wait_until(lambda: False, 1.5, what="the spinner finishes")
except testkit.Failure as exc:
    print(exc)
    print("STUCK" if isinstance(exc, testkit.Stuck) else "NOT-STUCK")
done.append(1)
""")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60)
    assert re.search(r"thread 'spinner' was spinning: [\d.]+ s of CPU in [\d.]+ s, "
                     r"mostly at \S*spinner\.py:[56]", out.stdout), out.stdout + out.stderr
    assert "NOT-STUCK" in out.stdout, "a spinning thread is never stuck"


def test_two_waits_timing_out_together_each_carry_their_own_evidence(tmp_path):
    """A bounded wait returns what happened to *it*: wait A watches a spinner for most of
    its time, wait B starts once the spinner has ended; both time out at the same moment.
    Only A's failure names the spinner (the evidence once went through one global that the
    later of two waits overwrote)."""
    import subprocess
    import sys
    learner = tmp_path / "spinner.py"
    learner.write_text("def spin(stop):\n"
                       "    while not stop():\n"
                       "        x = sum(range(50))\n")
    script = tmp_path / "drive.py"
    script.write_text(f"""
import sys, threading, time
sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(tmp_path)!r})
from workbook import testkit
import spinner
testkit.set_learner_file(spinner.__file__)
stop, out = [], {{}}
def wait(name, timeout):
    try:
        testkit.wait_until(lambda: False, timeout, what=name)
    except testkit.WaitTimedOut as exc:
        out[name] = (str(exc), exc.timed_out.spinning)
    except BaseException as exc:
        out[name] = ("other", type(exc).__name__, str(exc))
def tick():  # a thread in short timed sleeps: the check can always still move
    while True:
        time.sleep(0.005)
threading.Thread(target=tick, daemon=True).start()
ends = time.monotonic() + 3.0
t = threading.Thread(target=spinner.spin, args=(lambda: stop,), name="spinner", daemon=True)
t.start()
a = threading.Thread(target=wait, args=("A", 3.0), daemon=True)
a.start()
time.sleep(2.4)  # a schedule, not a proof: the spinner's end is proven by its join
used = testkit.thread_cpu_seconds(t)
stop.append(1)
t.join(5)
assert not t.is_alive()
b = threading.Thread(target=wait, args=("B", max(0.05, ends - time.monotonic())), daemon=True)
b.start()
a.join(10); b.join(10)
for name in "AB":
    print(name, repr(out.get(name)))
print("CPU", used)
""")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60)
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line[:2] in ("A ", "B "))
    assert set(lines) == {"A", "B"} and "None" not in lines.values(), out.stdout + out.stderr
    assert "gave up after" in lines["B"] and "spinning" not in lines["B"], out.stdout
    used = float(out.stdout.rsplit("CPU ", 1)[1])
    if used >= 0.5:  # on a box so loaded that the spinner hardly ran, A has nothing to show
        assert "thread 'spinner' was spinning" in lines["A"], out.stdout


def test_a_misspelt_class_name_is_one_line(tmp_path):
    problem = manifest.get("p01")
    bad = tmp_path / problem.learner_file.name
    bad.write_text(problem.solution_file.read_text().replace("class OutputSink", "class OutputSnk"))
    result = checked("p01", str(bad))
    text = report(result, "p01")
    assert "defines no `OutputSink`" in text, text
    assert "╭" not in text, text  # no panel at all


def test_a_diagnosis_points_to_the_next_unopened_hint_level_up_to_the_checkpoints():
    assert render.hint_to_read(3, 0) == 1
    assert render.hint_to_read(3, 1) == 2
    assert render.hint_to_read(2, 3) == 2
    assert render.hint_to_read(1, 0) == 1


def test_long_panel_titles_are_cut_at_a_word():
    title = render.title_fit("put blocks while full (parked in a Condition) and resumes when "
                             "a slot frees up again after a take", 40)
    assert len(title) <= 40 and title.endswith("…")
    assert title[:-1] == title[:-1].rstrip() and not title[:-1].endswith(("Cond", "paus"))


def _blocked_writer(read_end_elsewhere: bool):
    """A thread writing into a full pipe, and what the kernel says it is blocked in: with the
    read end held by a child process only, or by this process too."""
    import os
    import subprocess
    import threading
    import time

    from workbook.stuck.procfs import syscall
    r, w = os.pipe()
    also = os.dup(w)  # a second descriptor of the same end (stdout and stderr on one pipe)
    child = subprocess.Popen(["sleep", "30"], stdin=r) if read_end_elsewhere else None
    if child is not None:
        os.close(r)
    thread = threading.Thread(target=lambda: os.write(w, b"x" * (1 << 20)), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        call = None
        while time.monotonic() < deadline:  # until the kernel shows it blocked in write()
            call = syscall(thread.native_id)
            if call is not None and call.name == "write":
                break
            time.sleep(0.01)
        return call
    finally:
        if child is not None:
            child.kill()
            child.wait()
        else:
            os.close(r)  # the writer gets EPIPE and ends
        thread.join(10)
        os.close(w)
        os.close(also)


def test_a_write_into_a_pipe_that_another_process_reads_is_not_called_stuck():
    """A check's output goes to a pipe its runner reads: a thread blocked writing there waits
    for another process, which may read at any moment (on a loaded box a graded run's
    import that printed a lot was called stuck).  A pipe whose both ends are here is the
    process's own affair: an untimed wait that only this process can end."""
    elsewhere = _blocked_writer(read_end_elsewhere=True)
    assert elsewhere is not None and elsewhere.name == "write" and elsewhere.timed is None
    here = _blocked_writer(read_end_elsewhere=False)
    assert here is not None and here.name == "write" and here.timed is False
