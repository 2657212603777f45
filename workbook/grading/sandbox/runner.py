"""The grader's side of a sandboxed run: ``Stage`` it (never ``solutions/``), ``detect`` the
best isolation (proved by a probe run), ``run`` it through ``trampoline.py`` with the report on
its own pipe and the output drained to a bounded tail, then ``sweep`` whatever it left.

Isolation levels, best first: ``namespaces`` (root: a uid per run slot, own mount, PID and
network namespaces, the repository, home and /tmp hidden), ``uid`` (root without
namespaces: a uid per slot; refused unless that uid can neither read nor import the
solutions), ``none`` (not root: resource limits only).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import json
import marshal
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from workbook import ROOT, manifest
from workbook.grading import protocol

#: Sandbox uids are claimed from UID_BASE .. UID_BASE + UID_POOL - 1 (override the base with
#: WORKBOOK_SANDBOX_UID); the gid equals the uid.  A claim is exclusive machine-wide.
UID_BASE = int(os.environ.get("WORKBOOK_SANDBOX_UID", "62000"))
UID_POOL = 64
MiB = 1 << 20
TRAMPOLINE = Path(__file__).resolve().with_name("trampoline.py")

#: How much of a run's output (stdout and stderr together) the grader keeps: the last bytes.
OUTPUT_TAIL = 8192
#: Longest report line the reader buffers; longer junk is skipped without being stored.
LINE_MAX = 65536
#: Seconds a run may take to exit after reporting its end (then it is stopped: a stray
#: non-daemon thread must not cost the whole wall-clock limit).
EXIT_GRACE = 5.0
#: Staging directories are named ``workbook-grade-<grader pid>-<random>``.
STAGE_PREFIX = "workbook-grade-"


class IsolationError(RuntimeError):
    """The sandbox cannot keep learner code away from what it must not see."""


@dataclass(frozen=True)
class Limits:
    wall: float                # seconds for the whole run (then the process tree is killed)
    import_wall: float         # seconds until the learner file has been imported
    cpu: int                   # RLIMIT_CPU, seconds (SIGXCPU at the soft limit)
    memory: int = 3072 * MiB   # RLIMIT_AS, bytes
    processes: int = 256       # RLIMIT_NPROC: processes *and threads* of the sandbox uid
    file_size: int = 64 * MiB  # RLIMIT_FSIZE, bytes
    open_files: int = 512      # RLIMIT_NOFILE
    work_size: str = "64m"     # the private writable directory (namespaces only)

    @classmethod
    def for_wall(cls, wall: float, import_wall: float = 30.0) -> "Limits":
        return cls(wall=wall, import_wall=min(import_wall, wall), cpu=int(wall) + 10)


class UidClaim(contextlib.ExitStack):
    """Sandbox uids held by this process alone, machine-wide: one ``flock`` per uid.

    Two graders on one machine (a batch and a selftest, say) must never share a uid: each
    run kills whatever still runs as its uid, and RLIMIT_NPROC counts per uid.  The locks go
    when the process does, however it ends."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.uids: list[int] = []
        locks = next((d for d in ("/run/lock", "/var/lock")
                      if os.path.isdir(d) and os.access(d, os.W_OK)), tempfile.gettempdir())
        for uid in range(UID_BASE, UID_BASE + UID_POOL):
            if len(self.uids) == count:
                break
            fd = os.open(f"{locks}/workbook-sandbox-{uid}.lock",
                         os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.callback(os.close, fd)
            self.uids.append(uid)
        if len(self.uids) < count:
            self.close()
            raise IsolationError(f"no {count} free sandbox uids in {UID_BASE}..."
                                 f"{UID_BASE + UID_POOL - 1}: other graders hold them")

    release = contextlib.ExitStack.close


@dataclass
class Outcome:
    """What one sandboxed run produced, before any judging."""
    records: list[protocol.Record]      # authenticated records, in order, up to a violation
    forged: int = 0                     # report lines that failed authentication
    violation: str | None = None        # first sequence problem in authenticated records
    timed_out: str | None = None        # "run" | "import" | "exit" | None
    exit_code: int | None = None        # the run's exit code (for the reason text only)
    signal: int | None = None           # the signal that ended the run, if one did
    output: str = ""                    # tail of stdout+stderr
    output_bytes: int = 0
    seconds: float = 0.0
    leftovers: int = 0                  # processes still alive after the run (then killed)
    sandbox_error: str | None = None    # the trampoline itself failed


# -- staging --------------------------------------------------------------------------------

def staged_files(problems: list[manifest.Problem]) -> list[Path]:
    """What judges ``problems``, relative to ``ROOT``: the ``workbook`` package's modules,
    those problems' manifests and acceptance sets, and ``tests/``'s own modules.  Never
    ``solutions/``, ``mine/``, hints, the book or another problem's tests.  The one list
    both a graded run's stage and the Gradescope bundle are made of."""
    package = ROOT / "workbook"
    files = [q for q in package.rglob("*.py") if "__pycache__" not in q.parts]
    files += [package / "problems" / f"{p.id}.toml" for p in problems]
    files += list((ROOT / "tests").glob("*.py"))
    for p in problems:
        files += [q for q in p.tests_dir.rglob("*")
                  if q.is_file() and "__pycache__" not in q.parts]
    return sorted({q.relative_to(ROOT) for q in files})


def _bytecode(rel: str, source: bytes) -> tuple[str, bytes] | None:
    """``rel``'s compiled form as a checked-hash ``.pyc`` (PEP 552: valid whatever the staged
    file's mtime, and only while its bytes are the ones compiled), so that no run compiles
    the harness again.  None for files pytest rewrites itself (tests, conftest)."""
    name = Path(rel).name
    if not name.endswith(".py") or name.startswith("test_") or name == "conftest.py":
        return None
    try:
        code = compile(source, rel, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    header = importlib.util.MAGIC_NUMBER + (0b11).to_bytes(4, "little")
    return (importlib.util.cache_from_source(rel),
            header + importlib.util.source_hash(source) + marshal.dumps(code))


@dataclass(frozen=True)
class Harness:
    """The files that judge one problem, read once: every run of a batch uses the same bytes,
    even if someone edits the repository meanwhile (and their bytecode, compiled once)."""
    files: tuple[tuple[str, bytes], ...]
    bytecode: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def snapshot(cls, problem: manifest.Problem) -> "Harness":
        files = tuple((str(rel), (ROOT / rel).read_bytes()) for rel in staged_files([problem]))
        return cls(files, tuple(filter(None, (_bytecode(rel, data) for rel, data in files))))

    @property
    def fingerprint(self) -> str:
        """Changes whenever anything that judges this problem changes."""
        digest = hashlib.sha256()
        for rel, data in self.files:
            digest.update(rel.encode() + b"\0" + data + b"\0")
        return digest.hexdigest()[:16]


def remove_stale_stages() -> None:
    """Delete staging directories left by graders that no longer run (killed with SIGKILL,
    they could not clean up)."""
    for path in Path(tempfile.gettempdir()).glob(STAGE_PREFIX + "*"):
        pid = path.name[len(STAGE_PREFIX):].split("-")[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)  # no error: its grader is alive (this one, say)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass  # alive, someone else's


class Stage:
    """A temporary directory holding the harness, one problem's tests and one submission:
    the learner file as ``submission/<module>.py`` and its helper modules beside it (the
    end of the run's ``sys.path``, so they never shadow the harness or the stdlib).

    ``solutions/`` is never copied.  Everything is owned by the grader and read-only to the
    run; ``work/`` is the run's only writable place (its cwd, HOME and TMPDIR).
    """

    def __init__(self, harness: Harness, module: str, source: bytes, uid: int | None,
                 helpers: dict[str, bytes] | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-")).resolve()
        self.target = self.dir / "submission" / f"{module}.py"
        self.work = self.dir / "work"
        files = {**dict(harness.files + harness.bytecode), "pytest.ini": b"[pytest]\n",
                 **{f"submission/{rel}": data for rel, data in (helpers or {}).items()},
                 f"submission/{module}.py": source}
        try:
            for rel, data in files.items():
                path = self.dir / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            self.work.mkdir()
            for path in self.dir.rglob("*"):
                os.chmod(path, 0o755 if path.is_dir() else 0o644)
            if uid is not None:
                # Only this run's uid may enter: another submission graded at the same time
                # cannot read this one.
                os.chown(self.dir, 0, uid)
                os.chmod(self.dir, 0o750)
                os.chown(self.work, uid, uid)
                os.chmod(self.work, 0o700)
            else:
                os.chmod(self.dir, 0o700)
        except BaseException:
            self.__exit__()
            raise

    def __enter__(self) -> "Stage":
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


# -- isolation ------------------------------------------------------------------------------

#: What the probe run tries; it prints one JSON line.  ``paths`` are files it must not read.
_PROBE = r"""
import json, os, sys
paths, root, names = map(json.loads, sys.argv[1:])
sys.path.insert(0, root)
def works(action):
    try:
        action()
        return True
    except Exception:
        return False
print(json.dumps({"uid": os.getuid(),
                  "readable": [p for p in paths if works(lambda: open(p, "rb").close())],
                  "importable": [n for n in names if works(lambda: __import__("solutions." + n))]}))
"""


def _hide_list() -> list[tuple[str, str]]:
    """Directories made empty in the namespace view (mode of the covering tmpfs)."""
    hide = {str(ROOT): "755"}
    home = Path.home().resolve()
    if home != Path("/"):
        hide.setdefault(str(home), "755")
    for shared in ("/tmp", "/var/tmp", "/dev/shm", tempfile.gettempdir()):
        if os.path.isdir(shared):
            hide.setdefault(os.path.realpath(shared), "1777")
    extra = os.environ.get("WORKBOOK_SANDBOX_HIDE", "")
    hide.update((os.path.realpath(p), "755") for p in extra.split(os.pathsep) if os.path.isdir(p))
    # Parents before children, so a child's tmpfs lands on top of its parent's.
    return sorted(hide.items(), key=lambda item: item[0].count("/"))


def detect(forbidden: list[Path]) -> str:
    """The best isolation this machine allows (``namespaces``, ``uid`` or ``none``), verified
    by a probe run inside it.

    ``forbidden`` are files the sandboxed code must not read (the reference solutions).
    Raises ``IsolationError`` when running as root but the solutions would be reachable.
    """
    if os.geteuid() != 0:  # not root: nothing better is possible (the grader warns)
        return "none"
    wanted = os.environ.get("WORKBOOK_SANDBOX")  # force a level (for tests)
    problems = []
    for mode in [wanted] if wanted else ["namespaces", "uid"]:
        try:
            with UidClaim(0 if mode == "none" else 1) as claim:
                verdict = _probe(mode, forbidden, (claim.uids or [None])[0])
        except IsolationError as exc:
            verdict = str(exc)
        if verdict is None:
            return mode
        problems.append(f"{mode}: {verdict}")
    raise IsolationError("cannot isolate learner code: " + "; ".join(problems))


def _probe(mode: str, forbidden: list[Path], uid: int | None) -> str | None:
    """None if a run at this level works and reads no forbidden file; else why not."""
    modules = [p.stem for p in forbidden if p.parent.name == "solutions"]
    argv = [sys.executable, "-I", "-S", "-c", _PROBE, json.dumps([str(p) for p in forbidden]),
            json.dumps(str(ROOT)), json.dumps(modules)]
    with Stage(Harness(()), "probe", b"", uid) as stage:
        out = run(stage, argv, Limits.for_wall(30), iso=mode, uid=uid)
    if out.timed_out:
        return "the probe did not finish"
    lines = out.output.strip().splitlines()
    if out.exit_code != 0:
        return lines[-1] if lines else f"exit code {out.exit_code}"
    try:
        found = json.loads(lines[-1])
    except (ValueError, IndexError):
        return "the probe printed nothing useful"
    if uid is not None and found["uid"] != uid:
        return f"ran as uid {found['uid']}, not {uid}"
    if found["readable"]:
        return (f"the sandbox user can read {found['readable'][0]} "
                "(chmod -R o-rwx solutions/, or give it namespaces)")
    if found["importable"]:
        return f"the sandbox user can import solutions.{found['importable'][0]}"
    return None


# -- running --------------------------------------------------------------------------------

def _sandboxed(mode: str, uid: int | None, stage: Stage, limits: Limits,
                argv: list[str]) -> list[str]:
    """The command that runs ``argv`` on ``stage`` inside the sandbox."""
    nproc = limits.processes
    if uid is None:  # RLIMIT_NPROC counts every process of the user: leave room for theirs
        nproc += sum(int(status.get("Threads", "1")) for _, status in _statuses(os.getuid()))
    namespaces = mode == "namespaces"
    config = {
        "mode": mode, "uid": uid, "gid": uid, "work": str(stage.work),
        "work_size": limits.work_size,
        "hide": _hide_list() if namespaces else [],
        "expose": sorted({os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix),
                          str(stage.dir)}) if namespaces else [],
        "limits": {"RLIMIT_CPU": [limits.cpu, limits.cpu + 5], "RLIMIT_AS": [limits.memory] * 2,
                   "RLIMIT_NPROC": [nproc] * 2, "RLIMIT_FSIZE": [limits.file_size] * 2,
                   "RLIMIT_NOFILE": [limits.open_files] * 2, "RLIMIT_CORE": [0, 0]},
        "argv": argv,
    }
    return [sys.executable, "-I", "-S", "-B", str(TRAMPOLINE), json.dumps(config)]


_LIVE: set[subprocess.Popen] = set()  # runs in progress, for kill_all()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()  # kill_all() was called: a run that starts after it dies at once


def run(stage: Stage, argv: list[str], limits: Limits, *, iso: str, uid: int | None) -> Outcome:
    """Run ``argv`` (pytest, or the probe) on ``stage`` inside the sandbox (``iso``: what
    ``detect`` found), as ``uid`` (claimed with ``UidClaim``; None when not root); never
    raises for anything the learner code does."""
    started = time.monotonic()
    key = secrets.token_bytes(32)
    token = secrets.token_hex(12)  # marks every process of this run (found by sweep)
    report_r, report_w = os.pipe()
    key_r, key_w = os.pipe()
    out_r, out_w = os.pipe()
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
    sweep(uid)  # a grader killed earlier may have left this uid busy
    reader = ReportReader(report_r, key)
    drain = OutputDrain(out_r)
    try:
        proc = subprocess.Popen(_sandboxed(iso, uid, stage, limits, argv),
                                stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                                pass_fds=(report_w, key_r), env=env, start_new_session=True)
    finally:
        for fd in (report_w, key_r, out_w):
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
        reader.join(10)
        drain.join(10)
        if reader.is_alive() or drain.is_alive():  # something still holds a pipe open
            leftovers += sweep(uid, token)
            reader.join(5)
            drain.join(5)
    code = proc.returncode  # never None: proc.wait() returned
    sandbox_error = None
    if code == 125 and not reader.records:
        # The trampoline failed before pytest started (a learner's own exit code 125 comes
        # after the authenticated "start" record, so it cannot pose as this).
        lines = [ln for ln in drain.text().splitlines() if ln.startswith("workbook sandbox:")]
        sandbox_error = lines[-1] if lines else "the sandbox could not start the run"
    return Outcome(
        records=list(reader.records), forged=reader.forged, violation=reader.violation,
        timed_out=timed_out, exit_code=code, output=drain.text(), output_bytes=drain.total,
        # killed, or the trampoline's 128 + signal
        signal=-code if code < 0 else code - 128 if code > 128 and code != 255 else None,
        seconds=time.monotonic() - started, leftovers=leftovers, sandbox_error=sandbox_error)


def _watch(proc: subprocess.Popen, reader: "ReportReader", limits: Limits,
           started: float) -> str | None:
    """Wait for the run; "import", "run" or "exit" if a deadline passed first.  Woken by the
    run's exit (a thread blocked in ``wait``) and by the reader's records, never polling."""
    threading.Thread(target=lambda: (proc.wait(), reader.wake.set()), name="run-waiter",
                     daemon=True).start()
    while True:
        if proc.returncode is not None:
            return None
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


# -- leftovers ------------------------------------------------------------------------------

def _each_process(name: str):
    """``(pid, bytes of /proc/PID/<name>)`` for every other process that can be read."""
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    yield int(pid), f.read()
            except OSError:
                continue


def _statuses(uid: int):
    """``(pid, fields of /proc/PID/status)`` of every process whose real uid is ``uid``."""
    for pid, status in _each_process("status"):
        fields = dict(line.split(":", 1) for line in status.decode("utf-8", "replace")
                      .splitlines() if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            yield pid, fields


def processes_of(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid``."""
    return [pid for pid, fields in _statuses(uid)
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


# -- reading the run ------------------------------------------------------------------------

class ReportReader(threading.Thread):
    """Reads report lines from the pipe and keeps the authenticated records, in order."""

    def __init__(self, fd: int, key: bytes) -> None:
        super().__init__(name="report-reader", daemon=True)
        self.fd, self.key = fd, key
        self.records: list[protocol.Record] = []
        self.forged = 0
        self.violation: str | None = None
        self.imported = threading.Event()  # the learner file has been imported (or failed)
        self.ended_at: float | None = None  # when the run reported its end
        self.wake = threading.Event()      # set on either of those (and by the run's exit)

    def run(self) -> None:
        with open(self.fd, "rb") as pipe:
            overlong = False
            for line in iter(functools.partial(pipe.readline, LINE_MAX), b""):
                if not overlong:  # the rest of an over-long line is read, never stored
                    self.feed(line)
                overlong = not line.endswith(b"\n")

    def feed(self, line: bytes) -> None:
        if not line.strip():
            return
        decoded = protocol.decode(self.key, line)
        if decoded is None:
            self.forged += 1
            return
        seq, record = decoded
        if self.violation:
            return
        if seq != len(self.records):
            self.violation = f"report record {seq} arrived where {len(self.records)} was due"
            return
        self.records.append(record)
        if isinstance(record, (protocol.Collected, protocol.ImportFailed)):
            self.imported.set()
            self.wake.set()
        elif isinstance(record, protocol.End):
            self.ended_at = time.monotonic()
            self.wake.set()


class OutputDrain(threading.Thread):
    """Reads the run's stdout/stderr to the end, keeping only the last ``OUTPUT_TAIL`` bytes."""

    def __init__(self, fd: int) -> None:
        super().__init__(name="output-drain", daemon=True)
        self.fd = fd
        self.tail = bytearray()
        self.total = 0

    def run(self) -> None:
        with open(self.fd, "rb", buffering=0) as pipe:
            for chunk in iter(functools.partial(pipe.read, 1 << 16), b""):
                self.total += len(chunk)
                self.tail += chunk
                del self.tail[:-OUTPUT_TAIL]

    def text(self) -> str:
        return bytes(self.tail).decode("utf-8", "replace")
