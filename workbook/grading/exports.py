"""What leaves the gradebook: CSV, Gradescope ``results.json``, class insight, similarity.

Every export is made from the same ``Gradebook``; none of them grades anything.
"""
from __future__ import annotations

import ast
import csv
import hashlib
import io
import itertools
import json
from collections import Counter
from pathlib import Path

from workbook import manifest
from workbook.grading.discovery import Submission
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
    status and each checkpoint's points (and, with ``messages``, its failure message)."""
    out = io.StringIO()
    writer = csv.writer(out)
    head = ["submission", "status", "reasons", "total", "max_total", "percent"]
    for p in book.problems:
        head += [f"{p.id} score", f"{p.id} status"] + [cp.id for cp in p.checkpoints]
        if messages:
            head += [f"{cp.id} message" for cp in p.checkpoints]
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
        writer.writerow([_cell(v) for v in line])
    return out.getvalue()


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


def export_names(names: list[str]) -> dict[str, str]:
    """A folder name for each submission, unique however alike the names are (``bob`` and
    ``bob.``): a name that is not already safe gets a short hash of itself appended."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in sorted(names, key=lambda n: (safe_name(n) != n, n)):
        safe = safe_name(name)
        if safe != name or safe in taken:
            safe = f"{safe}-{hashlib.sha256(name.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"
        out[name] = safe
        taken.add(safe)
    return out


def export(book: Gradebook, fmt: str, out: Path, *, single: bool, excel: bool = False,
           messages: bool = False, visibility: str = "visible") -> None:
    if fmt == "csv":
        text = csv_text(book, messages=messages)
        atomic_write(out, (("\ufeff" if excel else "") + text).encode("utf-8"))
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
        hits = Counter(name for e in graded
                       for name in {cp.pitfall for cp in e.checkpoints if cp.pitfall})
        where: dict[str, set[str]] = {}  # each named cause -> the checkpoints it was named on
        for e in graded:
            for cp in e.checkpoints:
                if cp.pitfall:
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


# -- similarity -----------------------------------------------------------------------------

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: The identifier each kind of node carries (definitions: ``name``).
_NAMED = {ast.Name: "id", ast.arg: "arg", ast.Attribute: "attr",
          **{kind: "name" for kind in _SCOPES}}


def normalised(source: bytes) -> str | None:
    """The canonical text of a Python file (None if it does not parse): docstrings and
    annotations dropped, then every identifier renamed in order of first use, so two files
    that differ only in names, comments, layout or docstrings come out the same."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, *_SCOPES)) and ast.get_docstring(node, False) is not None:
            node.body = node.body[1:] or [ast.Pass()]
        if isinstance(node, ast.arg):
            node.annotation = None
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        attr = _NAMED.get(type(node))
        if attr:
            setattr(node, attr, names.setdefault(getattr(node, attr), f"n{len(names)}"))
    try:
        return ast.unparse(tree)
    except (RecursionError, MemoryError):  # too deep to print back (a long expression)
        return _flat(tree)


def _flat(tree: ast.AST) -> str:
    """The tree as one line of node kinds, identifiers and constants, walked without
    recursion (``ast.unparse`` and ``ast.dump`` recurse: a 400-term sum is too deep)."""
    words = []
    for node in ast.walk(tree):
        attr = _NAMED.get(type(node))
        value = getattr(node, attr) if attr else getattr(node, "value", None) \
            if isinstance(node, ast.Constant) else None
        words.append(type(node).__name__ + ("" if value is None else f":{value!r}"))
    return " ".join(words)


def submission_text(sub: Submission, problem_id: str) -> str | None:
    """Every file of the submission for ``problem_id`` (the learner file, then each helper
    module in name order), normalised; None when none of them parses."""
    sources = [sub.read(sub.files[problem_id])]
    sources += [data for _, data in sorted(sub.helpers(problem_id).items())]
    texts = [t for t in map(normalised, sources) if t is not None]
    return "\n".join(texts) if texts else None


def _raw_text(sub: Submission, problem_id: str) -> str:
    """Every file of the submission for ``problem_id`` as it is (the learner file, then each
    helper module in name order): what the fingerprints are taken of, parsable or not."""
    sources = [sub.read(sub.files[problem_id])]
    sources += [data for _, data in sorted(sub.helpers(problem_id).items())]
    return "\n".join(data.decode("utf-8", "replace") for data in sources)


#: copydetect's fingerprint: k-grams of this many tokens, winnowed over this many.
_K, _WINDOW = 25, 1


def similarity(submissions: list[Submission], problems: list[manifest.Problem], *,
               threshold: float = 90.0) -> dict:
    """Per problem: groups of submissions whose files are the same after normalisation, and
    pairs of different ones at least ``threshold`` % alike: copydetect's winnowed
    fingerprints (MOSS-style: names, layout and the order of methods do not count) of every
    file of each submission, a syntax error included; the percent is the larger share of
    one's fingerprints found in the other (a copy with code added still shows)."""
    import io

    from copydetect import CodeFingerprint, compare_files

    report: dict = {}
    for p in problems:
        by_text: dict[str, list[str]] = {}  # canonical text -> the submissions that have it
        raw: dict[str, str] = {}  # every submission's files, for the fingerprints
        for sub in submissions:
            if p.id not in sub.files:
                continue
            raw[sub.name] = _raw_text(sub, p.id)
            text = submission_text(sub, p.id)
            by_text.setdefault(text if text is not None else "\0raw " + raw[sub.name],
                               []).append(sub.name)
        groups = sorted((sorted(g) for g in by_text.values() if len(g) > 1), key=len,
                        reverse=True)
        prints = {}
        for group in by_text.values():  # one representative per distinct text
            name = group[0]
            try:
                prints[name] = CodeFingerprint(f"{name}.py", _K, _WINDOW, language="python",
                                               fp=io.StringIO(raw[name]))
            except Exception:  # noqa: BLE001 - too short to fingerprint: left out
                continue
        pairs = []
        for a, b in itertools.combinations(sorted(prints), 2):
            _, shares, _ = compare_files(prints[a], prints[b])
            percent = 100 * float(max(shares))
            if percent >= threshold:
                pairs.append({"a": a, "b": b, "percent": round(percent, 1)})
        pairs.sort(key=lambda d: -d["percent"])
        report[p.id] = {"identical": groups, "similar": pairs, "threshold": threshold}
    return report
