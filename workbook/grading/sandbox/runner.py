"""Running one stage in the sandbox: start it (``command``) with the report on a pipe of its own
and the output drained to a bounded tail (``channels``), watch it against its deadlines
without polling, then end it and ``sweep`` whatever it left.  ``run`` never raises for what
the learner code does.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

from workbook.grading import protocol
from workbook.grading.sandbox.cgroups import RunGroup
from workbook.grading.sandbox.channels import OutputDrain, ReportReader
from workbook.grading.sandbox.command import command
from workbook.grading.sandbox.limits import Limits
from workbook.grading.sandbox.procs import sweep
from workbook.grading.sandbox.stage import STAGE_PREFIX, Stage

#: Seconds a run may take to exit after reporting its end (then it is stopped: a stray
#: non-daemon thread must not cost the whole wall-clock limit).
EXIT_GRACE = 5.0


@dataclass
class Outcome:
    """What one sandboxed run produced, before any judging."""
    records: list[protocol.Record]      # authenticated records, in order, up to a violation
    stamps: list[protocol.Stamp] = field(default_factory=list)  # one a record
    forged: int = 0                     # report lines that failed authentication
    violation: str | None = None        # first sequence problem in authenticated records
    timed_out: str | None = None  # "run" | "import" | "exit" | "flood" | "tampered" | None
    exit_code: int | None = None        # the run's exit code (for the reason text only)
    signal: int | None = None           # the signal that ended the run, if one did
    output: str = ""                    # tail of stdout+stderr
    output_bytes: int = 0
    seconds: float = 0.0
    leftovers: int = 0                  # processes still alive after the run (then killed)
    sandbox_error: str | None = None    # the trampoline itself failed
    run_memory: bool = False            # the run's cgroup hit its memory limit
    cpu: float | None = None            # CPU seconds of the whole run (its cgroup), if counted
    started: float = 0.0                # the grader's monotonic clock before the run began


_LIVE: set[subprocess.Popen] = set()  # runs in progress, for kill_all()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()  # kill_all() was called: a run that starts after it dies at once


def run(stage: Stage, argv: list[str], limits: Limits, *, iso: str, uid: int | None,
        explore_seed: int | None = None, python: Sequence[str] = ()) -> Outcome:
    """Run ``argv`` (pytest, or the probe) on ``stage`` inside the sandbox (``iso``: what
    ``detect`` found), as ``uid`` (claimed with ``UidClaim``; None when not root); never
    raises for anything the learner code does.  ``explore_seed``: the seed the exploration
    checkpoint draws its scenarios from (recorded in the gradebook).  ``python``: the folders
    the sandbox binds for ``argv``'s interpreter when it is not the grader's own."""
    started = time.monotonic()
    key = secrets.token_bytes(32)
    token = secrets.token_hex(12)  # marks every process of this run (found by sweep)
    report_r, report_w = os.pipe()
    key_r, key_w = os.pipe()
    out_r, out_w = os.pipe()
    # The trampoline's own failures come on a pipe of their own that the run never holds
    # (closed at its exec): whatever the run prints, or its exit code, cannot pose as one.
    status_r, status_w = os.pipe()
    os.write(key_w, key)
    os.close(key_w)
    work = str(stage.work)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "TMPDIR": work,
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "MALLOC_ARENA_MAX": "2", "COLUMNS": "120",
           "WORKBOOK_REPORT_FD": str(report_w), "WORKBOOK_KEY_FD": str(key_r),
           "WORKBOOK_SANDBOX_RUN": token}
    if "WORKBOOK_BOUND" in os.environ:  # the acceptance sets' own knob
        env["WORKBOOK_BOUND"] = os.environ["WORKBOOK_BOUND"]
    if explore_seed is not None:
        env["WORKBOOK_EXPLORE_SEED"] = str(explore_seed)
    sweep(uid)  # a grader killed earlier may have left this uid busy
    group = RunGroup(f"{STAGE_PREFIX}{os.getpid()}-{token}", limits.run_memory,
                     limits.processes) if iso != "none" \
        else None
    memory_hit, cpu = False, None
    reader = ReportReader(report_r, key, group.cpu if group is not None else lambda: None)
    drain = OutputDrain(out_r)
    try:
        proc = subprocess.Popen(command(iso, uid, stage, limits, argv,
                                           [str(d) for d in group.dirs] if group else [],
                                           status_w, python),
                                stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                                pass_fds=(report_w, key_r, status_w), env=env,
                                start_new_session=True)
    finally:
        for fd in (report_w, key_r, out_w, status_w):
            os.close(fd)
    with _LIVE_LOCK:
        _LIVE.add(proc)
    if _STOPPING.is_set():  # started while kill_all() ran, which may not have seen it
        _kill_group(proc)
    reader.start()
    drain.start()
    try:
        timed_out = _watch(proc, reader, limits, started)
    finally:
        _kill_group(proc)
        proc.wait()
        with _LIVE_LOCK:
            _LIVE.discard(proc)
        leftovers = sweep(uid, token, grace=3.0)
        if group is not None:
            memory_hit = group.hit_memory_limit()
            cpu = group.cpu()
            leftovers += group.remove()
        reader.join(10)
        drain.join(10)
        if reader.is_alive() or drain.is_alive():  # something still holds a pipe open
            leftovers += sweep(uid, token)
            reader.join(5)
            drain.join(5)
    code = proc.returncode  # never None: proc.wait() returned
    os.set_blocking(status_r, False)
    try:
        status = os.read(status_r, 4096).decode("utf-8", "replace").strip()
    except BlockingIOError:  # nothing written, a copy still open somewhere: no failure
        status = ""
    finally:
        os.close(status_r)
    sandbox_error = status.splitlines()[-1] if status else None
    return Outcome(
        records=list(reader.records), stamps=list(reader.stamps), forged=reader.forged,
        violation=reader.violation, started=started,
        timed_out=timed_out, exit_code=code, output=drain.text(), output_bytes=drain.total,
        # killed, or the trampoline's 128 + signal
        signal=-code if code < 0 else code - 128 if code > 128 and code != 255 else None,
        seconds=time.monotonic() - started, leftovers=leftovers, sandbox_error=sandbox_error,
        run_memory=memory_hit, cpu=cpu)


def _watch(proc: subprocess.Popen, reader: "ReportReader", limits: Limits,
           started: float) -> str | None:
    """Wait for the run; "import", "run" or "exit" if a deadline passed first.  Woken by the
    run's exit (a thread blocked in ``wait``) and by the reader's records, never polling."""
    threading.Thread(target=lambda: (proc.wait(), reader.wake.set()), name="run-waiter",
                     daemon=True).start()
    while True:
        if proc.returncode is not None:
            return None
        if reader.flooded:
            return "flood"
        if reader.tampered:  # the row is decided: nothing the run does now can change it
            return "tampered"
        now = time.monotonic()
        deadlines = [(started + limits.wall, "run")]
        if not reader.imported.is_set():
            deadlines.append((started + limits.import_wall, "import"))
        if reader.ended_at is not None:
            deadlines.append((reader.ended_at + EXIT_GRACE, "exit"))
        when, what = min(deadlines)
        if now >= when:
            return what
        reader.wake.wait(when - now)
        reader.wake.clear()


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def kill_all() -> None:
    """Kill every run in progress, and any that starts from now on (the grader is being
    interrupted)."""
    _STOPPING.set()
    with _LIVE_LOCK:
        running = list(_LIVE)
    for proc in running:
        _kill_group(proc)
