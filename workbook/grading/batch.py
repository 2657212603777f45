"""``./check.sh grade SUBMISSIONS_DIR``: grade a folder of submissions in parallel.

Plan every submission × problem (all ``pending`` in the gradebook at once, so an interrupt
leaves unfinished work visibly unfinished), skip what an earlier run already finished with
the same file, acceptance set, limit, seed and interpreters, grade the rest ``--jobs`` runs
at a time (one run per interpreter, ``interpreters``), then export.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import json
import os
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.table import Column, Table

from workbook import manifest, run
from workbook.errors import ArgumentParser, UsageError
from workbook.grading import exports, interpreters, similarity
from workbook.grading.discovery import Submission, discover
from workbook.grading.gradebook import Entry, Gradebook, atomic_write
from workbook.explore.driver import seed_for
from workbook.grading.judging import GradeError, grade_pair, trusted_collection
from workbook.grading.sandbox import IsolationError, runner
from workbook.grading.sandbox.isolation import detect
from workbook.grading.sandbox.limits import Limits
from workbook.grading.sandbox.stage import Harness, remove_stale_stages
from workbook.grading.sandbox.uids import UID_POOL, UidClaim

console = Console(highlight=False)
errors = Console(stderr=True, highlight=False)


def shown(text: object) -> str:
    """Text that came from a submission (a name, a reason, a message) made safe to print in
    a terminal or a log: control characters (newlines, ANSI escapes) shown as escapes, and
    rich markup escaped, so it can neither fake a line nor restyle or abort the output."""
    cleaned = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return escape(cleaned)


def default_jobs() -> int:
    """Runs at once by default: 4 per core the grader may use.  A run spends most of its
    wall time waiting (the acceptance sets sleep, time out and wait for wakeups on purpose),
    under 1 s of CPU in 3–6 s, so one run per core leaves the cores idle."""
    return min(4 * len(os.sched_getaffinity(0)), UID_POOL)


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="check.sh grade", description="Grade a folder of submissions in a sandbox.")
    parser.add_argument("submissions", type=Path, help="a folder of submissions (folders or "
                        ".py files); with --single, one submission")
    parser.add_argument("--problem", nargs="+", action="extend", metavar="pNN",
                        help="only these problems (default: all)")
    parser.add_argument("--jobs", type=int, default=default_jobs(), metavar="N",
                        help="runs at the same time (default %(default)s: 4 per core, since "
                             "a run mostly waits on the acceptance set's own timeouts)")
    parser.add_argument("--out", type=Path, help="the export (default gradebook.csv, "
                        "gradebook.json, or the folder gradebook-gradescope/)")
    parser.add_argument("--format", choices=exports.FORMATS,
                        help="csv (default), json, or gradescope (results.json per submission)")
    parser.add_argument("--gradebook", type=Path, metavar="FILE",
                        help="the gradebook (resume state) to use; default: beside a CSV or "
                             "JSON --out, else gradebook.json")
    parser.add_argument("--single", action="store_true",
                        help="SUBMISSIONS is one submission (Gradescope's layout)")
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument("--resume", dest="fresh", action="store_false", default=False,
                        help="skip pairs already in the gradebook (the default)")
    resume.add_argument("--fresh", dest="fresh", action="store_true",
                        help="grade everything again")
    parser.add_argument("--seed", type=int, metavar="N",
                        help="the seed every exploration checkpoint draws its scenarios from "
                             "(default: each problem's own); recorded in the gradebook")
    parser.add_argument("--time-limit", type=float, metavar="S",
                        help="wall-clock limit of one run (default: each manifest's)")
    parser.add_argument("--excel", action="store_true",
                        help="CSV for spreadsheets: a UTF-8 byte-order mark first")
    parser.add_argument("--messages", action="store_true",
                        help="CSV: a column with each failed checkpoint's message")
    parser.add_argument("--similarity", type=float, default=90.0, metavar="PERCENT",
                        help="report submissions at least this alike (default 90; 0: off)")
    parser.add_argument("--visibility", choices=exports.VISIBILITIES, default="visible",
                        help="gradescope: when students see each checkpoint's result "
                             "(default: visible)")
    parser.add_argument("--roster", type=Path, metavar="CSV",
                        help="the class list (a CSV whose first column, or column 'id', holds "
                             "each student's submission name): who is absent, who is unknown")
    parser.add_argument("--quiet", action="store_true", help="no progress, no summary")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--pythons", dest="one_python", action="store_false", default=False,
                       help="judge every run under each supported Python found, 3.10-3.13 "
                            "(the default): a checkpoint earns its points only when it "
                            "passes under all of them")
    which.add_argument("--one-python", dest="one_python", action="store_true",
                       help="judge under the grader's own Python only (faster; a mistake "
                            "of one Python version goes unseen)")
    which.add_argument("--python", action="append", metavar="X.Y",
                       help="judge under this version only (repeat it for several)")
    return parser


def _paths(args) -> tuple[str, Path, Path | None]:
    """The export's format and path, and the gradebook's path (None: a temporary one, for
    one Gradescope submission)."""
    fmt = args.format or ("json" if args.out and args.out.suffix == ".json" else "csv")
    if fmt == "gradescope":
        out = args.out or Path("results.json" if args.single else "gradebook-gradescope")
        state = args.gradebook or (None if args.single else Path("gradebook.json"))
    else:
        out = args.out or Path(f"gradebook.{fmt}")
        state = args.gradebook or (out if fmt == "json" else out.with_suffix(".json"))
    if fmt != "json" and state is not None and state.resolve() == out.resolve():
        raise UsageError("--gradebook and --out must be different files")
    return fmt, out, state


def select(ids: list[str] | None) -> list[manifest.Problem]:
    if not ids:
        return list(manifest.problems().values())
    try:
        return [manifest.get(pid) for pid in dict.fromkeys(ids)]
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None


@dataclass
class Plan:
    todo: list[tuple[Submission, manifest.Problem, str]] = field(default_factory=list)
    skipped: int = 0          # graded pairs already finished in the gradebook
    done: int = 0             # pairs finished by this run
    failed: list[str] = field(default_factory=list)  # pairs the grader itself failed on
    seconds: float = 0.0      # how long grading them took
    pythons: list[str] = field(default_factory=list)  # the releases each pair is judged by


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        with contextlib.ExitStack() as stack:
            return _grade(args, stack)
    except (GradeError, IsolationError) as exc:
        errors.print(f"[red]error:[/red] {shown(exc)}")
        return 2


def _grade(args, stack: contextlib.ExitStack) -> int:
    problems = select(args.problem)
    if args.jobs < 1:
        raise UsageError("--jobs needs a whole number of at least 1")
    if args.time_limit is not None and args.time_limit <= 0:
        raise UsageError("--time-limit needs a positive number of seconds")
    if not args.submissions.is_dir():
        raise UsageError(f"no such folder: {args.submissions}")
    fmt, out, state = _paths(args)
    if state is None:
        state = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "gradebook.json"
    unpacked = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="workbook-zips-")))
    submissions = discover(args.submissions.resolve(), problems, single=args.single,
                           unpack_to=unpacked, warn=_warn)
    if not submissions:
        raise UsageError(f"no submissions found in {args.submissions}")
    judges = interpreters.choose(args.one_python, args.python, say=_note, warn=_warn)
    forbidden = [p.solution_file for p in manifest.problems().values()]
    iso = detect(forbidden)
    if iso == "none":
        _warn("not root: learner code runs as you (resource limits only; it could read "
              "solutions/ by path)")
    else:  # each other interpreter proves, like the grader's own, that it runs sandboxed
        judges = interpreters.sandboxed(judges, iso, forbidden, strict=bool(args.python),
                                        warn=_warn)
    limits = {p.id: Limits.for_wall(args.time_limit or p.time_limit) for p in problems}
    harness = {p.id: Harness.snapshot(p) for p in problems}
    remove_stale_stages()
    alike = None  # the similarity report, made beside the runs (it needs only the files)
    if args.similarity > 0 and len(submissions) > 1:
        alike = similarity.Background(submissions, problems, args.similarity,
                                      state.with_name(state.stem + "-fingerprints.json"))
        stack.callback(alike.stop)
    with _only_writer(state), UidClaim(0 if iso == "none" else args.jobs) as claim:
        book = Gradebook(state, problems, {
            "submissions_dir": str(args.submissions.resolve()), "isolation": iso,
            "harness": {pid: h.fingerprint for pid, h in harness.items()},
            "sandbox_uids": claim.uids, "pythons": [
                {"version": j.version, "release": j.release, "executable": j.executable}
                for j in judges]})
        book.keep_only({s.name for s in submissions})  # rows of vanished submissions go
        plan = _plan(submissions, problems, book, limits, harness, fresh=args.fresh,
                     seed=args.seed, pythons=[j.release for j in judges])
        interrupted = _run_plan(plan, book, limits, harness, iso, claim.uids, args, judges)
    exports.export(book, fmt, out, single=args.single, excel=args.excel,
                   messages=args.messages, visibility=args.visibility)
    extra = {"insight": exports.insight(book)}
    if args.roster:
        extra["roster"] = roster_report(args.roster, submissions, args.submissions)
    if alike is not None and not interrupted:
        found = alike.wait()
        if isinstance(found, str):
            errors.print(f"[yellow]note:[/yellow] {shown(found)}")
        else:
            extra["similarity"] = found
    report = state.with_name(state.stem + "-report.json")
    atomic_write(report, json.dumps(extra, indent=1, ensure_ascii=False).encode(
        "utf-8", "backslashreplace"))  # a name that is not UTF-8: JSON's escapes
    if not args.quiet or interrupted:
        console.print(summary_view(book, plan, iso, out if fmt != "json" else state))
        console.print(insight_view(extra["insight"]))
        if extra.get("similarity"):
            console.print(similarity_view(extra["similarity"]))
        if "roster" in extra:
            console.print(roster_view(extra["roster"]))
        console.print(f"class insight and similarity: {report}")
    if interrupted:
        again = "again without --fresh" if args.fresh else "again"
        console.print("[yellow]interrupted:[/yellow] finished pairs are saved; unfinished ones "
                      f"are 'pending' (or keep their earlier result). Run the command {again} "
                      "to go on from here.")
        return 130
    if plan.failed:
        errors.print(f"[red]{len(plan.failed)} run(s) could not be graded[/red] (the grader's "
                     "problem, not the submission's); run the same command again to retry them")
        return 1
    return 0


def _note(text: str) -> None:
    errors.print(f"[dim]note:[/dim] {shown(text)}")


def _warn(text: str) -> None:
    errors.print(f"[yellow]warning:[/yellow] {shown(text)}")


@contextlib.contextmanager
def _only_writer(state: Path):
    """Hold an exclusive lock beside the gradebook: two graders writing one gradebook would
    each overwrite the other's rows."""
    state.parent.mkdir(parents=True, exist_ok=True)
    with open(state.with_name(state.name + ".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"another grader is writing {state}; wait for it, or "
                                 "choose another --gradebook") from None
        yield


def _plan(submissions, problems, book: Gradebook, limits, harness, fresh: bool = False,
          seed: int | None = None, pythons: list[str] | None = None) -> Plan:
    """Every pair into the gradebook: finished ones kept, instant ones (not submitted,
    refused) recorded, the rest ``pending`` and queued.  ``fresh``: every pair is queued
    again, but a finished result stays in the gradebook until its pair is redone (an
    interrupted ``--fresh`` loses nothing)."""
    plan = Plan(pythons=pythons or [interpreters.this_python().release])
    judged_by = "+".join(plan.pythons)  # other interpreters: another grading
    for sub in submissions:
        for p in problems:
            fp = (f"{sub.fingerprint(p.id)}:{harness[p.id].fingerprint}:{limits[p.id].wall:g}"
                  f":{seed_for(p.id, seed)}:{judged_by}")  # another seed too
            if fresh and p.id in sub.files and p.id not in sub.refused \
                    and book.finished(sub.name, p.id, fp):
                plan.todo.append((sub, p, fp))  # redone; the old result shows until then
                continue
            if book.finished(sub.name, p.id, fp) and not fresh:
                if p.id in sub.files or p.id in sub.refused:  # not "not submitted"
                    plan.skipped += 1
                continue
            if p.id in sub.refused:
                entry = Entry.placeholder(p, "error", sub.refused[p.id])
            elif p.id not in sub.files:
                entry = Entry.placeholder(p, "not_submitted")
            else:
                entry = Entry.placeholder(p, "pending")
                plan.todo.append((sub, p, fp))
            book.record(sub.name, p.id, entry, fp, save=False)
    book.save()
    return plan


def _run_plan(plan: Plan, book: Gradebook, limits, harness, iso: str, uids: list[int],
              args, judges: list[interpreters.GradingPython]) -> bool:
    """Grade every queued pair, one run per interpreter, each run a task of its own (a
    small class keeps every slot busy too); True if interrupted (finished pairs are
    saved)."""
    if not plan.todo:
        return False
    started = time.monotonic()
    stopping = threading.Event()
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)  # KeyboardInterrupt
    progress = Progress(SpinnerColumn(), TextColumn("[bold]grading[/bold] {task.description}"),
                        BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=console,
                        disable=args.quiet or not console.is_terminal)
    task = progress.add_task("collecting the acceptance sets…",
                             total=len(plan.todo) * len(judges))
    slots = list(uids or [None] * args.jobs)  # each worker thread runs as one claimed uid
    slot = threading.local()

    def work(sub: Submission, p: manifest.Problem,
             judge: interpreters.GradingPython) -> Entry | None:
        if stopping.is_set():
            return None
        progress.update(task, description=f"{shown(sub.name)} · {p.id}"
                        + (f" · {judge.version}" if len(judges) > 1 else ""))
        return grade_pair(p, sub, trusted[p.id, judge.version], harness[p.id], limits[p.id],
                          iso, slot.uid, explore_seed=seed_for(p.id, args.seed), python=judge)

    pool = ThreadPoolExecutor(max_workers=args.jobs, thread_name_prefix="grade",
                              initializer=lambda: setattr(slot, "uid", slots.pop()))
    try:
        with progress, pool:
            try:
                # one collection a problem and interpreter
                wanted = {(p.id, j.version): (p, j) for _, p, _ in plan.todo for j in judges}
                trusted = dict(zip(wanted, pool.map(
                    lambda pj: trusted_collection(pj[0], harness[pj[0].id], iso, slot.uid,
                                                  pj[1]), wanted.values())))
                # Only this thread records: after an interrupt nothing more is, so a run
                # the interrupt killed stays pending.
                futures = {pool.submit(work, sub, p, j): (i, j.version)
                           for i, (sub, p, _) in enumerate(plan.todo) for j in judges}
                runs: dict[int, dict] = {}  # each pair's finished runs, by version
                for future in as_completed(futures):
                    i, version = futures[future]
                    runs.setdefault(i, {})[version] = future
                    progress.advance(task)
                    if len(runs[i]) == len(judges):  # the pair's last run: record it
                        _finished(plan, book, *plan.todo[i], runs.pop(i), judges, progress,
                                  args.quiet)
            except BaseException:
                stopping.set()
                pool.shutdown(wait=False, cancel_futures=True)
                runner.kill_all()
                raise
        return False
    except KeyboardInterrupt:
        return True
    finally:
        signal.signal(signal.SIGTERM, previous)
        plan.seconds = time.monotonic() - started


def _finished(plan: Plan, book: Gradebook, sub: Submission, p: manifest.Problem, fp: str,
              futures: dict, judges: list[interpreters.GradingPython], progress: Progress,
              quiet: bool) -> None:
    """Record a pair whose every run (``futures``, by version) is done, combined."""
    plan.done += 1
    try:
        entry = interpreters.combine(p, {j.version: futures[j.version].result()
                                         for j in judges}, {j.version: j for j in judges})
    except Exception as exc:  # noqa: BLE001 - the grader's fault: report, go on
        entry = None
        line = f"could not grade {shown(sub.name)}/{p.id}: {type(exc).__name__}: {shown(exc)}"
        plan.failed.append(f"{sub.name}/{p.id}")  # left pending: the next run retries it
    else:
        book.record(sub.name, p.id, entry, fp)
        line = (f"{shown(sub.name)}/{p.id}: {entry.status} {entry.score}/{entry.max_score}"
                + (f" ({shown(entry.reason)})" if entry.reason else ""))
    if not console.is_terminal and not quiet:  # a log line per pair, for CI and LMSs
        print(f"[{plan.done}/{len(plan.todo)}] {line}", flush=True)
    elif entry is None:
        progress.console.print(f"[red]{line}[/red]")


def read_roster(path: Path) -> list[str]:
    """The ids of a roster CSV: its column ``id`` (or ``student``, ``name``), else its first."""
    import csv
    try:
        rows = [r for r in csv.reader(path.read_text("utf-8-sig").splitlines()) if r]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise run.UsageError(f"cannot read the roster {path}: {exc}") from None
    if not rows:
        return []
    head = [c.strip().lower() for c in rows[0]]
    column = next((head.index(k) for k in ("id", "student", "name") if k in head), None)
    body = rows[1:] if column is not None else rows
    return [r[column or 0].strip() for r in body if len(r) > (column or 0) and r[column or 0].strip()]


def roster_report(path: Path, submissions: list[Submission], folder: Path) -> dict:
    """Who on the roster handed in nothing (absent), which submissions are on no roster line
    (unknown), and which entries of the class folder made no submission at all (unmatched)."""
    ids = read_roster(path)
    names = {s.name for s in submissions}
    used = {(s.entry or s.path).name for s in submissions} | {
        p.name for s in submissions for p in s.extra_paths}
    unmatched = sorted(e.name for e in folder.iterdir()
                       if not e.name.startswith(".") and e.name not in used
                       and e.name not in {"__MACOSX"})
    return {"absent": sorted(set(ids) - names), "unknown": sorted(names - set(ids)),
            "unmatched": unmatched, "roster": len(ids)}


def roster_view(data: dict) -> Table:
    table = _table("Roster", "who", "names", caption=f"{data['roster']} on the roster")
    for key, what in (("absent", "on the roster, nothing submitted"),
                      ("unknown", "submitted, not on the roster"),
                      ("unmatched", "in the folder, not a submission")):
        table.add_row(what, ", ".join(map(shown, data[key])) or "–")
    return table


def _table(title: str, *columns: str | Column, caption: str | None = None) -> Table:
    return Table(*columns, title=title, title_justify="left", caption=caption,
                 caption_justify="left")


_right = functools.partial(Column, justify="right")


def summary_view(book: Gradebook, plan: Plan, iso: str, out: Path) -> Table:
    """Per problem, over finished pairs only: submitted, passed, errors, pending, mean."""
    rows = book.sorted_rows()
    rate = plan.done / plan.seconds * 60 if plan.seconds > 0 and plan.done else 0.0
    table = _table("Grading summary", "problem",
                   *map(_right, ("submitted", "passed", "errors", "pending", "mean score")),
                   caption=f"{len(rows)} submissions · {plan.done} of {len(plan.todo)} runs "
                           f"finished in {plan.seconds:.0f} s ({rate:.1f} runs/min) · "
                           f"{plan.skipped} already graded, skipped · isolation: {iso} · "
                           f"{_judged_by(plan.pythons)} · {out}")
    for p in book.problems:
        entries = [e for e in (r.problems.get(p.id) for r in rows) if e is not None]
        finished = [e for e in entries if e.status in ("ok", "error")]
        pending = sum(1 for e in entries if e.status == "pending")
        mean = sum(e.score for e in finished) / len(finished) if finished else 0.0
        table.add_row(f"{p.id} · {p.title}", str(len(finished)),
                      str(sum(1 for e in finished if e.passed)),
                      str(sum(1 for e in finished if e.status == "error")), str(pending),
                      f"{mean:.1f} / {p.points}")
    return table


def _judged_by(releases: list[str]) -> str:
    return (f"Python {releases[0]}" if len(releases) == 1 else
            f"each judged under Python {', '.join(releases)}")


def insight_view(data: dict) -> Table:
    table = _table("Class insight", "checkpoint", _right("pass rate"),
                   "pitfalls diagnosed (share of graded submissions)")
    for pid, info in data.items():
        by_checkpoint: dict[str, list[str]] = {}
        for name, hit in info["pitfalls"].items():
            for cp in hit["checkpoints"]:
                by_checkpoint.setdefault(cp, []).append(f"{shown(name)} {hit['rate']:.0%}")
        for cp_id, cp in info["checkpoints"].items():
            rate = "–" if cp["rate"] is None else f"{cp['rate']:.0%}"
            table.add_row(cp_id, rate, ", ".join(sorted(set(by_checkpoint.get(cp_id, [])))))
    return table


def similarity_view(data: dict) -> Table:
    table = _table("Similar submissions", "problem", "submissions", _right("alike"))
    for pid, info in data.items():
        for group in info["identical"]:
            table.add_row(pid, ", ".join(map(shown, group)), "same after normalising")
        for pair in info["similar"]:
            table.add_row(pid, f"{shown(pair['a'])}, {shown(pair['b'])}",
                          f"{pair['percent']:.0f} %")
        for note in info.get("notes", ()):  # decoded otherwise, cut, or not compared
            table.add_row(pid, f"{shown(note['submission'])}: {shown(note['note'])}", "note")
    if not table.rows:
        table.add_row("–", "no two submissions are alike above the threshold", "")
    return table


if __name__ == "__main__":  # pragma: no cover - run as ``./check.sh grade``: the same
    from workbook import cli  # one-line errors and exit codes as every other command
    sys.exit(cli.main(["grade", *sys.argv[1:]]))
