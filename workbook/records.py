"""The report record: what a check's pytest process tells whoever started it.

One definition for every reader.  The harness plugin (``workbook.plugin``) builds these
records and writes one JSON line per record to the run's report file, or hands them to the
grader's signed pipe (``workbook.grading.protocol``); the runner (``workbook.run``) reads
them back for the terminal, the page and grading alike.  A record is a frozen dataclass
named by its ``event``; ``Start`` carries the schema version, and a reader refuses a report
of another version (``ReportError``) rather than guess at it.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Iterator, Union, get_args

from workbook.errors import ReportError

#: The version of the records below: raise it when a field changes meaning or goes away
#: (2: ``TestDone.output``, what the learner's code printed during a failed test;
#: 3: ``TestDone.timeline``, a failing run step by step; 4: ``ImportFailed.output``, what the
#: file printed while it was imported).
SCHEMA = 4
#: The most of a failed test's captured output a record carries (characters; its head and
#: tail are kept, see ``cap_output``), as notes are capped per test.
OUTPUT_MAX = 2000
#: The most steps, and characters per cell, of a failure's timeline a record carries.
TIMELINE_STEPS, TIMELINE_CELL = 120, 300


@dataclass(frozen=True)
class Start:
    """The harness is configured; the learner file is about to be imported."""
    problem: str = ""
    file: str = ""
    pid: int = 0
    schema: int = SCHEMA
    event: str = field(default="start", init=False)


@dataclass(frozen=True)
class ImportFailed:
    """Importing the learner file failed; no test will run it."""
    message: str = ""
    output: str | None = None  # what the file printed while it was imported (capped like a
    #                            test's; None when there was nothing, or it gave way in transit)
    event: str = field(default="import_error", init=False)


@dataclass(frozen=True)
class Collected:
    """The collected tests: how many, and (except on the grader's pipe, where the grader
    holds its own list) their node ids by checkpoint."""
    count: int = 0
    tests: dict[str, list[str]] = field(default_factory=dict)
    event: str = field(default="collected", init=False)


@dataclass(frozen=True)
class Item:
    """One collected test, in run order (the grader's pipe only)."""
    nodeid: str = ""
    checkpoint: str | None = None
    event: str = field(default="item", init=False)


#: What the harness makes of a test: anything else in a report is not the harness's.
OUTCOMES = ("passed", "failed", "not_implemented")


@dataclass(frozen=True)
class TestDone:
    """One finished test, as the harness classified it."""
    nodeid: str = ""
    checkpoint: str | None = None
    outcome: str = "passed"          # one of OUTCOMES
    seconds: float = 0.0
    message: str | None = None
    pitfall: str | None = None
    cause: str | None = None         # failures with the same cause share one diagnosis
    stuck: int = 0                   # the stuck detector's verdicts in this test
    pytest_outcome: str | None = None  # "passed" | "failed": pytest's own, set by the grader
    output: str | None = None        # what the learner's code printed (failed tests only)
    timeline: dict | None = None     # the failing run step by step (``cap_timeline``)
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
    """Something the verdict depends on was replaced since the learner file was imported
    (the grader's pipe only)."""
    changed: tuple[str, ...] = ()
    event: str = field(default="integrity", init=False)


@dataclass(frozen=True)
class End:
    """The session finished."""
    event: str = field(default="end", init=False)


Record = Union[Start, ImportFailed, Collected, Item, TestDone, Note, Tampered, End]
BY_EVENT: dict[str, type] = {cls.event: cls  # type: ignore[attr-defined]
                             for cls in get_args(Record)}
#: Each record's fields and their declared types, as written above (``_typed`` reads them).
_FIELD_TYPES: dict[type, dict[str, str]] = {cls: {f.name: str(f.type) for f in fields(cls)}
                                            for cls in get_args(Record)}


def cap_output(text: str, limit: int = OUTPUT_MAX) -> str:
    """``text`` cut to at most about ``limit`` characters: its first third and its last two
    thirds kept (the start says what ran, the end what happened just before the failure),
    with a line saying how much was left out between them."""
    if len(text) <= limit:
        return text
    head, tail = text[:limit // 3], text[-(limit - limit // 3):]
    return f"{head}\n… {len(text) - len(head) - len(tail)} characters left out …\n{tail}"


def cap_timeline(timeline: dict | None) -> dict | None:
    """A failure's timeline as a record carries it: plain strings only, its first
    ``TIMELINE_STEPS`` steps, each cell cut to ``TIMELINE_CELL`` characters; None for
    anything not shaped like one (a timeline is an aid, never part of the verdict)."""
    if not isinstance(timeline, dict):
        return None

    def text(value: object) -> str:
        s = value if isinstance(value, str) else str(value)
        return s if len(s) <= TIMELINE_CELL else s[:TIMELINE_CELL - 1] + "…"

    try:
        actors = [text(a) for a in timeline["actors"]]
        state = [text(s) for s in timeline.get("state", [])]
        steps = [{"label": text(s.get("label", n + 1)),
                  "do": [text(c) for c in s.get("do", [])][:len(actors)],
                  "state": [text(c) for c in s.get("state", [])][:len(state)],
                  "note": text(s.get("note", ""))}
                 for n, s in enumerate(timeline["steps"][:TIMELINE_STEPS])]
    except (KeyError, TypeError, AttributeError):
        return None
    return {"title": text(timeline.get("title", "")), "actors": actors, "state": state,
            "steps": steps, "text": str(timeline.get("text", "")),
            "cut": max(0, len(timeline["steps"]) - TIMELINE_STEPS)}


def _typed(cls: type, name: str, value: object) -> object:
    """``value`` as field ``name`` of ``cls`` holds it (a whole float for an int-valued
    duration, a list as a tuple); ``ReportError`` if it is of another type: whatever reads a
    record later (the grader's checks, its exports) may rely on every field's type."""
    kind = _FIELD_TYPES[cls][name]
    if value is None and kind.endswith("| None"):
        return None
    kind = kind.removesuffix(" | None")
    ok = {"str": lambda v: type(v) is str,
          "int": lambda v: type(v) is int,
          "float": lambda v: type(v) in (int, float) and math.isfinite(v),
          "dict": lambda v: type(v) is dict,
          "tuple[str, ...]": lambda v: type(v) in (list, tuple)
          and all(type(x) is str for x in v),
          "dict[str, list[str]]": lambda v: type(v) is dict and all(
              type(k) is str and type(x) is list and all(type(y) is str for y in x)
              for k, x in v.items())}[kind](value)
    if not ok:
        raise ReportError(f"a {cls.event!r} record whose {name} is "  # type: ignore[attr-defined]
                          f"{value if type(value) is float else 'a ' + type(value).__name__}"
                          f", not {kind}")
    return float(value) if kind == "float" else tuple(value) if kind.startswith("tuple") \
        else value


def from_dict(data: dict) -> Record:
    """The typed record for a decoded JSON object (unknown keys dropped, missing ones
    defaulted); ``ReportError`` for an unknown event, another schema version or a field of
    another type than its record's."""
    if not isinstance(data, dict) or type(data.get("event")) is not str:
        raise ReportError("a record without an event name")
    cls = BY_EVENT.get(data["event"])
    if cls is None:
        raise ReportError(f"an unknown record {data['event'][:40]!r}")
    values = {f.name: _typed(cls, f.name, data[f.name])
              for f in fields(cls) if f.init and f.name in data}
    record = cls(**values)  # every field has a default: no TypeError
    if cls is Start and record.schema != SCHEMA:
        raise ReportError(f"a report of schema {record.schema!r}; this harness reads {SCHEMA}")
    if isinstance(record, TestDone) and record.outcome not in OUTCOMES:
        raise ReportError(f"a test outcome {record.outcome[:40]!r}, not one of "
                          f"{', '.join(OUTCOMES)}")
    return record


def to_dict(record: Record) -> dict:
    return asdict(record)


def write(out: IO[str], record: Record) -> None:
    """Append ``record`` to a report file as one JSON line, flushed at once (a run killed
    later still reports everything written before)."""
    out.write(json.dumps(to_dict(record)) + "\n")
    out.flush()


def parse_line(line: bytes | str) -> Record | None:
    """The record on one report line; None for a line cut short by a kill (or blank)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("event") not in BY_EVENT:
        return None
    return from_dict(data)


def read(path: Path) -> Iterator[Record]:
    """Every whole record of a report file, in order."""
    for line in path.read_text("utf-8", "replace").splitlines():
        record = parse_line(line)
        if record is not None:
            yield record
