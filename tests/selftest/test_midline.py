"""Mid-line switch points (``explore.midline``): the explorer can stop a thread inside one
line, just after it read shared state, on every supported Python -- what a read-add-write
(``self.n += 1``) or a read-then-call (``self._items.append(x)``) needs to go wrong."""
from __future__ import annotations


from workbook.explore import bounded, midline
from workbook.explore.sched import Scheduler

SOURCE = '''
class Box:
    def __init__(self):
        self.n = 0
        self.items = []
        self.d = {"k": 0}

    def bump(self):
        self.n += 1

    def add(self, x):
        self.items.append(x)

    def bump_key(self):
        self.d["k"] += 1

    def plain(self):
        x = self.n
        return self.n
'''


def _load(tmp_path):
    path = tmp_path / "box.py"
    path.write_text(SOURCE)
    namespace: dict = {"__file__": str(path)}
    exec(compile(SOURCE, str(path), "exec"), namespace)
    return str(path), namespace["Box"]


def test_the_points_are_just_after_each_read_that_the_line_goes_on_using(tmp_path):
    _, box = _load(tmp_path)
    assert sorted(midline.points(box.bump.__code__).values()) == [".n"]
    assert sorted(midline.points(box.add.__code__).values()) == [".items"]  # not .append
    assert sorted(midline.points(box.bump_key.__code__).values()) == [".d", "an item (x[k])"]
    # a read that is only stored or returned: the next line is the same switch point
    assert midline.points(box.plain.__code__) == {}


def _lost_updates(tmp_path, *, opcodes: bool) -> list[int]:
    """Final counts of two threads bumping once each, over every single-deviation schedule."""
    path, box_class = _load(tmp_path)
    finals = []

    def run(choices):
        box = box_class()
        s = Scheduler(0, preempt=1.0, line_preempt=0.05, learner_files=frozenset({path}),
                      choices=choices, opcodes=opcodes)
        s.run([("setup", lambda: None), ("A", box.bump), ("B", box.bump)], first_alone=True)
        finals.append(box.n)
        return box.n

    list(bounded.each_first(run, 1, 100))
    return finals


def test_a_read_add_write_in_one_line_loses_an_update_only_with_midline_points(tmp_path):
    with_points = _lost_updates(tmp_path, opcodes=True)
    # after it, in the same process (3.12+: the code objects keep their instruction events)
    without = _lost_updates(tmp_path, opcodes=False)
    assert 1 in with_points, with_points  # stopped after reading n, the other bumps: lost
    assert without and set(without) == {2}, without  # lines alone: each += is atomic


PROGRAM = """
import sys
sys.path.insert(0, {root!r})
from workbook.explore.bounded import Choices
from workbook.explore.sched import Scheduler
ns = {{"__file__": {path!r}}}
exec(compile(open({path!r}).read(), {path!r}, "exec"), ns)
box = ns["Box"]()
s = Scheduler(0, preempt=1.0, line_preempt=0.05, learner_files=frozenset({{{path!r}}}),
              choices=Choices({script!r}, 1), opcodes=True)
s.run([("setup", lambda: None), ("A", box.bump), ("B", box.bump)])
print(box.n, [e.text for e in s.events if e.kind == "switch"])
"""


def test_a_schedule_that_loses_an_update_loses_it_as_a_fresh_process_s_first_run(tmp_path):
    # On 3.12 an opcode tracer set in a call event acts only from the code's next call: the
    # first run in a process (a replay) must stop where the exploring process stopped, on
    # every interpreter a graded run may use.
    import subprocess
    from pathlib import Path

    from workbook import pythons
    path, box_class = _load(tmp_path)
    lost: list[list[int]] = []

    def run(choices):
        box = box_class()
        s = Scheduler(0, preempt=1.0, line_preempt=0.05, learner_files=frozenset({path}),
                      choices=choices, opcodes=True)
        s.run([("setup", lambda: None), ("A", box.bump), ("B", box.bump)])
        if box.n == 1:
            lost.append([c for c, _, _ in choices.trail])

    list(bounded.each_first(run, 1, 100))
    assert lost
    root = str(Path(__file__).resolve().parents[2])
    program = PROGRAM.format(root=root, path=path, script=lost[0])
    found = pythons.find()
    assert found
    for interp in found:
        done = subprocess.run([str(interp.path), "-c", program], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, (interp.version, done.stderr)
        assert done.stdout.startswith("1 ") and "just after reading .n" in done.stdout, \
            (interp.version, done.stdout)
