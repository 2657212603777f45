"""The learner's local progress file: problems done, hint levels seen.

Read-modify-write happens under an exclusive ``flock`` on a side file, and the new content
replaces the old atomically, so two checks finishing at once lose nothing.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from workbook import ROOT, shown_path

if TYPE_CHECKING:
    from workbook.run import Result

DEFAULT_PATH = ROOT / ".workbook" / "progress.json"


def path() -> Path:
    return Path(os.environ.get("WORKBOOK_PROGRESS", DEFAULT_PATH))


def load() -> dict:
    try:
        data = json.loads(path().read_text("utf-8"))
    except (OSError, ValueError):
        return {"problems": {}}
    if not isinstance(data, dict) or not isinstance(data.get("problems"), dict):
        return {"problems": {}}
    return data


@contextlib.contextmanager
def _update() -> Iterator[dict]:
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = load()
        yield data
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".progress-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)


def entry(data: dict, problem_id: str) -> dict:
    return data["problems"].get(problem_id, {})


def mark_done(problem_id: str, file: str) -> None:
    with _update() as data:
        e = data["problems"].setdefault(problem_id, {})
        e.setdefault("done_at", time.strftime("%Y-%m-%d %H:%M:%S"))
        e["file"] = file


def file_hash(file: str | Path) -> str | None:
    """The SHA-256 of a checked file's bytes (hex), None when it cannot be read."""
    import hashlib
    try:
        return hashlib.sha256(Path(file).read_bytes()).hexdigest()
    except OSError:
        return None


def record_attempt(problem_id: str, passed: int, total: int, *, ok: bool | None = None,
                   sha256: str | None = None, source: str | None = None,
                   result: dict | None = None) -> dict | None:
    """Keep the tally of the last check (and what it was run on, and its whole result when
    given); the previous one is returned (None if there was none)."""
    with _update() as data:
        e = data["problems"].setdefault(problem_id, {})
        previous = e.get("last_check")
        last = {"passed": passed, "total": total, "at": time.strftime("%Y-%m-%d %H:%M:%S")}
        if ok is not None:
            last["ok"] = ok  # every core checkpoint passed (Result.passed)
        if sha256 is not None:
            last["sha256"] = sha256
        if source is not None:
            last["source"] = source  # "terminal" or "page"
        if result is not None:
            last["result"] = result  # what the page shows as the last result
        e["last_check"] = last
        return previous


def record_check(problem_id: str, result: Result, *, source: str = "terminal") -> dict | None:
    """What a learner's check of their own file records, from the terminal or the page: the
    attempt's tally, its time, the file's hash and, when it passed, the problem done.  A
    later failing check keeps ``done_at`` (the problem was solved once) but ``status`` then
    says "done, but the last check failed".  Returns the previous last check."""
    passed = sum(cp.status == "passed" for cp in result.checkpoints)
    previous = record_attempt(problem_id, passed, len(result.checkpoints), ok=result.passed,
                              sha256=file_hash(result.file), source=source,
                              result=stored_result(result))
    if result.passed:
        mark_done(problem_id, shown_path(result.file))
    return previous


def stored_result(result: Result) -> dict:
    """``result`` as the progress file keeps it (each output capped as in a record)."""
    from dataclasses import asdict

    from workbook.records import cap_output
    return {"file": result.file, "import_error": result.import_error,
            "incomplete": result.incomplete, "seconds": round(result.seconds, 3),
            "checkpoints": [{**asdict(cp), "output": cap_output(cp.output) if cp.output
                             else None} for cp in result.checkpoints]}


def last_result(problem_id: str, e: dict) -> Result | None:
    """The last check's whole result, as ``record_check`` kept it; None when it kept none
    (a check recorded before results were kept, or none at all)."""
    from dataclasses import fields

    from workbook.run import CheckpointResult, Result
    stored = (e.get("last_check") or {}).get("result")
    if not isinstance(stored, dict):
        return None
    names = {f.name for f in fields(CheckpointResult)}
    try:
        cps = [CheckpointResult(**{k: v for k, v in cp.items() if k in names})
               for cp in stored["checkpoints"]]
        return Result(problem_id, str(stored["file"]), cps,
                      import_error=stored.get("import_error"),
                      incomplete=bool(stored.get("incomplete")),
                      seconds=float(stored.get("seconds") or 0.0))
    except (KeyError, TypeError, ValueError):  # a file edited by hand: no last result
        return None


def check_key(e: dict) -> tuple | None:
    """What tells one recorded check from another (for noticing a new one)."""
    last = e.get("last_check")
    if not last:
        return None
    return (last.get("at"), last.get("source"), last.get("sha256"), last.get("passed"),
            last.get("total"), last.get("ok"))


def when(at: str) -> str:
    """A recorded time as people read it here: '05:40' today, '12-01 05:40' another day."""
    at = str(at or "")
    return at[11:16] if at[:10] == time.strftime("%Y-%m-%d") else at[5:16]


def last_failed(e: dict) -> bool:
    """The problem is marked done but its last check (after that) failed."""
    last = e.get("last_check") or {}
    return bool(e.get("done_at")) and last.get("ok") is False


def changed_since(e: dict, file: str | Path) -> bool:
    """``file`` is no longer the file the last check ran on (its hash differs)."""
    recorded = (e.get("last_check") or {}).get("sha256")
    return recorded is not None and file_hash(file) != recorded


def status_text(e: dict, file: str | Path | None = None) -> str:
    """The honest one-line state of a problem: done (and whether the last check failed
    since), or the last check's tally; "file changed since" when the file differs from the
    one last checked."""
    last = e.get("last_check")
    if e.get("done_at"):
        text = "done, but the last check failed" if last_failed(e) else "done"
    elif last:
        text = f"{last['passed']}/{last['total']} at last check"
    else:
        text = "not started"
    if file is not None and last and changed_since(e, file):
        text += " · file changed since"
    return text


def repeat_advice(previous: dict | None, result: Result, problem_id: str) -> str | None:
    """What to say after a recorded check: when its outcome differs from the last one's, a
    race passes by luck, so suggest ``--repeat``; when it failed on a problem marked done,
    say that the problem stays done but its status now says the last check failed.  None
    when there is nothing to say."""
    advice = _outcome_changed(previous, result, problem_id)
    if not result.passed and entry(load(), problem_id).get("done_at"):
        stays = (f"{problem_id} stays marked done (it passed before), but its status is now "
                 f"“done, but the last check failed” (./check.sh status).")
        advice = f"{advice} {stays}" if advice else stays
    return advice


def _outcome_changed(previous: dict | None, result: Result, problem_id: str) -> str | None:
    if not previous or previous.get("ok") is None or previous["ok"] == result.passed:
        return None
    same = previous.get("sha256") is not None and previous["sha256"] == file_hash(result.file)
    at = str(previous.get("at", ""))[11:16]
    command = f"./check.sh {problem_id} --repeat 20"
    if same:
        return (f"This same file {'failed' if result.passed else 'passed'} its last check "
                f"({at}): its result depends on timing. Run {command} to see how often.")
    if result.passed:
        return (f"The check before this one failed ({at}): a race can pass by luck. "
                f"Run {command} to be sure.")
    return None


def hints_seen(problem_id: str) -> int:
    return int(entry(load(), problem_id).get("hints_seen", 0))


def record_hint(problem_id: str, level: int) -> None:
    with _update() as data:
        e = data["problems"].setdefault(problem_id, {})
        e["hints_seen"] = max(level, int(e.get("hints_seen", 0)))


def unmark_done(problem_id: str) -> None:
    """Undo ``mark_done`` (the web page's "undo"); the rest of the entry stays."""
    with _update() as data:
        e = data["problems"].get(problem_id)
        if e is not None:
            e.pop("done_at", None)
            e.pop("file", None)
