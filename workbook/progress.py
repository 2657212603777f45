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


def record_attempt(problem_id: str, passed: int, total: int) -> None:
    with _update() as data:
        e = data["problems"].setdefault(problem_id, {})
        e["last_check"] = {"passed": passed, "total": total,
                           "at": time.strftime("%Y-%m-%d %H:%M:%S")}


def record_check(problem_id: str, result: Result) -> None:
    """What a learner's check of their own file records, from the terminal or the page: the
    attempt's tally and, when it passed, the problem done."""
    passed = sum(cp.status == "passed" for cp in result.checkpoints)
    record_attempt(problem_id, passed, len(result.checkpoints))
    if result.passed:
        mark_done(problem_id, shown_path(result.file))


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
