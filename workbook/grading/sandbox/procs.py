"""What a run left behind: its processes, found in ``/proc`` by the run's uid (exact: nothing
else runs as it) or, without one, by the mark in their environment; ``sweep`` kills them.
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import time


def _each_process(name: str):
    """``(pid, bytes of /proc/PID/<name>)`` for every other process that can be read."""
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    yield int(pid), f.read()
            except OSError:
                continue


def statuses(uid: int):
    """``(pid, fields of /proc/PID/status)`` of every process whose real uid is ``uid``."""
    for pid, status in _each_process("status"):
        fields = dict(line.split(":", 1) for line in status.decode("utf-8", "replace")
                      .splitlines() if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            yield pid, fields


def processes_of(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid``."""
    return [pid for pid, fields in statuses(uid)
            if fields.get("State", "?").split()[0] not in ("Z", "X")]


def processes_marked(token: str) -> list[int]:
    """Live processes of this user whose environment carries ``token``."""
    mark = f"WORKBOOK_SANDBOX_RUN={token}".encode()
    return [pid for pid, environ in _each_process("environ") if mark in environ.split(b"\0")]


def sweep(uid: int | None, token: str | None = None, grace: float = 0.0) -> int:
    """Kill every process a run left behind; return how many there were.

    With a claimed uid this is exact: nothing else runs as that uid.  Without one (not
    root) processes are found by the run's mark in their environment.  ``grace``: seconds
    to let processes already killed with their group finish dying before they count."""
    if uid is not None:
        find = functools.partial(processes_of, uid)
    elif token:
        find = functools.partial(processes_marked, token)
    else:
        return 0
    found, seen = find(), set()
    settle = time.monotonic() + grace
    deadline = settle + 10
    while found and time.monotonic() < deadline:
        if time.monotonic() >= settle:
            seen.update(found)
            for pid in found:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
        found = find()
    return len(seen)
