"""The report protocol between a graded run and the grader: one definition, both sides.

The in-process reporter (``workbook.grading.sandbox.reporter``) turns each record the harness
plugin emits into one of the typed records below, signs it and writes it down a pipe; the
grader (``workbook.grading.sandbox.runner``) checks the signature and decodes it back, and
``honest_order`` accepts the records only in the one order an honest run produces.

What the signature is for, exactly: it tells the grader's report pipe apart from everything
else a run can write to (stdout, stderr, any file descriptor it finds).  It does *not* stop
code that runs inside the judged process and goes looking for the key — see the README's
"What the report can and cannot prove".
"""
from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Union, get_args

#: One record must fit one atomic pipe write (PIPE_BUF is 4096 on Linux), signature included.
RECORD_MAX = 3800
#: Text fields are cut to these lengths before sending.
_CAPS = {"message": 1500, "cause": 500, "text": 500, "file": 300}


@dataclass(frozen=True)
class Start:
    """The harness is configured; the learner file is about to be imported."""
    problem: str = ""
    file: str = ""
    pid: int = 0
    event: str = field(default="start", init=False)


@dataclass(frozen=True)
class ImportFailed:
    """Importing the learner file failed; no test will run it."""
    message: str = ""
    event: str = field(default="import_error", init=False)


@dataclass(frozen=True)
class Collected:
    """How many tests were collected (the grader holds its own list of them)."""
    count: int = 0
    event: str = field(default="collected", init=False)


@dataclass(frozen=True)
class Item:
    """One collected test, in run order."""
    nodeid: str = ""
    checkpoint: str | None = None
    event: str = field(default="item", init=False)


@dataclass(frozen=True)
class TestDone:
    """One finished test, as the harness classified it, with pytest's own verdict beside it."""
    nodeid: str = ""
    checkpoint: str | None = None
    outcome: str = "passed"          # "passed" | "failed" | "not_implemented"
    seconds: float = 0.0
    message: str | None = None
    pitfall: str | None = None
    cause: str | None = None         # failures with the same cause share one diagnosis
    stuck: int = 0                   # the stuck detector's verdicts in this test
    pytest_outcome: str = "passed"   # "passed" | "failed", from pytest's reports
    event: str = field(default="test", init=False)

    __test__ = False  # not a pytest test class


@dataclass(frozen=True)
class Note:
    """A figure a test wants shown under its checkpoint."""
    checkpoint: str | None = None
    text: str = ""
    event: str = field(default="note", init=False)


@dataclass(frozen=True)
class Tampered:
    """Something the verdict depends on was replaced since the learner file was imported."""
    changed: tuple[str, ...] = ()
    event: str = field(default="integrity", init=False)


@dataclass(frozen=True)
class End:
    """The session finished."""
    event: str = field(default="end", init=False)


Record = Union[Start, ImportFailed, Collected, Item, TestDone, Note, Tampered, End]
_BY_EVENT: dict[str, type] = {cls.event: cls  # type: ignore[attr-defined]
                              for cls in get_args(Record)}


class ProtocolError(ValueError):
    """A line or record that is not part of the protocol."""


def from_dict(data: dict) -> Record:
    """The typed record for a dict (unknown keys dropped, missing ones defaulted)."""
    cls = _BY_EVENT.get(data.get("event"))  # type: ignore[arg-type]
    if cls is None:
        raise ProtocolError(f"an unknown record {data.get('event')!r}")
    values = {f.name: data[f.name] for f in fields(cls) if f.init and f.name in data}
    if cls is Tampered:
        values["changed"] = tuple(values.get("changed", ()))
    return cls(**values)  # every field has a default: no TypeError


def to_dict(record: Record) -> dict:
    data = asdict(record)
    for name, cap in _CAPS.items():
        value = data.get(name)
        if isinstance(value, str) and len(value) > cap:
            data[name] = value[:cap] + "…"
    return data


# -- signing ------------------------------------------------------------------------------

def sign(key: bytes, seq: int, body: str) -> str:
    return hmac.new(key, f"{seq} {body}".encode(), hashlib.sha256).hexdigest()


def encode(key: bytes, seq: int, record: Record) -> bytes:
    """One line ``MAC SEQ JSON`` (newline-framed on both sides, so junk before it is cut off)."""
    body = json.dumps(to_dict(record), separators=(",", ":"), ensure_ascii=True)
    if len(body) > RECORD_MAX:
        body = json.dumps({"event": record.event, "oversize": True}, separators=(",", ":"))
    return f"\n{sign(key, seq, body)} {seq} {body}\n".encode("ascii")


def decode(key: bytes, line: bytes) -> tuple[int, Record] | None:
    """``(seq, record)`` for a correctly signed line; None for anything else."""
    try:
        mac, seq_text, body = line.decode("ascii").strip().split(" ", 2)
        seq = int(seq_text)
    except (UnicodeDecodeError, ValueError):
        return None
    if not hmac.compare_digest(mac, sign(key, seq, body)):
        return None
    try:
        return seq, from_dict(json.loads(body))
    except (ValueError, ProtocolError):
        return None


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
