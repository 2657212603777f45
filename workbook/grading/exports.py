"""What leaves the gradebook: CSV, Gradescope ``results.json``, class insight (the similarity
report is ``similarity``'s).

Every export is made from the same ``Gradebook``; none of them grades anything.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import unicodedata
from collections import Counter
from pathlib import Path

from workbook import manifest
from workbook.grading.gradebook import Entry, Gradebook, Row, atomic_write

FORMATS = ("csv", "json", "gradescope")
#: Gradescope's visibility settings of a test (when students see it).
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
#: Cells a spreadsheet would read as a formula (OWASP's list for CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _entry(row: Row, problem: manifest.Problem) -> Entry:
    return row.problems.get(problem.id) or Entry.placeholder(problem, "not_submitted")


def plain(text: str) -> str:
    """``text`` with every control character but newline and tab shown as an escape (an
    ANSI sequence in a name or a message cannot restyle a terminal that shows the file)."""
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


def _cell(value: object) -> object:
    """A text cell that starts like a formula is prefixed with ``'`` so no spreadsheet
    evaluates it; numbers stay numbers."""
    if isinstance(value, str):
        value = plain(value)
        if value.startswith(_FORMULA_START):
            return "'" + value
    return value


def csv_text(book: Gradebook, *, messages: bool = False) -> str:
    """One line per submission: status, reasons, total, percent, then per problem its score,
    status and each checkpoint's points (and, with ``messages``, its failure message); last
    (after every column an import may already map), the Pythons that judged the row and,
    per problem, those it scored lower on than on another (``grade --pythons``)."""
    out = io.StringIO()
    writer = csv.writer(out)
    head = ["submission", "status", "reasons", "total", "max_total", "percent"]
    for p in book.problems:
        head += [f"{p.id} score", f"{p.id} status"] + [cp.id for cp in p.checkpoints]
        if messages:
            head += [f"{cp.id} message" for cp in p.checkpoints]
    head += ["pythons"] + [f"{p.id} lower on Python" for p in book.problems]
    writer.writerow(head)
    max_total = book.max_total
    for row in book.sorted_rows():
        pending = row.status == "pending"  # no figure yet: blank, never a 0 that looks real
        line: list[object] = [row.submission, row.status, "; ".join(row.reasons),
                              "" if pending else row.total, max_total,
                              "" if pending else
                              round(100 * row.total / max_total, 1) if max_total else 0]
        for p in book.problems:
            entry = _entry(row, p)
            failed = {cp.id: cp.message or "" for cp in entry.checkpoints if cp.status != "passed"}
            blank = entry.status == "pending"
            line += ["" if blank else entry.score, entry.status,
                     *("" if blank else entry.points.get(cp.id, 0) for cp in p.checkpoints)]
            if messages:
                line += [failed.get(cp.id, "") for cp in p.checkpoints]
        entries = [_entry(row, p) for p in book.problems]
        judged = {r for e in entries for r in e.pythons}
        line += [" ".join(sorted(judged, key=_release_key)),
                 *(" ".join(lower_on(e)) for e in entries)]
        writer.writerow([_cell(v) for v in line])
    return out.getvalue()


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in release.split("."))


def lower_on(entry: Entry) -> list[str]:
    """The Pythons (releases) ``entry`` scored lower on than on another: a mistake of a
    version (empty when every interpreter gave the same score)."""
    scores = entry.scores_by_python
    best = max(scores.values(), default=0)
    return [r for r in sorted(scores, key=_release_key) if scores[r] < best]


def gradescope_results(row: Row, problems: list[manifest.Problem],
                       visibility: str = "visible") -> dict:
    """Gradescope's ``results.json`` for one submission."""
    tests, lines = [], []
    for p in problems:
        entry = _entry(row, p)
        lines.append(f"{p.id}: {entry.score}/{p.points}"
                     + (f" ({entry.reason})" if entry.reason else ""))
        for cp in entry.checkpoints:
            detail = cp.message or ""
            if entry.status == "not_submitted":
                detail = f"{p.learner_file.name} was not submitted"
            elif entry.status == "error" and cp.status != "passed" and entry.reason \
                    and entry.reason not in detail:
                detail = f"{entry.reason}. {detail}".strip()
            tests.append({
                "name": f"{p.id} · {cp.title}", "number": cp.id,
                "score": entry.points.get(cp.id, 0),
                "max_score": p.checkpoint(cp.id).points,
                "status": "passed" if cp.status == "passed" else "failed",
                "output": detail + (f"\nLooks like: {cp.pitfall}" if cp.pitfall else ""),
                "visibility": visibility,
            })
    for test in tests:
        test["output"] = plain(test["output"])
    return {"score": sum(t["score"] for t in tests), "output": plain("\n".join(lines)),
            "visibility": visibility, "stdout_visibility": "hidden", "tests": tests}


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".") or "_"


#: Longest export folder name kept as it is (a file name has at most 255 bytes).
NAME_MAX = 100


def export_names(names: list[str]) -> dict[str, str]:
    """A folder name for each submission, unique however alike the names are (``bob`` and
    ``bob.``; ``Bob`` and ``bob``, one folder on a case-insensitive disk) and short enough for
    any file system: a name that is not already safe, or is long, or is taken but for case or
    Unicode form, is cut to ``NAME_MAX`` characters and gets a short hash of itself appended."""
    out: dict[str, str] = {}
    taken: set[str] = set()  # casefolded NFC: as a case-insensitive disk compares names
    for name in sorted(names, key=lambda n: (safe_name(n) != n, n)):
        safe = safe_name(name)
        if len(safe.encode("utf-8", "backslashreplace")) > NAME_MAX:
            safe = safe_name(name.encode("ascii", "backslashreplace").decode())[:NAME_MAX]
        if safe != name or _folded(safe) in taken:
            safe = f"{safe}-{hashlib.sha256(name.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"
        out[name] = safe
        taken.add(_folded(safe))
    return out


def _folded(name: str) -> str:
    return unicodedata.normalize("NFC", name).casefold()


def export(book: Gradebook, fmt: str, out: Path, *, single: bool, excel: bool = False,
           messages: bool = False, visibility: str = "visible") -> None:
    if fmt == "csv":
        text = csv_text(book, messages=messages)
        atomic_write(out, (("\ufeff" if excel else "") + text).encode(
            "utf-8", "backslashreplace"))  # a name that is not UTF-8 on disk, escaped
    elif fmt == "gradescope":
        rows = book.sorted_rows()[:1] if single else book.sorted_rows()
        folders = export_names([row.submission for row in rows])
        for row in rows:
            path = out if single else out / folders[row.submission] / "results.json"
            atomic_write(path, json.dumps(gradescope_results(row, book.problems, visibility),
                                          indent=1).encode())
    # json: the gradebook itself is the export


# -- class insight --------------------------------------------------------------------------

def insight(book: Gradebook) -> dict:
    """Per checkpoint the pass rate among graded submissions, per pitfall how many
    submissions the checker diagnosed with it."""
    out: dict = {}
    for p in book.problems:
        graded = [e for e in (r.problems.get(p.id) for r in book.sorted_rows())
                  if e is not None and e.status in ("ok", "error")]
        passes = Counter(cp.id for e in graded for cp in e.checkpoints if cp.status == "passed")
        # A name only (a gradebook written before records were type-checked may hold other
        # values: never the reason a batch ends without its report).
        named = lambda cp: type(cp.pitfall) is str and cp.pitfall  # noqa: E731
        hits = Counter(name for e in graded
                       for name in {cp.pitfall for cp in e.checkpoints if named(cp)})
        where: dict[str, set[str]] = {}  # each named cause -> the checkpoints it was named on
        for e in graded:
            for cp in e.checkpoints:
                if named(cp):
                    where.setdefault(cp.pitfall, set()).add(cp.id)
        listed = {pit.name: pit.title for pit in p.pitfalls}
        n = len(graded)
        out[p.id] = {
            "graded": n,
            "checkpoints": {cp.id: {"title": cp.title, "passed": passes[cp.id],
                                    "rate": round(passes[cp.id] / n, 3) if n else None}
                            for cp in p.checkpoints},
            # Every named cause, listed pitfall or not (a wrong variant's cause counts too).
            "pitfalls": {name: {"title": listed.get(name, name), "submissions": hits[name],
                                "rate": round(hits[name] / n, 3) if n else None,
                                "checkpoints": sorted(where[name])}
                         for name in sorted(hits, key=lambda k: (-hits[k], k))},
        }
    return out
