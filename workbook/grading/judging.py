"""Judging one submission × problem: run it in the sandbox, believe only what the protocol
accepts, and turn that into a gradebook ``Entry``.

The score comes only from the authenticated records that follow the honest order
(``protocol.honest_order``) against a collection of the same tests made without learner
code; the exit code and the output only explain an error, they never earn points.
"""
from __future__ import annotations

import hashlib
import signal
import sys
from collections import Counter
from pathlib import Path

from workbook import manifest, run
from workbook.grading import protocol
from workbook.grading.discovery import Submission
from workbook.grading.gradebook import Entry
from workbook.grading.interpreters import GradingPython, this_python
from workbook.grading.sandbox import judge as judge_, outside, runner
from workbook.grading.sandbox.channels import OUTPUT_TAIL
from workbook.grading.sandbox.limits import Limits
from workbook.grading.sandbox.stage import Harness, Stage

#: How much output an error entry keeps (the tail), for the instructor's eyes only.
OUTPUT_KEPT = 1500
#: Notes kept per test: the judge's own cap, and its line on how many it did not send.
NOTES_PER_TEST = judge_.NOTES_PER_TEST + 1


def _capped(records: list[protocol.Record]) -> list[protocol.Record]:
    """The accepted records with at most ``NOTES_PER_TEST`` notes per test; one more note
    says how many were dropped."""
    out: list[protocol.Record] = []
    notes = dropped = 0
    checkpoint = None  # the checkpoint of the notes being counted
    for rec in records:
        if isinstance(rec, protocol.Note):
            notes += 1
            checkpoint = rec.checkpoint
            if notes > NOTES_PER_TEST:
                dropped += 1
                continue
        elif isinstance(rec, (protocol.TestDone, protocol.End)):
            if dropped:
                out.append(protocol.Note(checkpoint, f"({dropped} more notes not kept)"))
            notes = dropped = 0
        out.append(rec)
    return out


class GradeError(Exception):
    """The batch cannot go on (not a problem with one submission)."""


#: pytest started inside the sandbox by the staged launcher: the audit hook first, the stage
#: first on sys.path, nothing from the grader's (the submission's folder only while the
#: learner file is imported, see ``sandbox.launch``).
_LAUNCHER = Path("workbook", "grading", "sandbox", "launch.py")


def pytest_command(problem: manifest.Problem, stage: Stage, collect_only: bool = False,
                   python: str = sys.executable) -> list[str]:
    return [python, "-I", "-B", str(stage.dir / _LAUNCHER), str(stage.dir),
            "-p", "workbook.grading.sandbox.reporter", "-c", str(stage.dir / "pytest.ini"), "-s",
            *run.pytest_args(problem, stage.target, None, root=stage.dir),
            *(["--collect-only"] if collect_only else [])]


def trusted_collection(problem: manifest.Problem, harness: Harness, iso: str,
                       uid: int | None, python: GradingPython | None = None
                       ) -> list[tuple[str, str]]:
    """The acceptance set's tests in run order, as (node id, checkpoint), collected with no
    learner code at all (under ``python``, the grader's own by default): the yardstick every
    graded run under that interpreter is compared with."""
    python = python or this_python()
    placeholder = b'"""No learner code: the grader collects the tests."""\n'
    with Stage(harness, problem.module, placeholder, uid) as stage:
        outcome = runner.run(stage, pytest_command(problem, stage, collect_only=True,
                                                   python=python.executable),
                             Limits.for_wall(60), iso=iso, uid=uid, python=python.binds)
    items = [(r.nodeid, r.checkpoint) for r in outcome.records if isinstance(r, protocol.Item)]
    if not items or outcome.forged or outcome.violation or outcome.sandbox_error:
        raise GradeError(f"cannot collect the acceptance set of {problem.id} under Python "
                         f"{python.release}: "
                         f"{outcome.sandbox_error or outcome.output[-800:] or 'no tests'}")
    missing = {cp.id for cp in problem.checkpoints} - {cp for _, cp in items}
    if missing:
        raise GradeError(f"{problem.id}: no test checks {sorted(missing)}")
    return items


def _stop_reason(outcome: runner.Outcome, limits: Limits, ended: bool) -> str | None:
    """Why the run stopped short, in the words both the entry and its checkpoints use."""
    if outcome.timed_out == "import":
        return f"timed out while importing (limit {limits.import_wall:g} s)"
    if outcome.timed_out == "run":
        return f"timed out (limit {limits.wall:g} s)"
    if outcome.timed_out == "flood":
        return "stopped: its report flooded the grader"
    if ended or outcome.timed_out in ("exit", "tampered"):  # tampered: its own reason
        return None
    if outcome.run_memory and outcome.signal == signal.SIGKILL:
        return f"stopped by the memory limit of the whole run ({limits.run_memory >> 20} MiB)"
    if outcome.signal:
        try:
            return f"crashed ({signal.Signals(outcome.signal).name})"
        except ValueError:
            return f"crashed (signal {outcome.signal})"
    return f"incomplete: the test process ended early (exit code {outcome.exit_code})"


def judge(problem: manifest.Problem, outcome: runner.Outcome,
          trusted: list[tuple[str, str]], limits: Limits, display: str,
          stage_dir: Path, target: Path) -> Entry:
    """One submission × problem: per-checkpoint results, points, status and reasons."""
    records, seen = outcome.records, None
    if len(outcome.stamps) == len(records):  # what the grader saw from outside: the report
        seen = outside.check(records, outcome.stamps, outcome.started)  # stops where it
        if seen is not None:  # turns impossible
            records = records[:seen[0]]
    verdict = protocol.honest_order(records, trusted)
    collected: dict[str, list[str]] = {}
    for nodeid, cp in trusted:
        collected.setdefault(cp, []).append(nodeid)
    result = run.result_from_records(
        problem, target, [protocol.Collected(len(trusted), collected),
                          *_capped(verdict.accepted)],
        limit=limits.wall)
    reported = Counter(r.checkpoint for r in verdict.accepted if isinstance(r, protocol.TestDone))

    def clean(text: str | None) -> str | None:
        """Messages name the submitted file, not the temporary copy that ran."""
        return text and text.replace(str(target), display).replace(str(stage_dir), "…")

    reasons = []
    if result.import_error:
        text = clean(result.import_error)
        reasons.append(text if text.startswith("syntax error") else f"import error: {text}")
    tampering = verdict.violation or outcome.violation or (
        seen and f"the outside view: {seen[1]}") or (
        outcome.forged and f"{outcome.forged} forged report line(s) ignored")
    if tampering:
        reasons.append(f"tampered: {tampering}")
    stopped = _stop_reason(outcome, limits, verdict.ended)
    if stopped and not (reasons and stopped.startswith("incomplete")):
        reasons.append(stopped)
    for cp in result.checkpoints:
        cp.message = clean(cp.message)
        if reported[cp.id] < len(collected.get(cp.id, [])) and not result.import_error:
            cp.status = "incomplete"
            cp.message = f"not run to the end: {reasons[0] if reasons else 'not reported'}"
    if not reasons and any(cp.status == "incomplete" for cp in result.checkpoints):
        reasons.append("incomplete: some checkpoints were not reported")
    notes = []
    if outcome.timed_out == "exit" and verdict.ended:
        notes.append(f"did not exit within {runner.EXIT_GRACE:g} s of its last test "
                     "(a non-daemon thread?): stopped")
    if outcome.forged and verdict.violation:
        notes.append(f"{outcome.forged} forged report line(s) ignored")
    if outcome.output_bytes > OUTPUT_TAIL:
        notes.append(f"printed {outcome.output_bytes} bytes (only the tail is kept)")
    if outcome.leftovers:
        notes.append(f"{outcome.leftovers} leftover process(es) killed after the run")
    if outcome.run_memory:
        notes.append(f"the run reached its memory limit ({limits.run_memory >> 20} MiB for all "
                     "of its processes together): the kernel stopped some of them")
    return Entry(
        status="error" if reasons else "ok", checkpoints=result.checkpoints,
        max_score=problem.points, reasons=reasons, notes=notes,
        points={cp.id: problem.checkpoint(cp.id).points
                for cp in result.checkpoints if cp.status == "passed"},
        seconds=round(outcome.seconds, 2),
        cpu=None if outcome.cpu is None else round(outcome.cpu, 3), tests_expected=len(trusted),
        tests_reported=sum(reported.values()), output_bytes=outcome.output_bytes,
        output_tail=clean(outcome.output[-OUTPUT_KEPT:]) if reasons else "",
        leftovers=outcome.leftovers)


def grade_pair(problem: manifest.Problem, sub: Submission, trusted: list[tuple[str, str]],
               harness: Harness, limits: Limits, iso: str,
               uid: int | None, explore_seed: int | None = None,
               python: GradingPython | None = None) -> Entry:
    """Stage, run and judge one submission's file for ``problem`` under ``python`` (the
    grader's own by default).  Raises only for the grader's own failures (``runner.run``
    never raises for what learner code does)."""
    python = python or this_python()
    path = sub.files[problem.id]
    try:
        source, helpers = sub.read(path), sub.helpers(problem.id)
    except OSError as exc:  # swapped or removed since discovery: the row says so
        return Entry.placeholder(problem, "error", f"cannot be read any more ({exc.strerror})")
    display = path.name if path == sub.path or path in sub.extra_paths \
        else str(Path(sub.name) / path.relative_to(sub.path))
    with Stage(harness, problem.module, source, uid, helpers=helpers) as stage:
        outcome = runner.run(stage, pytest_command(problem, stage, python=python.executable),
                             limits, iso=iso, uid=uid, explore_seed=explore_seed,
                             python=python.binds)
        if outcome.sandbox_error:
            raise GradeError(f"the sandbox failed: {outcome.sandbox_error}")
        entry = judge(problem, outcome, trusted, limits, display, stage.dir, stage.target)
    entry.file, entry.sha256 = display, hashlib.sha256(source).hexdigest()
    entry.explore_seed = explore_seed
    folder = Path(display).parent
    entry.files = {display: entry.sha256, **{
        str(folder / rel): hashlib.sha256(data).hexdigest() for rel, data in helpers.items()}}
    return entry
