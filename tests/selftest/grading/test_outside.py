"""The judge inside the run (its signature, its refusals) and the grader's outside view of a
run, compared with what the run reported: each impossibility named, an honest run passing
whole.  No sandbox: the judge runs in a child Python of its own, the rest on hand-made
stamps."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbook import ROOT, manifest
from workbook.grading import judging, protocol
from workbook.grading.sandbox import outside, runner
from workbook.grading.sandbox.limits import Limits

P01 = manifest.get("p01")
KEY = b"k" * 32

# A child Python: the judge armed with a classifier that calls one file (learner.py) the
# submission's and every other the harness's, and routes through a module of its own
# (``tests.fake``: ``send`` called by ``start``/``end``); then asked for records in every way
# the red teams found: straight from the submission, through the harness's own sender, from a
# thread of C callables, from code compiled under the harness's file name, and a note whose
# text is a forged test record, twelve times in one test.
_JUDGE = r'''
import json, os, sys, threading, types
sys.path.insert(0, sys.argv[1])
from workbook.grading.sandbox import judge
report_r, report_w = os.pipe()
key_r, key_w = os.pipe()
os.write(key_w, b"k" * 32)
os.close(key_w)
fake = sys.modules["tests.fake"] = types.ModuleType("tests.fake")
exec(compile("import sys\n"
             "def send(kind):\n    sys.audit('workbook.report', kind, json.dumps({'event': kind}), None)\n"
             "def start():\n    send('start')\n"
             "def end():\n    send('end')\n", "/x/fake.py", "exec"), vars(fake))
fake.json = json
judge.install(lambda name: "foreign" if name.endswith("learner.py") else "harness", tuple,
              report_w, key_r, routes={"report start": (("tests.fake", "send"),
                                                        ("tests.fake", "start")),
                                       "report end": (("tests.fake", "send"),
                                                      ("tests.fake", "end"))})
learner = {"fake": fake}
exec(compile("import sys\n"
             "def end():\n    sys.audit('workbook.report', 'end', '{\"event\":\"end\"}', None)\n"
             "def verdict():\n    sys.audit('workbook.verdict', 't::x')\n"
             "def through():\n    fake.send('end')\n", "/x/learner.py", "exec"), learner)
disguised = {"fake": fake}
exec(compile("def end():\n    fake.end()\n", "/x/fake.py", "exec"), disguised)
fake.start()
thread_outcome = []
threading.excepthook = lambda args: thread_outcome.append(str(args.exc_value))


def in_a_thread():
    thread = threading.Thread(target=fake.end)  # the harness's own path, another thread
    thread.start()
    thread.join()
    if thread_outcome:
        raise RuntimeError(thread_outcome[0])


outcomes = []
for ask in (learner["end"], learner["verdict"], learner["through"], in_a_thread,
            disguised["end"], fake.end,
            lambda: [sys.audit("workbook.report", "note", json.dumps(
                {"event": "test", "nodeid": "t::x", "outcome": "passed"}), None)
                for _ in range(12)],
            lambda: sys.audit("workbook.report", "note", ["not", "a", "text"], None)):
    try:
        ask()
        outcomes.append("sent")
    except RuntimeError as exc:
        outcomes.append("refused" if "workbook sandbox" in str(exc) else repr(exc))
fake.end()
os.close(report_w)
print(json.dumps({"outcomes": outcomes, "lines": os.read(report_r, 65536).decode()}))
'''


def test_the_judge_signs_what_the_harness_sends_and_refuses_the_submission():
    out = subprocess.run([sys.executable, "-I", "-c", _JUDGE, str(ROOT)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    # A record or a verdict from the submission's own code is refused, also through the
    # harness's own function, from a thread, or from code that claims a harness file; the
    # harness's own path is signed; a note (which earns nothing) goes from anywhere, as a
    # note, ten a test.
    assert found["outcomes"] == ["refused"] * 5 + ["sent"] * 2 + ["refused"]
    lines = [line for line in found["lines"].splitlines() if line]
    decoded = [protocol.read_line(KEY, line.encode()) for line in lines]
    assert [(seq, rec.event) for seq, rec, _ in decoded] == [
        (0, "start"), (1, "integrity"), (2, "end"), *[(n, "note") for n in range(3, 14)],
        (14, "integrity"), (15, "end")]
    # The refusals travel ahead of the next record that counts: the row is tampered.
    assert decoded[1][1].changed == ("workbook.report asked for by the submission's code",)
    notes = [rec for _, rec, _ in decoded if rec.event == "note"]
    assert notes[0].text.startswith('{"event": "test"') and notes[0].checkpoint is None
    assert notes[-1].text == "(2 more notes not sent)"
    assert decoded[-2][1].changed == ("workbook.report with an object of its own",)
    assert all(stamp.clock > 0 and stamp.cpu > 0 for _, _, stamp in decoded)
    assert protocol.decode(b"x" * 32, lines[0].encode()) is None


def _stamps(*clocks: float, cpu: float = 0.1, arrived: float = 0.0) -> list[protocol.Stamp]:
    return [protocol.Stamp(c, cpu + i * 0.01, arrived or c + 0.001, cpu + 1.0)
            for i, c in enumerate(clocks)]


def _records(*seconds: float) -> list[protocol.Record]:
    tests = [protocol.TestDone(f"t::{i}", "p01.fifo", seconds=s) for i, s in enumerate(seconds)]
    return [protocol.Start(), protocol.Collected(len(tests)),
            *[protocol.Item(t.nodeid, t.checkpoint) for t in tests], *tests, protocol.End()]


def test_an_honest_run_is_possible_from_outside_whatever_the_load():
    records = _records(0.5, 0.25)
    # A slow box: records read long after they left, tests slower than they said.
    stamps = [protocol.Stamp(c, 0.2 + c / 100, c + 3.0, 5.0)
              for c in (10.0, 10.5, 10.6, 10.7, 13.0, 13.4, 13.5)]
    assert outside.check(records, stamps, started=9.0) is None


@pytest.mark.parametrize("tamper, why", [
    (lambda st: st.__setitem__(0, protocol.Stamp(1.0, 0.1, 11.0, 1.0)),
     "stamped before the run started"),
    (lambda st: st.__setitem__(4, protocol.Stamp(30.0, 0.2, 13.0, 1.0)),
     "stamped after the grader read it"),
    (lambda st: st.__setitem__(5, protocol.Stamp(10.55, 0.3, 13.4, 1.0)),
     "stamped before the one ahead of it"),
    (lambda st: st.__setitem__(5, protocol.Stamp(13.4, 5.0, 13.5, 1.0)),
     "the whole run had used"),
])
def test_a_stamp_that_cannot_be_is_seen(tamper, why):
    records = _records(0.5, 0.25)
    stamps = [protocol.Stamp(c, 0.2, c + 0.01, 1.0)
              for c in (10.0, 10.5, 10.6, 10.7, 13.0, 13.4, 13.5)]
    tamper(stamps)
    found = outside.check(records, stamps, started=9.0)
    assert found is not None and why in found[1], found


def test_a_test_longer_than_the_time_around_it_is_impossible():
    # The second test claims 2 s; its record left 0.4 s after the first test's.
    records = _records(0.5, 2.0)
    stamps = _stamps(10.0, 10.5, 10.6, 10.7, 13.0, 13.4, 13.5)
    assert outside.check(records, stamps, started=9.0) == (
        5, "t::1 reported 2.000 s where 0.400 s passed around it")


def test_a_run_that_reports_more_time_than_it_had_is_tampered():
    # Stamps the run could have faked, but it was read only 1 s after it started.
    records = _records(0.5, 0.5, 0.5)
    clocks = (10.0, 10.1, 10.2, 10.3, 10.4, 10.9, 11.4, 11.9, 12.0)
    stamps = [protocol.Stamp(c, 0.1, 10.5 if c < 12 else 12.0, None) for c in clocks]
    for i in range(len(stamps)):
        stamps[i] = protocol.Stamp(stamps[i].clock, 0.1, max(stamps[i].clock, 10.0), None)
    trusted = [(r.nodeid, r.checkpoint) for r in records if isinstance(r, protocol.Item)]
    entry = judging.judge(P01, runner.Outcome(records=records, stamps=[
        protocol.Stamp(s.clock, s.cpu, 10.0 if i < 6 else 10.2, None)
        for i, s in enumerate(stamps)], started=9.9), trusted,
        Limits.for_wall(90), "a.py", Path("/x"), Path("/x/t.py"))
    assert entry.status == "error" and "tampered: the outside view" in entry.reason, entry.reasons
    assert entry.tests_reported < 3


def test_a_report_that_floods_the_grader_is_cut_off_and_the_run_stopped(monkeypatch):
    # red team 2's report_expand: the grader kept every record in its own memory (30 ->
    # 315 MB in 6 s); now a run gets so many records and bytes, then is stopped
    from workbook.grading.sandbox import channels
    monkeypatch.setattr(channels, "RECORDS_MAX", 5)
    monkeypatch.setattr(channels, "REPORT_BYTES_MAX", 4000)
    reader = channels.ReportReader(-1, KEY)
    for seq in range(8):
        reader.feed(protocol.encode(KEY, seq, protocol.Note("p01.fifo", "x")))
    assert len(reader.records) == 5 and reader.flooded and reader.wake.is_set()
    assert reader.violation == "the report flooded the grader (over 5 records)"
    monkeypatch.setattr(channels, "RECORDS_MAX", 1000)
    read_fd, write_fd = os.pipe()
    reader = channels.ReportReader(read_fd, KEY)
    reader.start()
    with open(write_fd, "wb") as pipe:
        for seq in range(40):  # about 130 bytes a line
            pipe.write(protocol.encode(KEY, seq, protocol.Note("p01.fifo", "y" * 20)))
    reader.join(10)
    assert reader.flooded and len(reader.records) < 40
    assert reader.violation == "the report flooded the grader (over 4000 bytes of report lines)"
