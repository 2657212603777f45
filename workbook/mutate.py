"""``./check.sh mutate pNN``: mutation testing of a reference against its acceptance set.

Cosmic Ray (a mutation-testing tool) finds the mutants: its operators list every place in
the reference where one small change can be made, and its work DB (sqlite, readable with
``cr-report``) holds them with their results.  Each mutant is then judged the way a learner's
file is: written to a temporary ``<module>.py`` and checked with ``run_check`` in a
subprocess, several at a time.  A mutant is *killed* when a checkpoint fails (or the file no
longer imports), *timed out* when the run is stopped at its time limit (also a detection),
and *survives* when every checkpoint passes: then the acceptance set misses a way to be wrong,
unless the mutant is *equivalent* (behaves exactly like the reference) and is listed in
``tests/pNN/equivalent_mutants.toml`` with a reason.

Mutant identity (what an equivalent-mutant entry names), stable under unrelated edits:
``operator`` (Cosmic Ray's name, e.g. ``core/NumberReplacer``; ``workbook/RemoveCall`` is
the workbook's own operator, plugged into Cosmic Ray: a call statement becomes ``pass``), ``original`` and ``mutated``
(the changed source line before and after, stripped of indentation and comments kept as
they are) and ``occurrence`` (0 for the first mutant with that operator and those two texts,
counted from the top of the file; above 0 only when identical lines exist).  ``line`` is
written too, for the reader, but matching ignores it, so an entry survives lines moving.

A mutant's run stops at its first failing test (pytest ``-x``): one failure kills it.
Score = (killed + timed out) / (mutants - equivalent).  Mutations inside type annotations
are not run when the module has ``from __future__ import annotations`` (annotations are then
never evaluated, so every such mutant is equivalent); they are counted as ``skipped``.
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import random
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from workbook import ROOT, manifest
from workbook.errors import ArgumentParser, UsageError
from workbook.run import Result, run_check

DEFAULT_OUT = ROOT / ".workbook" / "mutate"
OUTCOMES = ("killed", "timeout", "survived", "equivalent", "skipped")


def _cosmic_ray():
    try:
        import cosmic_ray.plugins  # noqa: F401
    except ImportError:
        raise UsageError("mutation testing needs Cosmic Ray: run it as ./check.sh mutate ... "
                         "(installs the 'mutate' extra), or pip install -e '.[mutate]'") from None
    import cosmic_ray
    return cosmic_ray


@dataclass
class Mutant:
    operator: str          # Cosmic Ray's operator name
    cr_occurrence: int     # Cosmic Ray's occurrence (index among this operator's sites)
    job_id: str            # the work item's id in the Cosmic Ray work DB
    line: int              # first changed line of the reference (for the reader)
    original: str          # the changed line(s) before, stripped
    mutated: str           # the changed line(s) after, stripped
    code: str = field(repr=False)
    occurrence: int = 0    # stable: among mutants with the same operator/original/mutated
    outcome: str = ""      # one of OUTCOMES once judged
    killed_by: list[str] = field(default_factory=list)
    reason: str = ""       # why it is equivalent, or skipped, or how it was killed
    seconds: float = 0.0
    file: str | None = None

    @property
    def id(self) -> str:
        """A short stable id: a hash of the identity."""
        raw = "\0".join((self.operator, self.original, self.mutated, str(self.occurrence)))
        return hashlib.sha1(raw.encode("utf-8")).hexdigest()[:10]

    @property
    def identity(self) -> dict:
        """The entry that lists this mutant as equivalent (add a ``reason``)."""
        return {"operator": self.operator, "line": self.line, "occurrence": self.occurrence,
                "original": self.original, "mutated": self.mutated}

    def to_json(self) -> dict:
        doc = {"id": self.id, **self.identity, "outcome": self.outcome,
               "killed_by": self.killed_by, "reason": self.reason,
               "seconds": round(self.seconds, 2), "cosmic_ray_job": self.job_id,
               "cosmic_ray_occurrence": self.cr_occurrence}
        if self.file:
            doc["file"] = self.file
        return doc


# -- finding the mutants --------------------------------------------------------------------

def _register_operators() -> None:
    """Add the workbook's own operator provider to Cosmic Ray's (its plugin interface).

    Cosmic Ray's core operators change expressions; concurrency code is more often wrong by a
    missing statement (no ``notify``, no ``clear()``, no ``await``), so ``workbook/RemoveCall``
    replaces a statement that is only a call or an await with ``pass``."""
    import cosmic_ray.plugins
    from cosmic_ray.operators.operator import Example, Operator
    from parso.python.tree import Keyword

    class RemoveCall(Operator):
        """Replace a call or await statement (its value unused) with ``pass``."""

        def mutation_positions(self, node):
            if node.type == "atom_expr" and node.parent is not None \
                    and node.parent.type == "simple_stmt":
                first, last = node.children[0], node.children[-1]
                is_call = last.type == "trailer" and last.children[0].type == "operator" \
                    and last.children[0].value == "("
                if is_call or (first.type == "keyword" and first.value == "await"):
                    yield (node.start_pos, node.end_pos)

        def mutate(self, node, index):
            return Keyword("pass", node.start_pos, prefix=node.get_first_leaf().prefix)

        @classmethod
        def examples(cls):
            return (Example("def f(e):\n    e.set()\n", "def f(e):\n    pass\n"),)

    class Provider:
        _operators = {"RemoveCall": RemoveCall}

        def __iter__(self):
            return iter(self._operators)

        def __getitem__(self, name):
            return self._operators[name]

    cosmic_ray.plugins.OPERATOR_PROVIDERS.setdefault("workbook", Provider())


def _changed(before: str, after: str) -> tuple[int, str, str]:
    """(first changed line, changed text before, changed text after) of two sources."""
    old, new = before.splitlines(), after.splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            return (i1 + 1, " / ".join(s.strip() for s in old[i1:i2]),
                    " / ".join(s.strip() for s in new[j1:j2]))
    return 0, "", ""


def _annotation_spans(tree) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the type annotations of a parso tree are."""
    from cosmic_ray.ast import ast_nodes

    spans = []
    for node in ast_nodes(tree):
        annotation = None
        if node.type in ("param", "funcdef"):
            annotation = getattr(node, "annotation", None)
        elif node.type == "annassign":
            annotation = node.children[1]
        if annotation is not None:
            spans.append((annotation.start_pos, annotation.end_pos))
    return spans


def find_mutants(problem: manifest.Problem, work: Path) -> list[Mutant]:
    """Initialise the Cosmic Ray work DB for a copy of the reference and make every mutant."""
    _cosmic_ray()
    from cosmic_ray.ast import get_ast
    from cosmic_ray.commands import init  # the function
    from cosmic_ray.mutating import mutate_code
    from cosmic_ray.plugins import get_operator
    from cosmic_ray.work_db import WorkDB, use_db

    _register_operators()
    reference = problem.solution_file.read_text("utf-8")
    copy = work / f"{problem.module}.py"
    copy.write_text(reference, "utf-8")
    skip_annotations = "from __future__ import annotations" in reference
    spans = _annotation_spans(get_ast(reference)) if skip_annotations else []
    with use_db(str(work / "session.sqlite"), WorkDB.Mode.create) as db:
        init([copy], db, {})
        items = sorted(db.work_items, key=lambda w: (w.mutations[0].start_pos,
                                                     w.mutations[0].operator_name,
                                                     w.mutations[0].occurrence))
    mutants = []
    for item in items:
        spec = item.mutations[0]
        operator = get_operator(spec.operator_name)(**(spec.operator_args or {}))
        code = mutate_code(reference, operator, spec.occurrence)
        if code is None or code == reference:
            continue
        line, original, mutated = _changed(reference, code)
        mutant = Mutant(spec.operator_name, spec.occurrence, item.job_id, line, original,
                        mutated, code)
        if any(a <= tuple(spec.start_pos) and tuple(spec.end_pos) <= b for a, b in spans):
            mutant.outcome = "skipped"
            mutant.reason = "in a type annotation, never evaluated (from __future__ import annotations)"
        mutants.append(mutant)
    seen: dict[tuple[str, str, str], int] = {}
    for m in mutants:  # already in source order
        key = (m.operator, m.original, m.mutated)
        m.occurrence = seen.get(key, 0)
        seen[key] = m.occurrence + 1
    return mutants


# -- equivalent mutants ---------------------------------------------------------------------

def equivalents_file(problem: manifest.Problem) -> Path:
    return problem.tests_dir / "equivalent_mutants.toml"


def load_equivalents(problem: manifest.Problem) -> list[dict]:
    """The ``[[equivalent]]`` entries of tests/pNN/equivalent_mutants.toml (none if absent)."""
    path = equivalents_file(problem)
    if not path.is_file():
        return []
    with path.open("rb") as f:
        data = tomllib.load(f)
    entries = data.get("equivalent", [])
    for i, entry in enumerate(entries, 1):
        missing = [k for k in ("operator", "original", "mutated", "reason")
                   if not isinstance(entry.get(k), str) or not entry.get(k).strip()]
        if missing:
            raise UsageError(f"{path.name} entry {i}: missing {', '.join(missing)}")
        entry.setdefault("occurrence", 0)
    return entries


def _matches(entry: dict, mutant: Mutant) -> bool:
    return (entry["operator"] == mutant.operator and entry["original"] == mutant.original
            and entry["mutated"] == mutant.mutated
            and int(entry["occurrence"]) == mutant.occurrence)


def mark_equivalents(mutants: list[Mutant], entries: list[dict]) -> list[dict]:
    """Mark the listed mutants equivalent; return the entries that match no mutant."""
    stale = []
    for entry in entries:
        hits = [m for m in mutants if _matches(entry, m)]
        if not hits:
            stale.append(entry)
        for m in hits:
            if m.outcome != "skipped":
                m.outcome, m.reason = "equivalent", entry["reason"]
    return stale


def sample(mutants: list[Mutant], k: int | None) -> list[Mutant]:
    """A deterministic sample of ``k`` of the mutants still to judge (by their stable ids)."""
    todo = [m for m in mutants if not m.outcome]
    if k is None or k >= len(todo):
        return todo
    chosen = set(random.Random(0).sample(sorted(m.id for m in todo), k))
    return [m for m in todo if m.id in chosen]


# -- judging them ---------------------------------------------------------------------------

#: pytest stops at the first failing test: one failure is enough to kill a mutant.
FAIL_FAST = {"PYTEST_ADDOPTS": "-x"}
NOT_RUN = "did not finish: the test process ended early"


def judge(problem: manifest.Problem, mutant: Mutant, folder: Path, limit: float,
          fail_fast: bool = True) -> Mutant:
    """Check one mutant with the acceptance set, in its own ``<module>.py``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{problem.module}.py"
    path.write_text(mutant.code, "utf-8")
    started = time.monotonic()
    result = run_check(problem, path, time_limit=limit, env=FAIL_FAST if fail_fast else None)
    mutant.seconds = time.monotonic() - started
    mutant.outcome, mutant.killed_by, mutant.reason = _verdict(result, limit)
    if mutant.outcome == "survived":
        mutant.file = str(path)
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return mutant


def _verdict(result: Result, limit: float) -> tuple[str, list[str], str]:
    """(outcome, the checkpoints that failed, a one-line reason); with fail-fast, the
    checkpoints left unrun after the first failure are not counted as killers."""
    failed = [cp.id for cp in result.checkpoints
              if cp.status != "passed" and cp.message != NOT_RUN]
    failed = failed or [cp.id for cp in result.checkpoints if cp.status != "passed"]
    if result.import_error:
        return "killed", failed, f"does not import: {result.import_error}"
    stopped = [cp.id for cp in result.checkpoints
               if (cp.message or "").startswith("did not finish: the whole run was stopped")]
    if result.incomplete and stopped and result.seconds >= limit:
        others = [c for c in failed if c not in stopped]
        return "timeout", others or stopped, f"stopped after {limit:g} s"
    if failed:
        first = next(cp for cp in result.checkpoints if cp.id == failed[0])
        return "killed", failed, (first.message or "").splitlines()[0][:200] if first.message else ""
    if result.incomplete:
        return "killed", [], "the test process ended early"
    return "survived", [], ""


def _record(db, mutant: Mutant, reference: str, module: str) -> None:
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    diff = "".join(difflib.unified_diff(reference.splitlines(True), mutant.code.splitlines(True),
                                        f"a/{module}.py", f"b/{module}.py"))
    if mutant.outcome in ("equivalent", "skipped"):
        result = WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output=mutant.reason, diff=diff)
    else:
        test = TestOutcome.SURVIVED if mutant.outcome == "survived" else TestOutcome.KILLED
        result = WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=test, diff=diff,
                            output=f"{mutant.outcome}: {', '.join(mutant.killed_by)} {mutant.reason}")
    db.set_result(mutant.job_id, result)


@dataclass
class Report:
    problem: str
    mutants: list[Mutant]
    stale: list[dict]
    seconds: float
    jobs: int
    limit: float
    sampled: int | None
    database: str
    fail_fast: bool = True

    def count(self, outcome: str) -> int:
        return sum(m.outcome == outcome for m in self.mutants)

    @property
    def judged(self) -> list[Mutant]:
        return [m for m in self.mutants if m.outcome in ("killed", "timeout", "survived")]

    @property
    def score(self) -> float | None:
        """(killed + timed out) / (mutants judged), equivalent and skipped ones left out."""
        judged = self.judged
        if not judged:
            return None
        return sum(m.outcome in ("killed", "timeout") for m in judged) / len(judged)

    def to_json(self) -> dict:
        return {
            "problem": self.problem, "seconds": round(self.seconds, 1), "jobs": self.jobs,
            "time_limit": self.limit, "sample": self.sampled, "work_db": self.database,
            "fail_fast": self.fail_fast,
            "counts": {o: self.count(o) for o in OUTCOMES} | {"total": len(self.mutants)},
            "score": None if self.score is None else round(self.score, 4),
            "stale_equivalents": self.stale,
            "mutants": [m.to_json() for m in self.mutants if m.outcome],
        }


def run(problem: manifest.Problem, *, jobs: int = 2, k: int | None = None,
        limit: float | None = None, out: Path = DEFAULT_OUT, fail_fast: bool = True,
        progress=None) -> Report:
    """Mutation-test ``problem``'s reference; ``progress(done, total, mutant)`` after each."""
    started = time.monotonic()
    work = out / problem.id
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    baseline = run_check(problem, problem.solution_file)
    if not all(cp.status == "passed" for cp in baseline.checkpoints) or baseline.import_error:
        raise UsageError(f"{problem.id}: the reference does not pass its own acceptance set; "
                         "fix that before mutation testing")
    if limit is None:
        limit = min(problem.time_limit, max(30.0, 10 * baseline.seconds))
    mutants = find_mutants(problem, work)
    stale = mark_equivalents(mutants, load_equivalents(problem))
    todo = sample(mutants, k)
    if k is not None:  # a sample: report only the mutants chosen
        chosen = {id(m) for m in todo}
        mutants = [m for m in mutants if id(m) in chosen]
    reference = problem.solution_file.read_text("utf-8")
    from cosmic_ray.work_db import WorkDB, use_db

    by_code: dict[str, list[Mutant]] = {}
    for m in todo:  # identical code from two operators: judged once
        by_code.setdefault(m.code, []).append(m)
    with use_db(str(work / "session.sqlite"), WorkDB.Mode.open) as db:
        for m in mutants:
            if m.outcome:
                _record(db, m, reference, problem.module)
        done = 0
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(judge, problem, group[0], work / "mutants" / group[0].id,
                                   limit, fail_fast): group for group in by_code.values()}
            try:
                for future in as_completed(futures):
                    first = future.result()
                    for m in futures[future]:
                        if m is not first:
                            m.outcome, m.killed_by, m.reason = (first.outcome, first.killed_by,
                                                                f"same code as {first.id}")
                            m.seconds, m.file = 0.0, first.file
                        _record(db, m, reference, problem.module)
                        done += 1
                        if progress is not None:
                            progress(done, len(todo), m)
            except KeyboardInterrupt:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    return Report(problem.id, mutants, stale, time.monotonic() - started, jobs, limit, k,
                  str(work / "session.sqlite"), fail_fast)


# -- the command ----------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="check.sh mutate",
        description="Mutation testing of a reference solution against its acceptance set.")
    parser.add_argument("problem")
    parser.add_argument("--jobs", type=int, default=2, metavar="N",
                        help="mutants checked at once (default 2)")
    parser.add_argument("--sample", type=int, metavar="K",
                        help="check a deterministic sample of K mutants only")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="time limit of one mutant's run (default: 10x the reference's, "
                             "at least 30 s)")
    parser.add_argument("--all-checkpoints", action="store_true",
                        help="run every test of a mutant (default: stop at the first "
                             "failure, which kills it); slower, lists every killer")
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                        help="where the work DB, the survivors and the report go "
                             "(default .workbook/mutate)")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.jobs < 1 or (args.sample is not None and args.sample < 1):
        raise UsageError("--jobs and --sample need a whole number of at least 1")
    try:
        problem = manifest.get(args.problem)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    _cosmic_ray()
    from rich.console import Console

    console = Console(stderr=args.json, highlight=False)
    report = _run_with_progress(problem, args, console)
    path = args.out / f"{problem.id}.json"
    path.write_text(json.dumps(report.to_json(), indent=2) + "\n", "utf-8")
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        _print_report(report, console, path)
    return 0 if report.count("survived") == 0 and not report.stale else 1


def _run_with_progress(problem, args, console) -> Report:
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    counts = {"killed": 0, "timeout": 0, "survived": 0}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("[green]{task.fields[killed]} killed[/] · "
                          "[yellow]{task.fields[timeout]} timed out[/] · "
                          "[red]{task.fields[survived]} survived[/]"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(f"{problem.id}: reference and mutants…", total=None, **counts)

        def step(done: int, total: int, mutant: Mutant) -> None:
            if mutant.outcome in counts:
                counts[mutant.outcome] += 1
            bar.update(task, completed=done, total=total,
                       description=f"{problem.id} mutants", **counts)

        return run(problem, jobs=args.jobs, k=args.sample, limit=args.timeout, out=args.out,
                   fail_fast=not args.all_checkpoints, progress=step)


def _print_report(report: Report, console, path: Path) -> None:
    from rich.table import Table

    summary = Table(title=f"{report.problem}: mutation testing of the reference", title_justify="left")
    for name in ("killed", "timed out", "survived", "equivalent", "skipped", "total", "score"):
        summary.add_column(name, justify="right")
    score = "—" if report.score is None else f"{100 * report.score:.1f} %"
    summary.add_row(*(str(report.count(o)) for o in OUTCOMES[:5]), str(len(report.mutants)),
                    score)
    console.print(summary)
    survivors = [m for m in report.mutants if m.outcome == "survived"]
    if survivors:
        table = Table(title="surviving mutants: sharpen a check, or list them as equivalent",
                      title_justify="left")
        for name in ("id", "line", "operator", "original → mutated"):
            table.add_column(name, overflow="fold")
        for m in survivors:
            table.add_row(m.id, str(m.line), m.operator.removeprefix("core/"),
                          f"{m.original}\n[red]→ {m.mutated}[/red]")
        console.print(table)
    for entry in report.stale:
        console.print(f"[yellow]stale entry in {equivalents_file(manifest.get(report.problem)).name}"
                      f": no mutant {entry['operator']} {entry['original']!r} → "
                      f"{entry['mutated']!r} (occurrence {entry['occurrence']})[/yellow]")
    sampled = f" · a sample of {report.sampled}" if report.sampled else ""
    console.print(f"[dim]{report.seconds:.0f} s with {report.jobs} jobs, {report.limit:g} s per "
                  f"mutant{sampled} · report {path} · work DB {report.database} "
                  f"(cr-report reads it)[/dim]")
