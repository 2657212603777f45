"""Run one acceptance set in a subprocess and turn its report into a ``Result``.

The same function serves a learner's check, ``--repeat``, ``all``, the selftest and grading.
The subprocess gets its own process group and a wall-clock limit; whatever checkpoints
finished before a kill are still reported.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from workbook import ROOT, bytecode, manifest, records
from workbook.errors import UsageError  # noqa: F401 - also imported from here
from workbook.tuning import TEST_TIMEOUT


@dataclass
class CheckpointResult:
    id: str
    title: str
    kind: str
    status: str  # "passed" | "failed" | "not_attempted"
    seconds: float = 0.0
    message: str | None = None
    pitfall: str | None = None
    not_implemented: bool = False
    notes: list[str] = field(default_factory=list)
    cause: str | None = None  # failures with the same cause share one diagnosis
    stuck: int = 0  # stuck verdicts of the stuck detector in this checkpoint's tests
    output: str | None = None  # what the learner's code printed in the failure shown
    timeline: dict | None = None  # the failure shown, step by step (an explorer's run)


@dataclass
class Result:
    problem: str
    file: str
    checkpoints: list[CheckpointResult]
    import_error: str | None = None
    incomplete: bool = False
    seconds: float = 0.0
    output: str = ""  # the tail of what pytest printed, for debugging the harness itself

    @property
    def passed(self) -> bool:
        """Every core checkpoint passed and no attempted extension failed."""
        return self.import_error is None and all(
            cp.status in ("passed", "not_attempted") for cp in self.checkpoints
        ) and all(cp.status == "passed" for cp in self.checkpoints if cp.kind == "core")

    @property
    def skeleton(self) -> bool:
        """Nothing is implemented yet: every core checkpoint failed on NotImplementedError."""
        core = [cp for cp in self.checkpoints if cp.kind == "core"]
        return bool(core) and all(cp.not_implemented for cp in core)

    def to_json(self) -> dict:
        return {
            "problem": self.problem, "file": self.file, "passed": self.passed,
            "import_error": self.import_error, "incomplete": self.incomplete,
            "seconds": round(self.seconds, 3),
            "checkpoints": [
                {k: v for k, v in asdict(cp).items() if k != "not_implemented"}
                for cp in self.checkpoints
            ],
        }


def check_source(target: Path) -> str | None:
    """A readable one-line syntax error for ``target``, or None if it compiles."""
    try:
        source = target.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {target}: {exc.strerror}") from None
    try:
        compile(source, str(target), "exec", dont_inherit=True)
    except SyntaxError as exc:
        return syntax_message(exc)
    except ValueError as exc:  # e.g. null bytes
        return f"cannot compile {target}: {exc}"
    return None


def syntax_message(exc: SyntaxError) -> str:
    """'syntax error at f.py:3: msg', then the line and a caret under the column."""
    head = f"syntax error at {exc.filename}:{exc.lineno}: {exc.msg}"
    text = (exc.text or "").rstrip("\n")
    if not text.strip() or not exc.offset:
        return head
    stripped = text.lstrip()
    column = max(0, min(exc.offset - 1 - (len(text) - len(stripped)), len(stripped)))
    return f"{head}\n    {stripped}\n    {' ' * column}^"


def pytest_command(problem: manifest.Problem, target: Path, report: Path,
                   python: str = sys.executable) -> list[str]:
    return [python, "-m", "pytest", *pytest_args(problem, target, report)]


def pytest_args(problem: manifest.Problem, target: Path, report: Path | None, *,
                root: Path = ROOT) -> list[str]:
    """pytest's arguments for one acceptance run.  ``root`` is the directory holding
    ``workbook/`` and ``tests/`` (grading runs a staged copy); no ``report``, no file report."""
    tests = root / problem.tests_dir.relative_to(ROOT)
    return [
        str(tests), "-p", "workbook.plugin", "-p", "timeout", "-p", "no:cacheprovider",
        "--problem", problem.id, "--target", str(target),
        *(["--report", str(report)] if report is not None else []),
        "--rootdir", str(root), "-q", "--no-header", "-rN", "--tb=no",
        "--timeout", str(TEST_TIMEOUT), "--timeout-method", "signal",
    ]


def run_check(problem: manifest.Problem, target: Path, *, time_limit: float | None = None,
              python: str = sys.executable, env: dict | None = None) -> Result:
    """Run ``problem``'s acceptance set against ``target``: ``iter_check`` to its end."""
    for item in iter_check(problem, target, time_limit=time_limit, python=python, env=env,
                           poll=0.2):
        if isinstance(item, Result):
            return item
    raise AssertionError("iter_check ends with its Result")  # pragma: no cover


def child_env(extra: dict | None = None) -> dict:
    """The environment of a check's pytest process: this harness importable, only the
    plugins it names, ``extra`` on top."""
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Only the plugins a check names (-p): no scan of every installed one, a tenth of a
    # second saved on each run, and no stranger plugin in the learner's process.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def _import_failed(problem: manifest.Problem, target: Path, message: str,
                   started: float, output: str | None = None) -> Result:
    """Every checkpoint failed by the import, each carrying what the file printed then."""
    cps = [CheckpointResult(cp.id, cp.title, cp.kind, "failed", message=message,
                            output=output or None)
           for cp in problem.checkpoints]
    return Result(problem.id, str(target), cps, import_error=message,
                  seconds=time.monotonic() - started)


class Tally:
    """The one reading of a run's records, fed as they arrive: the collection, each
    checkpoint's finished tests and notes, an import error, the end."""

    def __init__(self, problem: manifest.Problem) -> None:
        self.problem = problem
        self.collected: dict[str, list[str]] = {}
        self.tests: dict[str, list[records.TestDone]] = {cp.id: [] for cp in problem.checkpoints}
        self.notes: dict[str, list[str]] = {cp.id: [] for cp in problem.checkpoints}
        self.import_error: str | None = None
        self.import_output: str | None = None  # what the file printed while it was imported
        self.ended = False

    def add(self, record: records.Record) -> None:
        event = record.event
        if event == "collected":
            self.collected = record.tests
        elif event == "test" and record.checkpoint in self.tests:
            self.tests[record.checkpoint].append(record)
        elif event == "note" and record.checkpoint in self.notes:
            self.notes[record.checkpoint].append(record.text)
        elif event == "import_error":
            self.import_error, self.import_output = record.message, record.output
        elif event == "end":
            self.ended = True

    def finished(self, *, limit: float) -> dict[str, CheckpointResult]:
        """The checkpoints whose every collected test has reported, judged as the final
        ``Result`` will judge them (for showing results while the run goes on)."""
        done = {}
        for cp in self.problem.checkpoints:
            expected = len(self.collected.get(cp.id, []))
            if expected and len(self.tests[cp.id]) >= expected:
                done[cp.id] = _checkpoint_status(cp, self.tests[cp.id], expected,
                                                 self.notes[cp.id], killed=False, limit=limit)
        return done

    def result(self, target: Path, *, killed: bool, limit: float) -> Result:
        """The run's ``Result`` from everything added."""
        if self.import_error:
            return _import_failed(self.problem, target, self.import_error, time.monotonic(),
                                  self.import_output)
        results = [_checkpoint_status(cp, self.tests[cp.id],
                                      len(self.collected.get(cp.id, [])) or None,
                                      self.notes[cp.id], killed=killed, limit=limit)
                   for cp in self.problem.checkpoints]
        return Result(self.problem.id, str(target), results, incomplete=killed or not self.ended)


def _checkpoint_status(cp: manifest.Checkpoint, runs: list[records.TestDone],
                       expected: int | None, notes: list[str], *, killed: bool,
                       limit: float) -> CheckpointResult:
    result = CheckpointResult(cp.id, cp.title, cp.kind, "failed", notes=list(notes),
                              seconds=round(sum(r.seconds or 0.0 for r in runs), 3))
    failed = [r for r in runs if r.outcome == "failed"]
    missing = expected is None or len(runs) < expected
    result.stuck = sum(int(r.stuck or 0) for r in runs)
    if failed:  # the first diagnosis that names a pitfall is the most useful one
        first = next((r for r in failed if r.pitfall), failed[0])
        result.message = first.message
        result.pitfall = first.pitfall
        result.cause = first.cause
        result.output = first.output
        result.timeline = first.timeline
    elif missing and not runs and expected is None and not killed:
        result.message = "no test checks this checkpoint (harness defect)"
    elif missing:
        result.message = (f"did not finish: the whole run was stopped after {limit:g} s"
                          if killed else "did not finish: the test process ended early")
    elif all(r.outcome == "not_implemented" for r in runs):
        result.not_implemented = True
        result.message = runs[0].message
        if cp.kind == "extension":
            result.status = "not_attempted"
    elif any(r.outcome == "not_implemented" for r in runs):
        first = next(r for r in runs if r.outcome == "not_implemented")
        result.message = f"only partly implemented: {first.message}"
    else:
        result.status = "passed"
    return result


# -- the run: its report records yielded as they arrive -----------------------------------

@dataclass(frozen=True)
class Reported:
    """A report record and the wall-clock time (``time.time()``) at which the report file
    last changed before it was read."""
    record: records.Record
    at: float


def iter_check(problem: manifest.Problem, target: Path, *, time_limit: float | None = None,
               python: str = sys.executable, env: dict | None = None,
               poll: float = 0.02,
               cancel: threading.Event | None = None) -> Iterator[Reported | Result]:
    """Run ``problem``'s acceptance set against ``target`` in a subprocess, yielding each
    report record (``Reported``) as soon as the run has written it (looked for every
    ``poll`` seconds), then the run's ``Result``.  Closing the generator early, or setting
    ``cancel``, stops the run (its whole process group); a cancelled run reports what
    finished before, like one that hit its limit."""
    target = Path(target).resolve()
    if not target.is_file():
        raise UsageError(f"no such file: {target}")
    started = time.monotonic()
    syntax = check_source(target)
    if syntax:
        yield Reported(records.ImportFailed(syntax), time.time())
        yield _import_failed(problem, target, syntax, started)
        return
    limit = time_limit or problem.time_limit
    tally = Tally(problem)
    bytecode.warm_once(ROOT, python)  # the run compiles none of the harness again
    with tempfile.TemporaryDirectory(prefix="workbook-") as tmp:
        report = Path(tmp) / "report.jsonl"
        report.touch()
        output = Path(tmp) / "output.txt"
        with output.open("wb") as out, report.open("rb") as feed:
            proc = subprocess.Popen(
                pytest_command(problem, target, report, python), cwd=ROOT,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=child_env(env), start_new_session=True,
            )
            killed = False
            partial = b""
            try:
                while True:
                    finished = proc.poll() is not None
                    chunk = feed.read()
                    if chunk:
                        stamp = os.fstat(feed.fileno()).st_mtime_ns / 1e9
                        partial += chunk
                        *lines, partial = partial.split(b"\n")
                        for line in lines:
                            record = records.parse_line(line)
                            if record is not None:
                                tally.add(record)
                                yield Reported(record, stamp)
                    if finished:
                        break
                    if time.monotonic() - started > limit or (cancel and cancel.is_set()):
                        killed = True
                        break
                    try:
                        proc.wait(poll)  # returns at once when the run ends
                    except subprocess.TimeoutExpired:
                        pass
            finally:  # also when the consumer closes the generator early, or on Ctrl-C:
                try:  # leave nothing behind, stray children of the learner code included
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
            for line in (partial + feed.read()).split(b"\n"):
                record = records.parse_line(line)  # a line cut short by a kill is skipped
                if record is not None:
                    tally.add(record)
                    yield Reported(record, time.time())
        tail = output.read_bytes()[-4000:].decode("utf-8", "replace")
    result = tally.result(target, killed=killed, limit=limit)
    result.seconds = time.monotonic() - started
    result.output = tail
    yield result


def result_from_records(problem: manifest.Problem, target: Path,
                        report: Iterable[records.Record], *, killed: bool = False,
                        limit: float | None = None) -> Result:
    """The ``Result`` a report's records describe (the grader's records, after checking)."""
    tally = Tally(problem)
    for record in report:
        tally.add(record)
    return tally.result(Path(target), killed=killed, limit=limit or problem.time_limit)
