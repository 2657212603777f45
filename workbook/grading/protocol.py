"""The report protocol between a graded run and the grader: one definition, both sides.

The records are the report's own (``workbook.records``, the same the learner's check reads).
The in-process reporter (``workbook.grading.sandbox.reporter``) hands each record the harness
plugin emits to the judge (``workbook.grading.sandbox.judge``), which signs it, with pytest's
own verdict on a test beside it, and writes it down a pipe; the
grader (``workbook.grading.sandbox.channels``) checks the signature and decodes it back, and
``honest_order`` accepts the records only in the one order an honest run produces.

What the signature is for, exactly: it tells the grader's report pipe apart from everything
else a run can write to (stdout, stderr, any file descriptor it finds), and, since the key
lives only in the judge's audit hook, it tells the judge's records apart from any the
submission's code could make inside the process.  Raw memory is the rest — see the README's
"What the report can and cannot prove".
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from dataclasses import dataclass

from workbook import records
from workbook.errors import ReportError
from workbook.records import (  # noqa: F401 - the protocol's records are the report's
    Collected, End, ImportFailed, Item, Note, Record, Start, Tampered, TestDone)

#: One record must fit one atomic pipe write (PIPE_BUF is 4096 on Linux), signature included.
RECORD_MAX = 3800
#: Text fields are cut to these lengths before sending.
_CAPS = {"message": 1500, "cause": 500, "text": 500, "file": 300, "output": 600}


#: A line or record that is not part of the protocol (or of this schema version).
ProtocolError = ReportError
#: The typed record for a dict (unknown keys dropped, missing ones defaulted).
from_dict = records.from_dict


def to_dict(record: Record) -> dict:
    """The record as sent: its text fields cut to their caps."""
    data = records.to_dict(record)
    if data.get("timeline") is not None:
        data["timeline"] = None  # a step-through aid for the page; a grade reads the message
    for name, cap in _CAPS.items():
        value = data.get(name)
        if isinstance(value, str) and len(value) > cap:
            data[name] = value[:cap] + "…"
    return data


# -- signing ------------------------------------------------------------------------------

#: pytest's own verdict, signed beside a test record by the judge ("-" on other records).
VERDICTS = ("-", "passed", "failed")


def body(record: Record) -> str:
    """The record's JSON as it travels (text fields cut to their caps; one pipe write)."""
    data = to_dict(record)
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True)
    if len(text) > RECORD_MAX and data.get("output"):
        # The learner's printed output is what gives way (escaped, non-ASCII text grows
        # sixfold): the verdict's own fields travel whole.
        data["output"] = None
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=True)
    if len(text) > RECORD_MAX:
        text = json.dumps({"event": record.event, "oversize": True}, separators=(",", ":"))
    return text


@dataclass(frozen=True)
class Stamp:
    """When a record left the run, as the judge signed it (its monotonic clock, which is the
    machine's, and the process's CPU seconds), and when the grader read it and what the
    whole run had used by then (its cgroup: None where none counts it)."""
    clock: float
    cpu: float
    arrived: float = 0.0
    run_cpu: float | None = None


def sign(key: bytes, seq: int, verdict: str, text: str) -> str:
    """HMAC-SHA256 of ``SEQ VERDICT CLOCK CPU BODY`` (``text``: all but the number; the
    judge computes the same from two SHA-256 states, ``judge.install``)."""
    return hmac.new(key, f"{seq} {verdict} {text}".encode(), hashlib.sha256).hexdigest()


def encode(key: bytes, seq: int, record: Record, verdict: str = "-",
           stamp: Stamp = Stamp(0.0, 0.0)) -> bytes:
    """One line ``MAC SEQ VERDICT CLOCK CPU JSON`` (newline-framed on both sides, so junk
    before it is cut off).  The judge writes these in a graded run; this is for the
    selftest."""
    text = f"{stamp.clock:.6f} {stamp.cpu:.6f} {body(record)}"
    return f"\n{sign(key, seq, verdict, text)} {seq} {verdict} {text}\n".encode("ascii")


def _clean(value: object) -> object:
    """``value`` with every string made writable as UTF-8 (a lone surrogate, which a run can
    put in an exception message, shown as its escape): nothing a run reports can stop the
    gradebook or an export from being written."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    return value


def decode(key: bytes, line: bytes) -> tuple[int, Record] | None:
    """``(seq, record)`` for a correctly signed line; None for anything else."""
    try:
        found = read_line(key, line)
    except ProtocolError:
        return None
    return None if found is None else found[:2]


def read_line(key: bytes, line: bytes) -> tuple[int, Record, Stamp] | None:
    """``(seq, record, stamp)`` for a correctly signed line; None for anything else that is
    not signed; ``ProtocolError`` for a signed line that is not a record of this schema with
    every field of its type (the grader stops believing the report there).  A test record's
    ``pytest_outcome`` is the signed verdict, whatever its JSON says."""
    try:
        mac, seq_text, verdict, text = line.decode("ascii").strip().split(" ", 3)
        seq = int(seq_text)
        clock, cpu, json_text = text.split(" ", 2)
        stamp = Stamp(float(clock), float(cpu))
    except (UnicodeDecodeError, ValueError):
        return None
    if verdict not in VERDICTS or not hmac.compare_digest(mac, sign(key, seq, verdict, text)):
        return None
    try:
        record = from_dict(_clean(json.loads(json_text)))
    except ProtocolError:
        raise
    except RecursionError:
        raise ProtocolError("a record nested too deeply") from None
    except ValueError:
        raise ProtocolError("a record that is not JSON") from None
    if isinstance(record, TestDone):
        record = dataclasses.replace(record, pytest_outcome=None if verdict == "-" else verdict)
    return seq, record, stamp


# -- the order of an honest run -------------------------------------------------------------

@dataclass
class Verdict:
    """What ``honest_order`` accepted: the records up to the first departure, and why it
    stopped there (None: the run was honest to its end, or just ended early)."""
    accepted: list[Record]
    ended: bool = False
    violation: str | None = None


def honest_order(records: list[Record], trusted: list[tuple[str, str]]) -> Verdict:
    """Accept records while they follow the only order an honest run produces: start,
    [import_error], collected (as many as ``trusted``), one item per trusted test in the same
    order, then one result per test in that order (notes in between), end.  ``trusted`` is the
    (node id, checkpoint) list collected without learner code."""
    verdict = Verdict([])
    phase, items, tests = "start", [], 0
    for rec in records:
        bad = None
        if phase == "ended":
            bad = f"a {rec.event!r} record after the run ended"
        elif isinstance(rec, Start):
            bad = "the run started twice" if phase != "start" else None
            phase = "configured"
        elif phase == "start":
            bad = f"a {rec.event!r} record before the run started"
        elif isinstance(rec, ImportFailed):
            bad = None if phase == "configured" else "an import error after collection"
        elif isinstance(rec, Collected):
            bad = None if phase == "configured" else "a second collection"
            if rec.count != len(trusted):
                bad = bad or f"{rec.count} tests collected where the acceptance set has " \
                              f"{len(trusted)}"
            phase = "collected"
        elif isinstance(rec, Item):
            bad = None if phase in ("collected", "items") else "a collected test out of place"
            items.append((rec.nodeid, rec.checkpoint))
            phase = "items"
        elif isinstance(rec, Note):
            # The first test's notes come before any result: once every item is in.
            during = phase == "tests" or phase == "items" and len(items) == len(trusted)
            bad = None if during else "a note outside any test"
        elif isinstance(rec, TestDone):
            if phase == "items":
                bad = None if items == trusted else \
                    "the collected tests differ from the acceptance set"
                phase = "tests"
            if phase != "tests":
                bad = bad or "a test result before the tests were collected"
            elif tests >= len(trusted) or (rec.nodeid, rec.checkpoint) != trusted[tests]:
                due = trusted[tests][0] if tests < len(trusted) else "none"
                bad = bad or f"a result for {rec.nodeid!r} where {due!r} was due"
            elif rec.outcome == "passed" and rec.pytest_outcome == "failed":
                bad = f"{rec.nodeid} failed but was reported as passed"
            tests += 1
        elif isinstance(rec, Tampered):
            bad = "the verdict's machinery was changed: " + ", ".join(rec.changed)
        elif isinstance(rec, End):
            if phase == "items" and items != trusted:
                bad = "the collected tests differ from the acceptance set"
            elif phase not in ("tests", "configured", "items"):
                bad = "the run ended before collecting"
            verdict.ended = bad is None
            phase = "ended"
        if bad:
            verdict.violation = bad
            break
        if isinstance(rec, (ImportFailed, TestDone, Note, End)):
            verdict.accepted.append(rec)
    return verdict
