"""Run one acceptance set in a subprocess and turn its report into a ``Result``.

The same function serves a learner's check, ``--repeat``, ``all``, the selftest and grading.
The subprocess gets its own process group and a wall-clock limit; whatever checkpoints
finished before a kill are still reported.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from workbook import ROOT, manifest
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


class UsageError(Exception):
    """Bad input from the command line: exit code 2."""


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
    """Run ``problem``'s acceptance set against ``target``."""
    target = Path(target).resolve()
    if not target.is_file():
        raise UsageError(f"no such file: {target}")
    started = time.monotonic()
    syntax = check_source(target)
    if syntax:
        return _import_failed(problem, target, syntax, started)
    limit = time_limit or problem.time_limit
    with tempfile.TemporaryDirectory(prefix="workbook-") as tmp:
        report = Path(tmp) / "report.jsonl"
        report.touch()
        output = Path(tmp) / "output.txt"
        with output.open("wb") as out:
            proc = subprocess.Popen(
                pytest_command(problem, target, report, python), cwd=ROOT,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env=child_env(env), start_new_session=True,
            )
            killed = _wait(proc, limit)
        records = _read_report(report)
        tail = output.read_bytes()[-4000:].decode("utf-8", "replace")
    result = _aggregate(problem, target, records, killed=killed, limit=limit)
    result.seconds = time.monotonic() - started
    result.output = tail
    return result


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


def _wait(proc: subprocess.Popen, limit: float) -> bool:
    """Wait up to ``limit`` seconds; then kill the whole process group. True if killed."""
    try:
        proc.wait(limit)
        killed = False
    except subprocess.TimeoutExpired:
        killed = True
    except BaseException:  # Ctrl-C (--watch): leave no check running behind
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        raise
    try:  # leave nothing behind: stray children of the learner code go too
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    return killed


def _read_report(path: Path) -> list[dict]:
    records = []
    for line in path.read_text("utf-8", "replace").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
    return records


def _import_failed(problem: manifest.Problem, target: Path, message: str,
                   started: float) -> Result:
    cps = [CheckpointResult(cp.id, cp.title, cp.kind, "failed", message=message)
           for cp in problem.checkpoints]
    return Result(problem.id, str(target), cps, import_error=message,
                  seconds=time.monotonic() - started)


def _aggregate(problem: manifest.Problem, target: Path, records: list[dict], *,
               killed: bool, limit: float) -> Result:
    collected: dict[str, list[str]] = {}
    tests: dict[str, list[dict]] = {cp.id: [] for cp in problem.checkpoints}
    notes: dict[str, list[str]] = {cp.id: [] for cp in problem.checkpoints}
    import_error = None
    ended = False
    for rec in records:
        event = rec.get("event")
        if event == "collected":
            collected = rec.get("tests", {})
        elif event == "test" and rec.get("checkpoint") in tests:
            tests[rec["checkpoint"]].append(rec)
        elif event == "note" and rec.get("checkpoint") in notes:
            notes[rec["checkpoint"]].append(rec.get("text", ""))
        elif event == "import_error":
            import_error = rec.get("message")
        elif event == "end":
            ended = True
    if import_error:
        return _import_failed(problem, target, import_error, time.monotonic())
    results = []
    incomplete = killed or not ended
    for cp in problem.checkpoints:
        expected = len(collected.get(cp.id, [])) or None
        results.append(_checkpoint_status(cp, tests[cp.id], expected, notes[cp.id],
                                          killed=killed, limit=limit))
    return Result(problem.id, str(target), results, incomplete=incomplete)


def _checkpoint_status(cp: manifest.Checkpoint, runs: list[dict], expected: int | None,
                       notes: list[str], *, killed: bool, limit: float) -> CheckpointResult:
    result = CheckpointResult(cp.id, cp.title, cp.kind, "failed", notes=notes,
                              seconds=round(sum(r.get("seconds", 0.0) for r in runs), 3))
    failed = [r for r in runs if r.get("outcome") == "failed"]
    missing = expected is None or len(runs) < expected
    result.stuck = sum(int(r.get("stuck", 0) or 0) for r in runs)
    if failed:  # the first diagnosis that names a pitfall is the most useful one
        first = next((r for r in failed if r.get("pitfall")), failed[0])
        result.message = first.get("message")
        result.pitfall = first.get("pitfall")
        result.cause = first.get("cause")
    elif missing and not runs and expected is None and not killed:
        result.message = "no test checks this checkpoint (harness defect)"
    elif missing:
        result.message = (f"did not finish: the whole run was stopped after {limit:g} s"
                          if killed else "did not finish: the test process ended early")
    elif all(r.get("outcome") == "not_implemented" for r in runs):
        result.not_implemented = True
        result.message = runs[0].get("message")
        if cp.kind == "extension":
            result.status = "not_attempted"
    elif any(r.get("outcome") == "not_implemented" for r in runs):
        first = next(r for r in runs if r.get("outcome") == "not_implemented")
        result.message = f"only partly implemented: {first.get('message')}"
    else:
        result.status = "passed"
    return result


# -- streaming: the same run, its report records yielded as they arrive ---------------------

def iter_check(problem: manifest.Problem, target: Path, *, time_limit: float | None = None,
               python: str = sys.executable, env: dict | None = None,
               poll: float = 0.02,
               cancel: threading.Event | None = None) -> Iterator[dict | Result]:
    """Run ``problem``'s acceptance set against ``target`` like ``run_check``, yielding each
    report record (a dict) as soon as the run has written it, then the ``Result`` that
    ``run_check`` would have returned.  Each record gets ``reported_at``: the wall-clock
    time (``time.time()``) at which the report file last changed before it was read.
    Closing the generator early, or setting ``cancel``, stops the run (its whole process
    group); a cancelled run reports what finished before, like one that hit its limit."""
    target = Path(target).resolve()
    if not target.is_file():
        raise UsageError(f"no such file: {target}")
    started = time.monotonic()
    syntax = check_source(target)
    if syntax:
        yield {"event": "import_error", "message": syntax, "reported_at": time.time()}
        yield _import_failed(problem, target, syntax, started)
        return
    limit = time_limit or problem.time_limit
    with tempfile.TemporaryDirectory(prefix="workbook-") as tmp:
        report = Path(tmp) / "report.jsonl"
        report.touch()
        output = Path(tmp) / "output.txt"
        records: list[dict] = []
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
                            try:
                                rec = json.loads(line)
                            except ValueError:
                                continue  # a line cut short by a kill
                            records.append(rec)
                            yield {**rec, "reported_at": stamp}
                    if finished:
                        break
                    if time.monotonic() - started > limit or (cancel and cancel.is_set()):
                        killed = True
                        break
                    time.sleep(poll)
            finally:  # also when the consumer closes the generator early
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
            rest = partial + feed.read()
            for line in rest.split(b"\n"):
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                records.append(rec)
                yield {**rec, "reported_at": time.time()}
        tail = output.read_bytes()[-4000:].decode("utf-8", "replace")
    result = _aggregate(problem, target, records, killed=killed, limit=limit)
    result.seconds = time.monotonic() - started
    result.output = tail
    yield result


def checkpoint_progress(problem: manifest.Problem, records: list[dict], *,
                        limit: float) -> dict[str, CheckpointResult]:
    """The checkpoints whose every collected test has reported, judged as the final
    ``Result`` will judge them (for showing results while the run goes on)."""
    collected: dict[str, list[str]] = {}
    runs: dict[str, list[dict]] = {cp.id: [] for cp in problem.checkpoints}
    notes: dict[str, list[str]] = {cp.id: [] for cp in problem.checkpoints}
    for rec in records:
        if rec.get("event") == "collected":
            collected = rec.get("tests", {})
        elif rec.get("event") == "test" and rec.get("checkpoint") in runs:
            runs[rec["checkpoint"]].append(rec)
        elif rec.get("event") == "note" and rec.get("checkpoint") in notes:
            notes[rec["checkpoint"]].append(rec.get("text", ""))
    done = {}
    for cp in problem.checkpoints:
        expected = len(collected.get(cp.id, []))
        if expected and len(runs[cp.id]) >= expected:
            done[cp.id] = _checkpoint_status(cp, runs[cp.id], expected, notes[cp.id],
                                             killed=False, limit=limit)
    return done


def result_from_records(problem: manifest.Problem, target: Path, records: list[dict], *,
                        killed: bool = False, limit: float | None = None) -> Result:
    """The ``Result`` a report's records describe (the grader's records, after checking)."""
    return _aggregate(problem, Path(target), records, killed=killed,
                      limit=limit or problem.time_limit)
