"""``./check.sh grade SUBMISSIONS_DIR`` — instructor batch grading.

Every submission × problem runs the same acceptance set a learner runs, inside
``workbook.sandbox``.  The score comes only from the authenticated per-test records of the
run, cross-checked against a collection of the same tests made without learner code; the
exit code and the output are used for the reason text, never for points.

Outputs: a JSON gradebook (the resume state, replaced atomically after every finished pair),
plus the requested export: CSV, the JSON gradebook itself, or Gradescope ``results.json``.
``./check.sh gradescope-bundle OUT.zip`` builds the autograder zip for Gradescope.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import hashlib
import io
import json
import os
import queue
import signal
import stat
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.table import Table

from workbook import ROOT, manifest, run, sandbox

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)

FORMAT = "workbook-gradebook/1"
FORMATS = ("csv", "json", "gradescope")
#: A learner file larger than this is refused without being run.
MAX_FILE = 1 << 20
#: Folders never searched for learner files inside a submission.
SKIP_DIRS = {"__pycache__", "__MACOSX", "node_modules", ".git", ".venv"}
#: How much output an error row keeps (the tail), for the instructor's eyes only.
OUTPUT_KEPT = 1500


class GradeError(Exception):
    """The batch cannot go on (not a problem with one submission)."""


# -- submissions ----------------------------------------------------------------------------

@dataclass
class Submission:
    name: str
    path: Path
    files: dict[str, Path] = field(default_factory=dict)    # problem id -> learner file
    refused: dict[str, str] = field(default_factory=dict)   # problem id -> why not run


def discover(root: Path, problems: list[manifest.Problem], *,
             single: bool = False) -> list[Submission]:
    """The submissions in ``root``: each folder (or ``.py`` file) is one; ``single``: root
    itself is one.  Symbolic links are never followed."""
    if single:
        return [_folder_submission(root.name or "submission", root, problems)]
    found: dict[str, Submission] = {}
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or entry.name in SKIP_DIRS:
            continue
        if entry.is_symlink():
            sub = Submission(entry.name, entry)
            sub.refused = {p.id: "a symbolic link (refused)" for p in problems}
        elif entry.is_dir():
            sub = _folder_submission(entry.name, entry, problems)
        elif entry.is_file() and entry.suffix == ".py":
            sub = _file_submission(entry, problems)
            if sub is None:
                continue
        else:
            continue
        name = sub.name if sub.name not in found else entry.name
        sub.name = name
        found[name] = sub
    return list(found.values())


def _folder_submission(name: str, folder: Path, problems: list[manifest.Problem]) -> Submission:
    sub = Submission(name, folder)
    for problem in problems:
        path = _find(folder, problem.learner_file.name)
        if path is None:
            continue
        refusal = _refusal(path)
        if refusal:
            sub.refused[problem.id] = refusal
        else:
            sub.files[problem.id] = path
    return sub


def _file_submission(path: Path, problems: list[manifest.Problem]) -> Submission | None:
    """A lone ``.py`` file: for the one selected problem, or the problem whose module (or
    id) its name contains.  Its name, minus that, names the submission."""
    if len(problems) == 1:
        matches = problems
    else:
        matches = [p for p in problems if p.module in path.stem] or \
                  [p for p in problems if path.stem.startswith(p.id)]
    if len(matches) != 1:
        return None
    problem = matches[0]
    name = path.stem.replace(problem.module, "").strip("_-. ") or path.stem
    sub = Submission(name, path)
    refusal = _refusal(path)
    if refusal:
        sub.refused[problem.id] = refusal
    else:
        sub.files[problem.id] = path
    return sub


def _find(folder: Path, filename: str) -> Path | None:
    """The shallowest file called ``filename`` under ``folder`` (links not followed)."""
    best: tuple[int, str, Path] | None = None
    for current, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        if filename in files:
            path = Path(current) / filename
            depth = len(path.relative_to(folder).parts)
            if best is None or (depth, str(path)) < best[:2]:
                best = (depth, str(path), path)
    return best[2] if best else None


def _refusal(path: Path) -> str | None:
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link (refused)"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_size > MAX_FILE:
        return f"too large ({info.st_size} bytes; the limit is {MAX_FILE})"
    return None


def _read(path: Path) -> bytes:
    """The file's bytes, refusing to follow a link swapped in since discovery."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_FILE + 1)[:MAX_FILE]


# -- one run --------------------------------------------------------------------------------

def _pytest_args(problem: manifest.Problem, stage: sandbox.Stage,
                 collect_only: bool = False) -> list[str]:
    return ["-p", "workbook.sandbox", "-p", "pytest_timeout",
            "-c", str(stage.dir / "pytest.ini"), "-s",
            *run.pytest_args(problem, stage.target, None, root=stage.dir),
            *(["--collect-only"] if collect_only else [])]


def trusted_collection(problem: manifest.Problem, harness: sandbox.Harness,
                       iso: sandbox.Isolation, uid: int | None) -> list[tuple[str, str]]:
    """The acceptance set's tests in run order, as (node id, checkpoint), collected with no
    learner code at all: the yardstick every graded run is compared with."""
    placeholder = b'"""No learner code: the grader collects the tests."""\n'
    with sandbox.Stage(harness, problem.module, placeholder, uid) as stage:
        outcome = sandbox.run(stage, _pytest_args(problem, stage, collect_only=True),
                              sandbox.Limits.for_wall(60), iso=iso, uid=uid)
    items = [(r.get("nodeid"), r.get("checkpoint")) for r in outcome.records
             if r.get("event") == "item"]
    if not items or outcome.forged or outcome.violation or outcome.sandbox_error:
        raise GradeError(f"cannot collect the acceptance set of {problem.id}: "
                         f"{outcome.sandbox_error or outcome.output[-800:] or 'no tests'}")
    missing = {cp.id for cp in problem.checkpoints} - {cp for _, cp in items}
    if missing:
        raise GradeError(f"{problem.id}: no test checks {sorted(missing)}")
    return items


def crosscheck(records: list[dict], trusted: list[tuple[str, str]]) -> tuple[list[dict], dict]:
    """Accept the records that follow the only order an honest run produces.

    Returns the records ``run._aggregate`` understands (the collection is the trusted one),
    and facts: ``ended``, ``violation`` (the first departure; nothing after it counts)."""
    facts: dict = {"ended": False, "violation": None}
    accepted: list[dict] = []
    items: list[tuple[str, str]] = []
    phase, tests = "start", 0

    def items_match() -> str | None:
        return None if items == trusted else "the collected tests differ from the acceptance set"

    for rec in records:
        event, bad = rec.get("event"), None
        if event == "start":
            bad = "the run started twice" if phase != "start" else None
            phase = "configured"
        elif phase == "start":
            bad = f"a {event!r} record before the run started"
        elif event == "import_error":
            bad = None if phase == "configured" else "an import error after collection"
        elif event == "collected":
            bad = None if phase == "configured" else "a second collection"
            if rec.get("count") != len(trusted):
                bad = bad or (f"{rec.get('count')} tests collected where the acceptance set "
                              f"has {len(trusted)}")
            phase = "collected"
        elif event == "item":
            bad = None if phase in ("collected", "items") else "a collected test out of place"
            items.append((rec.get("nodeid"), rec.get("checkpoint")))
            phase = "items"
        elif event == "note":
            bad = None if phase == "tests" else "a note outside any test"
        elif event == "test":
            if phase == "items":
                bad = items_match()
                phase = "tests"
            if phase != "tests":
                bad = bad or "a test result before the tests were collected"
            elif tests >= len(trusted) or (rec.get("nodeid"), rec.get("checkpoint")) \
                    != trusted[tests]:
                bad = bad or f"a result for {rec.get('nodeid')!r} where " \
                             f"{trusted[tests][0] if tests < len(trusted) else 'none'!r} was due"
            elif rec.get("outcome") == "passed" and rec.get("pytest_outcome") == "failed":
                bad = f"{rec.get('nodeid')} failed but was reported as passed"
            tests += 1
        elif event == "integrity":
            bad = "harness objects were replaced: " + ", ".join(rec.get("changed", []))
        elif event == "end":
            if phase == "items":
                bad = items_match()
            elif phase != "tests" and phase != "configured":
                bad = "the run ended before collecting"
            phase = "ended"
        else:
            bad = f"an unknown record {event!r}"
        if bad:
            facts["violation"] = bad
            break
        if event in ("import_error", "test", "note"):
            accepted.append(rec)
        elif event == "end":
            accepted.append(rec)
            facts["ended"] = True
    collected: dict[str, list[str]] = {}
    for nodeid, cp in trusted:
        collected.setdefault(cp, []).append(nodeid)
    return [{"event": "collected", "tests": collected}, *accepted], facts


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def judge(problem: manifest.Problem, outcome: sandbox.Outcome,
          trusted: list[tuple[str, str]], limits: sandbox.Limits, display: str,
          stage_dir: Path, target: Path) -> dict:
    """One submission × problem: per-checkpoint results, score, status and reason."""
    records, facts = crosscheck(outcome.records, trusted)
    killed = outcome.timed_out is not None and not facts["ended"]
    result = run._aggregate(problem, target, records, killed=killed, limit=limits.wall)

    def clean_all(text: str | None) -> str | None:
        """Messages name the submitted file, not the temporary copy that ran."""
        return text and text.replace(str(target), display).replace(str(stage_dir), "…")

    expected: dict[str, int] = {}
    for _, cp in trusted:
        expected[cp] = expected.get(cp, 0) + 1
    got: dict[str, int] = {}
    for r in records:
        if r.get("event") == "test":
            got[r["checkpoint"]] = got.get(r["checkpoint"], 0) + 1
    checkpoints = []
    for cp, res in zip(problem.checkpoints, result.checkpoints):
        complete = got.get(cp.id, 0) >= expected.get(cp.id, 0)
        status = res.status if (complete or result.import_error) else "incomplete"
        checkpoints.append({
            "id": cp.id, "title": cp.title, "kind": cp.kind, "status": status,
            "points": cp.points if status == "passed" else 0, "max_points": cp.points,
            "message": clean_all(res.message), "pitfall": res.pitfall,
        })
    reasons, notes = [], []
    if outcome.sandbox_error:
        reasons.append(f"sandbox failure: {outcome.sandbox_error}")
    if result.import_error:
        text = clean_all(result.import_error)
        reasons.append(text if text.startswith("syntax error") else f"import error: {text}")
    if facts["violation"] or outcome.violation or outcome.forged:
        what = facts["violation"] or outcome.violation or \
            f"{outcome.forged} forged report line(s) ignored"
        reasons.append(f"tampered: {what}")
    if outcome.timed_out == "exit" and facts["ended"]:
        notes.append(f"did not exit within {sandbox.EXIT_GRACE:g} s of its last test "
                     "(a non-daemon thread?): stopped")
    elif outcome.timed_out == "import":
        reasons.append(f"timed out while importing (limit {limits.import_wall:g} s)")
    elif outcome.timed_out:
        reasons.append(f"timed out (limit {limits.wall:g} s)")
    elif not facts["ended"] and not reasons:
        if outcome.signal:
            reasons.append(f"crashed ({_signal_name(outcome.signal)})")
        else:
            reasons.append(f"incomplete: the test process ended early "
                           f"(exit code {outcome.exit_code})")
    if not reasons and any(c["status"] == "incomplete" for c in checkpoints):
        reasons.append("incomplete: some checkpoints were not reported")
    if outcome.forged and facts["violation"]:
        notes.append(f"{outcome.forged} forged report line(s) ignored")
    if outcome.output_bytes > sandbox.OUTPUT_TAIL:
        notes.append(f"printed {outcome.output_bytes} bytes (only the tail is kept)")
    if outcome.leftovers:
        notes.append(f"{outcome.leftovers} leftover process(es) killed after the run")
    score = sum(c["points"] for c in checkpoints)
    return {
        "status": "error" if reasons else "ok",
        "reason": reasons[0] if reasons else None,
        "reasons": reasons,
        "score": score, "max_score": problem.points,
        "passed": not reasons and all(c["status"] == "passed" for c in checkpoints
                                      if c["kind"] == "core"),
        "checkpoints": checkpoints,
        "tests_reported": sum(got.values()), "tests_expected": len(trusted),
        "seconds": round(outcome.seconds, 2),
        "output_bytes": outcome.output_bytes,
        "output_tail": clean_all(outcome.output[-OUTPUT_KEPT:]) if reasons else "",
        "notes": notes,
        "leftovers": outcome.leftovers,
        "infrastructure": bool(outcome.sandbox_error),
    }


def grade_pair(problem: manifest.Problem, sub: Submission, trusted: list[tuple[str, str]],
               harness: sandbox.Harness, limits: sandbox.Limits, iso: sandbox.Isolation,
               uid: int | None) -> dict:
    path = sub.files[problem.id]
    source = _read(path)
    display = str(Path(sub.name) / path.relative_to(sub.path)) if path != sub.path \
        else path.name
    with sandbox.Stage(harness, problem.module, source, uid) as stage:
        outcome = sandbox.run(stage, _pytest_args(problem, stage), limits, iso=iso, uid=uid)
        result = judge(problem, outcome, trusted, limits, display, stage.dir, stage.target)
    result.update(file=display, sha256=hashlib.sha256(source).hexdigest())
    return result


def _not_graded(problem: manifest.Problem, status: str, reason: str | None) -> dict:
    return {
        "status": status, "reason": reason, "reasons": [reason] if reason else [],
        "score": 0, "max_score": problem.points, "passed": False,
        "checkpoints": [{"id": cp.id, "title": cp.title, "kind": cp.kind,
                         "status": status, "points": 0, "max_points": cp.points,
                         "message": reason, "pitfall": None} for cp in problem.checkpoints],
        "notes": [], "seconds": 0.0,
    }


# -- the gradebook --------------------------------------------------------------------------

def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a reader (or a crash) sees old or new, never
    half of each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


class Gradebook:
    """The JSON gradebook: rows by submission, one entry per problem; saved after each pair."""

    def __init__(self, path: Path, problems: list[manifest.Problem], meta: dict,
                 fresh: bool) -> None:
        self.path = path
        self.problems = problems
        self._lock = threading.Lock()  # guards doc and the file write
        old = None if fresh else self._load(path)
        self.doc = {"format": FORMAT, "rows": {}, **(old or {})}
        self.doc.update(meta)
        self.doc.setdefault("created", _now())
        self.doc["problems"] = [p.id for p in problems]
        self.doc["max_total"] = sum(p.points for p in problems)

    @staticmethod
    def _load(path: Path) -> dict | None:
        try:
            doc = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            return None
        return doc

    def finished(self, name: str, problem_id: str, fingerprint: str) -> bool:
        entry = self.doc["rows"].get(name, {}).get("problems", {}).get(problem_id)
        return bool(entry) and entry.get("fingerprint") == fingerprint

    def record(self, name: str, problem_id: str, entry: dict) -> None:
        with self._lock:
            row = self.doc["rows"].setdefault(name, {"submission": name, "problems": {}})
            row["problems"][problem_id] = entry
            self._summarise(row)
            self._save()

    def keep_only(self, names: set[str]) -> None:
        with self._lock:
            self.doc["rows"] = {n: r for n, r in self.doc["rows"].items() if n in names}
            for row in self.doc["rows"].values():
                self._summarise(row)
            self._save()

    def _summarise(self, row: dict) -> None:
        entries = {p.id: row["problems"].get(p.id) for p in self.problems}
        row["total"] = sum(e["score"] for e in entries.values() if e)
        row["max_total"] = self.doc["max_total"]
        row["reasons"] = [f"{pid}: {e['reason']}" for pid, e in entries.items()
                          if e and e["status"] == "error"]
        row["status"] = "error" if row["reasons"] else "ok"

    def _save(self) -> None:
        self.doc["updated"] = _now()
        data = json.dumps(self.doc, indent=1, ensure_ascii=False).encode("utf-8")
        atomic_write(self.path, data)

    def save(self) -> None:
        with self._lock:
            self._save()

    def rows(self) -> list[dict]:
        return [self.doc["rows"][n] for n in sorted(self.doc["rows"])]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# -- exports --------------------------------------------------------------------------------

def csv_text(book: Gradebook) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    head = ["submission", "status", "reasons", "total", "max_total"]
    for p in book.problems:
        head += [f"{p.id} score", f"{p.id} status"] + [cp.id for cp in p.checkpoints]
    writer.writerow(head)
    for row in book.rows():
        line = [row["submission"], row["status"], "; ".join(row["reasons"]), row["total"],
                row["max_total"]]
        for p in book.problems:
            entry = row["problems"].get(p.id) or _not_graded(p, "not_submitted", None)
            by_id = {c["id"]: c for c in entry["checkpoints"]}
            line += [entry["score"], entry["status"]]
            line += [by_id.get(cp.id, {}).get("points", 0) for cp in p.checkpoints]
        writer.writerow(line)
    return out.getvalue()


def gradescope_results(row: dict, problems: list[manifest.Problem]) -> dict:
    """Gradescope's ``results.json`` for one submission."""
    tests = []
    for p in problems:
        entry = row["problems"].get(p.id) or _not_graded(p, "not_submitted", "not submitted")
        for c in entry["checkpoints"]:
            detail = c.get("message") or ""
            if entry["status"] == "not_submitted":
                detail = f"{p.learner_file.name} was not submitted"
            elif entry["status"] == "error" and c["status"] != "passed":
                detail = f"{entry['reason']}. {detail}".strip()
            tests.append({
                "name": f"{p.id} · {c['title']}", "number": c["id"],
                "score": c["points"], "max_score": c["max_points"],
                "status": "passed" if c["status"] == "passed" else "failed",
                "output": detail + (f"\nLooks like: {c['pitfall']}" if c.get("pitfall") else ""),
                "visibility": "visible",
            })
    lines = [f"{p.id}: {(row['problems'].get(p.id) or {}).get('score', 0)}/{p.points}"
             + (f" ({row['problems'][p.id]['reason']})"
                if (row["problems"].get(p.id) or {}).get("reason") else "") for p in problems]
    return {"score": row["total"], "output": "\n".join(lines), "visibility": "visible",
            "stdout_visibility": "hidden", "tests": tests}


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip(".") or "_"


def export(book: Gradebook, fmt: str, out: Path, *, single: bool) -> None:
    if fmt == "csv":
        atomic_write(out, csv_text(book).encode("utf-8"))
    elif fmt == "gradescope":
        rows = book.rows()
        if single:
            atomic_write(out, json.dumps(gradescope_results(rows[0], book.problems),
                                         indent=1).encode())
        else:
            for row in rows:
                atomic_write(out / _safe_name(row["submission"]) / "results.json",
                             json.dumps(gradescope_results(row, book.problems),
                                        indent=1).encode())
    # json: the gradebook itself is the export


# -- the batch ------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="check.sh grade", description="Grade a folder of submissions in a sandbox.")
    parser.add_argument("submissions", type=Path, help="a folder of submissions (folders or "
                        ".py files); with --single, one submission")
    parser.add_argument("--problem", nargs="+", action="extend", metavar="pNN",
                        help="only these problems (default: all)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="runs at the same time (default 1)")
    parser.add_argument("--out", type=Path, help="the export (default gradebook.csv, "
                        "gradebook.json, or the folder gradebook-gradescope/)")
    parser.add_argument("--format", choices=FORMATS,
                        help="csv (default), json, or gradescope (results.json per "
                             "submission)")
    parser.add_argument("--single", action="store_true",
                        help="SUBMISSIONS is one submission (Gradescope's layout)")
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument("--resume", dest="fresh", action="store_false", default=False,
                        help="skip pairs already in the gradebook (the default)")
    resume.add_argument("--fresh", dest="fresh", action="store_true",
                        help="grade everything again")
    parser.add_argument("--time-limit", type=float, metavar="S",
                        help="wall-clock limit of one run (default: each manifest's)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _outputs(args) -> tuple[str, Path, Path | None]:
    fmt = args.format or ("json" if args.out and args.out.suffix == ".json" else "csv")
    if fmt == "gradescope":
        out = args.out or Path("results.json" if args.single else "gradebook-gradescope")
        state = None if args.single else out / "gradebook.json"
    else:
        out = args.out or Path(f"gradebook.{fmt}")
        state = out if fmt == "json" else out.with_suffix(".json")
        if state == out and fmt == "csv":
            state = out.with_name(out.name + ".json")
    return fmt, out, state


@dataclass
class Plan:
    todo: list[tuple[Submission, manifest.Problem]]
    skipped: int
    instant: list[tuple[Submission, manifest.Problem, dict]]
    failed: list[str] = field(default_factory=list)  # pairs the grader itself failed on


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        return _grade(args)
    except GradeError as exc:
        errors.print(f"[red]error:[/red] {exc}")
        return 2
    except sandbox.IsolationError as exc:
        errors.print(f"[red]error:[/red] {exc}")
        return 2


def _select(ids: list[str] | None) -> list[manifest.Problem]:
    if not ids:
        return list(manifest.problems().values())
    chosen = []
    for pid in dict.fromkeys(ids):
        try:
            chosen.append(manifest.get(pid))
        except KeyError as exc:
            raise run.UsageError(exc.args[0]) from None
    return chosen


def _grade(args) -> int:
    problems = _select(args.problem)
    if args.jobs < 1:
        raise run.UsageError("--jobs needs a whole number of at least 1")
    if args.time_limit is not None and args.time_limit <= 0:
        raise run.UsageError("--time-limit needs a positive number of seconds")
    root = args.submissions
    if not root.is_dir():
        raise run.UsageError(f"no such folder: {root}")
    fmt, out, state = _outputs(args)
    submissions = discover(root.resolve(), problems, single=args.single)
    if not submissions:
        raise run.UsageError(f"no submissions found in {root}")
    iso = sandbox.detect([p.solution_file for p in manifest.problems().values()])
    if iso.mode == "none":
        errors.print(f"[yellow]warning:[/yellow] {iso.description}")
    tmp_state = None
    if state is None:
        tmp_state = tempfile.TemporaryDirectory(prefix="workbook-gradebook-")
        state = Path(tmp_state.name) / "gradebook.json"
    limits = {p.id: sandbox.Limits.for_wall(args.time_limit or p.time_limit)
              for p in problems}
    harness = {p.id: sandbox.Harness.snapshot(p.id) for p in problems}
    sandbox.remove_stale_stages()
    uids_needed = args.jobs if iso.drops_privileges else 0
    with _only_writer(state), sandbox.UidClaim(uids_needed) as claim:
        book = Gradebook(state, problems, {
            "submissions_dir": str(root.resolve()), "isolation": iso.mode,
            "harness": {pid: h.fingerprint for pid, h in harness.items()},
            "sandbox_uids": claim.uids}, fresh=args.fresh)
        book.keep_only({s.name for s in submissions})  # rows of vanished submissions go
        plan = _plan(submissions, problems, book, limits, harness)
        started = time.monotonic()
        interrupted = _run_plan(plan, problems, book, limits, harness, iso, claim.uids, args)
        elapsed = time.monotonic() - started
    export(book, fmt, out, single=args.single)
    if not args.quiet or interrupted:
        console.print(summary_view(book, plan, elapsed, iso, out if fmt != "json" else state))
    if tmp_state is not None:
        tmp_state.cleanup()
    if interrupted:
        console.print("[yellow]interrupted:[/yellow] finished pairs are saved; run the same "
                      "command again to go on from here")
        return 130
    if plan.failed:
        errors.print(f"[red]{len(plan.failed)} run(s) could not be graded[/red] (the grader's "
                     "problem, not the submission's); run the same command again to retry them")
        return 1
    return 0


@contextlib.contextmanager
def _only_writer(state: Path):
    """Hold an exclusive lock beside the gradebook: two graders writing one gradebook would
    each overwrite the other's rows."""
    state.parent.mkdir(parents=True, exist_ok=True)
    with open(state.with_name(state.name + ".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise run.UsageError(f"another grader is writing {state}; wait for it, or "
                                 "choose another --out") from None
        yield


def _fingerprint(problem: manifest.Problem, sub: Submission, limits: sandbox.Limits,
                 harness: dict) -> str:
    if problem.id in sub.refused:
        what = "refused:" + sub.refused[problem.id]
    elif problem.id in sub.files:
        what = hashlib.sha256(_read(sub.files[problem.id])).hexdigest()[:16]
    else:
        what = "missing"
    return f"{what}:{harness[problem.id].fingerprint}:{limits.wall:g}"


def _plan(submissions, problems, book: Gradebook, limits, harness) -> Plan:
    plan = Plan([], 0, [])
    for sub in submissions:
        for p in problems:
            fp = _fingerprint(p, sub, limits[p.id], harness)
            if book.finished(sub.name, p.id, fp):
                plan.skipped += 1
            elif p.id in sub.refused:
                plan.instant.append((sub, p, {**_not_graded(p, "error", sub.refused[p.id]),
                                              "fingerprint": fp}))
            elif p.id not in sub.files:
                plan.instant.append((sub, p, {**_not_graded(p, "not_submitted", None),
                                              "fingerprint": fp}))
            else:
                plan.todo.append((sub, p))
    return plan


def _run_plan(plan: Plan, problems, book: Gradebook, limits, harness, iso, uids: list[int],
              args) -> bool:
    """Grade every pair of the plan; True if interrupted (finished pairs are saved)."""
    for sub, p, entry in plan.instant:
        book.record(sub.name, p.id, {**entry, "graded_at": _now()})
    book.save()
    if not plan.todo:
        return False
    stopping = threading.Event()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    progress = Progress(SpinnerColumn(), TextColumn("[bold]grading[/bold] {task.description}"),
                        BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=console, disable=args.quiet,
                        transient=False)
    try:
        with progress:
            task = progress.add_task("collecting the acceptance sets…", total=len(plan.todo))
            first_uid = uids[0] if uids else None
            trusted = {p.id: trusted_collection(p, harness[p.id], iso, first_uid)
                       for p in problems if any(q.id == p.id for _, q in plan.todo)}
            free: queue.Queue[int | None] = queue.Queue()  # the claimed uids not in use
            for uid in (uids or [None] * args.jobs):
                free.put(uid)

            def work(sub: Submission, p: manifest.Problem) -> None:
                if stopping.is_set():
                    return
                uid = free.get()
                try:
                    progress.update(task, description=f"{sub.name} · {p.id}")
                    entry = grade_pair(p, sub, trusted[p.id], harness[p.id], limits[p.id],
                                       iso, uid)
                except Exception as exc:  # noqa: BLE001 - the grader's fault: report, go on
                    entry = {"infrastructure": True, "reason": f"{type(exc).__name__}: {exc}"}
                finally:
                    free.put(uid)
                if stopping.is_set():
                    return  # killed by the interrupt: not finished
                if entry.get("infrastructure"):  # not saved: the next run retries it
                    plan.failed.append(f"{sub.name}/{p.id}")
                    progress.console.print(f"[red]could not grade {sub.name}/{p.id}:[/red] "
                                           f"{entry['reason']}")
                    progress.advance(task)
                    return
                entry["fingerprint"] = _fingerprint(p, sub, limits[p.id], harness)
                entry["graded_at"] = _now()
                book.record(sub.name, p.id, entry)
                progress.advance(task)

            with ThreadPoolExecutor(max_workers=args.jobs,
                                    thread_name_prefix="grade") as pool:
                futures = [pool.submit(work, sub, p) for sub, p in plan.todo]
                try:
                    for future in as_completed(futures):
                        future.result()
                except BaseException:
                    stopping.set()
                    for f in futures:
                        f.cancel()
                    sandbox.kill_all()
                    raise
        return False
    except KeyboardInterrupt:
        return True
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def summary_view(book: Gradebook, plan: Plan, elapsed: float, iso: sandbox.Isolation,
                 out: Path) -> Table:
    table = Table(title="Grading summary", title_justify="left")
    table.add_column("problem")
    table.add_column("submitted", justify="right")
    table.add_column("passed", justify="right")
    table.add_column("errors", justify="right")
    table.add_column("mean score", justify="right")
    rows = book.rows()
    for p in book.problems:
        entries = [r["problems"].get(p.id) for r in rows]
        submitted = [e for e in entries if e and e["status"] != "not_submitted"]
        passed = sum(1 for e in submitted if e.get("passed"))
        errs = sum(1 for e in submitted if e["status"] == "error")
        mean = sum(e["score"] for e in submitted) / len(submitted) if submitted else 0.0
        table.add_row(f"{p.id} · {p.title}", str(len(submitted)), str(passed), str(errs),
                      f"{mean:.1f} / {p.points}")
    graded = len(plan.todo)
    rate = graded / elapsed * 60 if elapsed > 0 and graded else 0.0
    table.caption = (f"{len(rows)} submissions · {graded} runs in {elapsed:.0f} s "
                     f"({rate:.1f} runs/min) · {plan.skipped} already graded, skipped · "
                     f"isolation: {iso.mode} · gradebook: {out}")
    table.caption_justify = "left"
    return table


# -- the Gradescope autograder bundle -------------------------------------------------------

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder image.
set -euo pipefail
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --disable-pip-version-check -e /autograder/source
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission; it writes /autograder/results/results.json.
set -euo pipefail
base="${{AUTOGRADER_ROOT:-/autograder}}"
python="${{WORKBOOK_PYTHON:-$base/venv/bin/python}}"
mkdir -p "$base/results"
cd "$base/source"
exec "$python" -m workbook grade "$base/submission" --single --format gradescope \\
    --out "$base/results/results.json" --quiet{problems}
"""


def bundle_files(problems: list[manifest.Problem]) -> dict[str, bytes]:
    """Every file of the autograder zip: the harness, the chosen acceptance sets, the two
    scripts.  No solutions, hints or book."""
    files: dict[str, bytes] = {}
    for name in ("pyproject.toml", "README.md"):
        files[name] = (ROOT / name).read_bytes()
    for path in sorted((ROOT / "workbook").rglob("*")):
        rel = path.relative_to(ROOT)
        if not path.is_file() or "__pycache__" in rel.parts:
            continue
        if rel.parts[:2] == ("workbook", "problems") and path.stem not in \
                {p.id for p in problems}:
            continue
        files[str(rel)] = path.read_bytes()
    for path in sorted((ROOT / "tests").glob("*.py")):
        files[str(path.relative_to(ROOT))] = path.read_bytes()
    for p in problems:
        for path in sorted(p.tests_dir.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files[str(path.relative_to(ROOT))] = path.read_bytes()
    chosen = "".join(f" {p.id}" for p in problems)
    files["setup.sh"] = SETUP_SH.encode()
    files["run_autograder"] = RUN_AUTOGRADER.format(
        problems=f" --problem{chosen}" if problems else "").encode()
    return files


def bundle_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="check.sh gradescope-bundle",
                                     description="Build a Gradescope autograder zip.")
    parser.add_argument("out", type=Path, help="the zip to write, e.g. autograder.zip")
    parser.add_argument("--problem", nargs="+", action="extend", metavar="pNN",
                        help="only these problems (default: all)")
    args = parser.parse_args(argv)
    problems = _select(args.problem)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in sorted(bundle_files(problems).items()):
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            executable = name in ("setup.sh", "run_autograder")
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    atomic_write(args.out, buffer.getvalue())
    console.print(f"wrote {args.out} ({len(buffer.getvalue()) // 1024} KiB): upload it as the "
                  f"autograder of a Gradescope programming assignment "
                  f"({', '.join(p.id for p in problems)}).")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
