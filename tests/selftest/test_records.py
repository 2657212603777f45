"""The report record: one typed, versioned definition written by the plugin and read by the
runner and the grader alike."""
from __future__ import annotations

import io
import json

import pytest

from workbook import manifest, records, run
from workbook.errors import ReportError
from workbook.grading import protocol

P01 = manifest.get("p01")


def test_every_record_goes_through_a_json_line_unchanged():
    sample = [records.Start("p01", "/x/f.py", 42), records.ImportFailed("boom"),
              records.Collected(2, {"p01.fifo": ["t::a", "t::b"]}),
              records.Item("t::a", "p01.fifo"),
              records.TestDone("t::a", "p01.fifo", "failed", 0.25, "m", "single_drain",
                               "E @ f.py:3", 1),
              records.Note("p01.fifo", "latency 1 ms"), records.Tampered(("a.b",)),
              records.End()]
    out = io.StringIO()
    for record in sample:
        records.write(out, record)
    back = [records.parse_line(line) for line in out.getvalue().splitlines()]
    assert back == sample
    assert json.loads(out.getvalue().splitlines()[0])["schema"] == records.SCHEMA


def test_the_grader_decodes_the_same_records():
    assert protocol.TestDone is records.TestDone and protocol.Start is records.Start
    key = b"k" * 32
    record = records.TestDone("t::a", "p01.fifo", "failed", message="m")
    assert protocol.decode(key, protocol.encode(key, 3, record)) == (3, record)


def test_a_report_of_another_schema_is_refused_and_a_cut_line_skipped():
    with pytest.raises(ReportError, match="schema 99"):
        records.parse_line(json.dumps({"event": "start", "schema": 99}))
    assert records.parse_line('{"event": "test", "nodeid": "t::a", "outc') is None
    assert records.parse_line('{"event": "from the future"}') is None
    assert records.parse_line("[1, 2]") is None


def test_one_tally_serves_the_final_result_and_the_progress_so_far():
    tally = run.Tally(P01)
    ids = [cp.id for cp in P01.checkpoints]
    tally.add(records.Start("p01"))
    tally.add(records.Collected(3, {ids[0]: ["t::a", "t::b"], ids[1]: ["t::c"]}))
    tally.add(records.TestDone("t::a", ids[0], "passed", 0.5))
    assert tally.finished(limit=9) == {}  # t::b has not reported yet
    tally.add(records.Note(ids[0], "n1"))
    tally.add(records.TestDone("t::b", ids[0], "failed", 0.25, "lost", "single_drain"))
    done = tally.finished(limit=9)
    assert list(done) == [ids[0]] and done[ids[0]].status == "failed"
    assert (done[ids[0]].seconds, done[ids[0]].notes) == (0.75, ["n1"])
    result = tally.result(P01.solution_file, killed=True, limit=9)
    assert result.incomplete and result.checkpoints[0].pitfall == "single_drain"
    assert "stopped after 9 s" in result.checkpoints[1].message
    tally.add(records.End())
    ended = tally.result(P01.solution_file, killed=False, limit=9)
    assert not ended.incomplete
    assert "ended early" in ended.checkpoints[1].message  # collected, never reported
    assert "harness defect" in ended.checkpoints[2].message  # no test collected for it


def test_a_failures_timeline_travels_capped_and_only_when_shaped_like_one():
    from workbook.records import TIMELINE_CELL, TIMELINE_STEPS, cap_timeline
    steps = [{"label": n, "do": ["x" * (TIMELINE_CELL + 50), "", "spare"], "state": [n]}
             for n in range(TIMELINE_STEPS + 5)]
    capped = cap_timeline({"title": "t", "actors": ["a", "b"], "state": ["time"],
                           "steps": steps, "text": "table"})
    assert len(capped["steps"]) == TIMELINE_STEPS and capped["cut"] == 5
    first = capped["steps"][0]
    assert first["label"] == "0" and len(first["do"]) == 2  # one cell per actor, strings
    assert len(first["do"][0]) == TIMELINE_CELL and first["do"][0].endswith("…")
    for junk in (None, "table", {"steps": []}, {"actors": ["a"], "steps": [1]}):
        assert cap_timeline(junk) is None
    record = records.TestDone(checkpoint="p03.explore", outcome="failed", timeline=capped)
    assert records.from_dict(records.to_dict(record)) == record
    assert protocol.to_dict(record)["timeline"] is None  # the grader's pipe: the message only


@pytest.mark.parametrize("data, why", [
    ({"event": "test", "nodeid": "x", "seconds": "soon"}, "seconds is a str, not float"),
    ({"event": "test", "pitfall": ["unhashable"]}, "pitfall is a list, not str"),
    ({"event": "test", "seconds": float("nan")}, "seconds is nan"),
    ({"event": "test", "stuck": True}, "stuck is a bool, not int"),
    ({"event": "note", "text": [[]] * 3}, "text is a list"),
    ({"event": "collected", "tests": {"p01.fifo": [1]}}, "tests is a dict, not dict"),
    ({"event": ["test"]}, "without an event name")])
def test_a_record_whose_field_has_another_type_is_refused_by_name(data, why):
    # red team 2: a list pitfall crashed the class insight, a text duration the grader's
    # timing check (the row pending for ever)
    with pytest.raises(ReportError, match=why):
        records.from_dict(data)


def test_a_signed_record_of_the_wrong_type_ends_the_report_as_malformed():
    from workbook.grading.sandbox.channels import ReportReader
    key = b"k" * 32
    reader = ReportReader(-1, key)
    reader.feed(protocol.encode(key, 0, records.Start("p01")))
    text = '1.000000 0.100000 {"event":"test","nodeid":"x","seconds":"soon"}'
    reader.feed(f"\n{protocol.sign(key, 1, '-', text)} 1 - {text}\n".encode())
    reader.feed(protocol.encode(key, 2, records.End()))
    assert [r.event for r in reader.records] == ["start"]
    assert reader.violation == ("a malformed report record: a 'test' record whose seconds "
                                "is a str, not float")
