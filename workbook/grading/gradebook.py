"""The gradebook: one typed entry per submission × problem, saved whole after every change.

Every pair of a batch is in the gradebook from the start: ``pending`` until its run finishes,
so an interrupted batch never shows unfinished work as a score.  The file is replaced
atomically (a reader or a crash sees the old or the new book, never half of each) and, like
every export, is readable by its owner only (0600: it holds every name, score and hash).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

from workbook import manifest
from workbook.run import CheckpointResult

FORMAT = "workbook-gradebook/2"


@dataclass
class Entry:
    """One submission × problem."""
    #: ``ok``: the whole acceptance set ran (failed checkpoints earn nothing); ``error``: it
    #: did not (the reason says why); ``not_submitted``: no file; ``pending``: not finished yet.
    status: str
    checkpoints: list[CheckpointResult]
    max_score: int
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    file: str | None = None
    sha256: str | None = None
    #: Every file that was graded (the learner file and each helper module) -> its SHA-256.
    files: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    #: CPU seconds the whole run used, every process and thread (None: no cgroup counted it).
    cpu: float | None = None
    tests_reported: int = 0
    tests_expected: int = 0
    output_bytes: int = 0
    output_tail: str = ""
    leftovers: int = 0
    fingerprint: str | None = None
    graded_at: str | None = None
    points: dict[str, int] = field(default_factory=dict)  # checkpoint id -> points earned
    #: The seed the exploration checkpoint drew its scenarios from: ``./check.sh pNN FILE
    #: --seed N`` replays this grade's exploration (None: the problem explores nothing).
    explore_seed: int | None = None
    #: The interpreters that judged it ("3.10.13", ...; ``grade --pythons``): a checkpoint
    #: earned its points only when it passed under every one.  Empty: no run behind it.
    pythons: list[str] = field(default_factory=list)
    #: Each interpreter's own score, by release: where they differ, the mistake is one of a
    #: version (the failed checkpoints' messages name it).
    scores_by_python: dict[str, int] = field(default_factory=dict)

    @property
    def reason(self) -> str | None:
        return self.reasons[0] if self.reasons else None

    @property
    def score(self) -> int:
        return sum(self.points.values())

    @property
    def passed(self) -> bool:
        return self.status == "ok" and all(
            cp.status == "passed" for cp in self.checkpoints if cp.kind == "core")

    def to_json(self) -> dict:
        data = asdict(self)
        data["checkpoints"] = [
            {**{k: v for k, v in asdict(cp).items() if k != "not_implemented"},
             "points": self.points.get(cp.id, 0)} for cp in self.checkpoints]
        data.update(reason=self.reason, score=self.score, passed=self.passed)
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Entry":
        def known(kind: type, values: dict) -> dict:
            return {k: v for k, v in values.items() if k in {f.name for f in fields(kind)}}
        return cls(**{**known(cls, data), "checkpoints": [
            CheckpointResult(**known(CheckpointResult, c)) for c in data["checkpoints"]]})

    @classmethod
    def placeholder(cls, problem: manifest.Problem, status: str,
                    reason: str | None = None) -> "Entry":
        """An entry with no run behind it: pending, not submitted, or refused."""
        message = reason or {"pending": "not graded yet",
                             "not_submitted": "not submitted"}.get(status)
        return cls(status=status, max_score=problem.points,
                   reasons=[reason] if reason else [],
                   checkpoints=[CheckpointResult(cp.id, cp.title, cp.kind, status,
                                                 message=message)
                                for cp in problem.checkpoints])


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data``: old or new, never half of each; ``mode`` as given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # the rename itself, durable where the filesystem can
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@dataclass
class Row:
    submission: str
    problems: dict[str, Entry] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(e.score for e in self.problems.values())

    @property
    def reasons(self) -> list[str]:
        return [f"{pid}: {e.reason}" for pid, e in self.problems.items()
                if e.status == "error" and e.reason]

    @property
    def status(self) -> str:
        if any(e.status == "pending" for e in self.problems.values()):
            return "pending"
        return "error" if self.reasons else "ok"


class Gradebook:
    """Rows by submission, one ``Entry`` per problem; saved after each change.  One thread
    uses it: the batch records every finished pair from its main thread."""

    def __init__(self, path: Path, problems: list[manifest.Problem], meta: dict | None = None,
                 fresh: bool = False) -> None:
        self.path = path
        self.problems = problems
        old = {} if fresh else self._load(path)
        self.rows = {name: Row(name, {pid: Entry.from_json(e)
                                      for pid, e in row["problems"].items()})
                     for name, row in (old.pop("rows", None) or {}).items()}
        self._texts: dict[tuple[str, str], tuple[Entry, str]] = {}  # each entry's JSON, made once
        self.meta: dict = {"created": now(), **old, **(meta or {}), "format": FORMAT,
                           "problems": [p.id for p in problems],
                           "max_total": sum(p.points for p in problems)}

    @staticmethod
    def _load(path: Path) -> dict:
        try:
            doc = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) and doc.get("format") == FORMAT else {}

    def finished(self, name: str, problem_id: str, fingerprint: str) -> bool:
        entry = self.rows.get(name, Row(name)).problems.get(problem_id)
        return entry is not None and entry.status != "pending" and entry.fingerprint == fingerprint

    def record(self, name: str, problem_id: str, entry: Entry, fingerprint: str | None = None,
               save: bool = True) -> None:
        """``entry`` for this pair, graded now from inputs with this ``fingerprint``."""
        entry.fingerprint, entry.graded_at = fingerprint, now()
        self.rows.setdefault(name, Row(name)).problems[problem_id] = entry
        if save:
            self.save()

    def keep_only(self, names: set[str]) -> None:
        self.rows = {n: r for n, r in self.rows.items() if n in names}

    def save(self) -> None:
        self.meta["updated"] = now()
        # A name that is not UTF-8 on disk (an archive made elsewhere) holds lone
        # surrogates: written as JSON's escapes of them, which read back as the same name.
        atomic_write(self.path, self.text().encode("utf-8", "backslashreplace"))

    def _head(self, name: str, row: Row, max_total: int) -> dict:
        return {"submission": name, "status": row.status, "total": row.total,
                "max_total": max_total, "reasons": row.reasons}

    def to_json(self) -> dict:
        self.meta["max_total"] = max_total = self.max_total
        self.meta["assigned"] = [p.id for p in self.assigned]
        return {**self.meta, "rows": {
            name: {**self._head(name, row, max_total),
                   "problems": {pid: e.to_json() for pid, e in row.problems.items()}}
            for name, row in sorted(self.rows.items())}}

    def text(self) -> str:
        """``json.dumps(self.to_json(), indent=1)``, byte for byte, with each entry's text
        made once: the batch saves after every run, and serialising every entry each time
        cost the grader more CPU than staging the runs (and grows with the square of the
        class)."""
        self.meta["max_total"] = max_total = self.max_total
        self.meta["assigned"] = [p.id for p in self.assigned]
        dumps = functools.partial(json.dumps, indent=1, ensure_ascii=False)

        def block(items: list[tuple[str, str]], depth: int) -> str:
            """A JSON object whose values are already text, at ``depth``."""
            if not items:
                return "{}"
            pad = "\n" + " " * (depth + 1)
            return "{" + ",".join(f"{pad}{dumps(key)}: {value}" for key, value in items) \
                + "\n" + " " * depth + "}"

        def entry(name: str, pid: str, found: Entry) -> str:
            kept = self._texts.get((name, pid))
            if kept is None or kept[0] is not found:
                kept = self._texts[(name, pid)] = (
                    found, dumps(found.to_json()).replace("\n", "\n" + " " * 4))
            return kept[1]

        rows = []
        for name, row in sorted(self.rows.items()):
            head = dumps({**self._head(name, row, max_total), "problems": 0})
            problems = block([(pid, entry(name, pid, e)) for pid, e in row.problems.items()], 3)
            rows.append((name, head[:-len("0\n}")].replace("\n", "\n  ") + problems + "\n  }"))
        head = dumps({**self.meta, "rows": 0})
        return head[:-len("0\n}")] + block(rows, 1) + "\n}"

    @property
    def assigned(self) -> list[manifest.Problem]:
        """The problems this class was given: those any submission has a file for (a
        problem nobody submitted was not assigned), or all of them when none has."""
        present = [p for p in self.problems if any(
            (e := r.problems.get(p.id)) is not None and e.status != "not_submitted"
            for r in self.rows.values())]
        return present or list(self.problems)

    @property
    def max_total(self) -> int:
        """What a row's total is out of: the points of the assigned problems."""
        return sum(p.points for p in self.assigned)

    def sorted_rows(self) -> list[Row]:
        return [self.rows[n] for n in sorted(self.rows)]
