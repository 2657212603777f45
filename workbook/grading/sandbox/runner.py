"""The grader's side of a sandboxed run: ``Stage`` it (never ``solutions/``), ``detect`` the
best isolation (proved by a probe run), ``run`` it through ``trampoline.py`` with the report on
its own pipe and the output drained to a bounded tail, then ``sweep`` whatever it left.

Isolation levels, best first: ``namespaces`` (root: a uid per run slot, own mount, PID and
network namespaces, the repository, home and /tmp hidden), ``uid`` (root without
namespaces: a uid per slot; refused unless that uid can neither read nor import the
solutions), ``none`` (not root: resource limits only).
"""
from __future__ import annotations

import fcntl
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


@dataclass(frozen=True)
class Isolation:
    mode: str  # "namespaces" | "uid" | "none"
    description: str

    @property
    def drops_privileges(self) -> bool:
        return self.mode != "none"


def _lock_dir() -> Path:
    writable = [d for d in ("/run/lock", "/var/lock")
                if os.path.isdir(d) and os.access(d, os.W_OK)]
    return Path(writable[0] if writable else tempfile.gettempdir())


class UidClaim:
    """Sandbox uids held by this process alone, machine-wide: one ``flock`` per uid.

    Two graders on one machine (a batch and a selftest, say) must never share a uid: each
    run kills whatever still runs as its uid, and RLIMIT_NPROC counts per uid.  The locks go
    when the process does, however it ends."""

    def __init__(self, count: int) -> None:
        self.uids: list[int] = []
        self._fds: list[int] = []
        for uid in range(UID_BASE, UID_BASE + UID_POOL):
            if len(self.uids) == count:
                break
            fd = os.open(_lock_dir() / f"workbook-sandbox-{uid}.lock",
                         os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uids.append(uid)
            self._fds.append(fd)
        if len(self.uids) < count:
            self.release()
            raise IsolationError(f"no {count} free sandbox uids in {UID_BASE}..."
                                 f"{UID_BASE + UID_POOL - 1}: other graders hold them")

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> "UidClaim":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass
class Outcome:
    """What one sandboxed run produced, before any judging."""
    records: list[protocol.Record]      # authenticated records, in order, up to a violation
    forged: int = 0                     # report lines that failed authentication
    violation: str | None = None        # first sequence problem in authenticated records
    timed_out: str | None = None        # "run" | "import" | None
    exit_code: int | None = None        # the run's exit code (for the reason text only)
    signal: int | None = None           # the signal that ended the run, if one did
    output: str = ""                    # tail of stdout+stderr
    output_bytes: int = 0
    seconds: float = 0.0
    leftovers: int = 0                  # processes still alive after the run (then killed)
    sandbox_error: str | None = None    # the trampoline itself failed


# -- staging --------------------------------------------------------------------------------

def staged_files(problems: list[manifest.Problem], root: Path = ROOT) -> list[Path]:
    """What judges ``problems``, relative to ``root``: the ``workbook`` package's modules,
    those problems' manifests and acceptance sets, and ``tests/``'s own modules.  Never
    ``solutions/``, ``mine/``, hints, the book or another problem's tests.  The one list
    both a graded run's stage and the Gradescope bundle are made of."""
    ids = {p.id for p in problems}
    package = root / "workbook"
    files = [q for q in package.rglob("*.py") if "__pycache__" not in q.parts]
    files += [package / "problems" / f"{pid}.toml" for pid in sorted(ids)]
    files += list((root / "tests").glob("*.py"))
    for p in problems:
        tests = root / p.tests_dir.relative_to(ROOT)
        files += [q for q in tests.rglob("*") if q.is_file() and "__pycache__" not in q.parts]
    return sorted({q.relative_to(root) for q in files})


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
    problem_id: str
    files: tuple[tuple[str, bytes], ...]
    bytecode: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def snapshot(cls, problem: manifest.Problem, root: Path = ROOT) -> "Harness":
        files = tuple((str(rel), (root / rel).read_bytes())
                      for rel in staged_files([problem], root))
        return cls(problem.id, files,
                   tuple(filter(None, (_bytecode(rel, data) for rel, data in files))))

    @property
    def fingerprint(self) -> str:
        """Changes whenever anything that judges this problem changes."""
        digest = hashlib.sha256()
        for rel, data in self.files:
            digest.update(rel.encode() + b"\0" + data + b"\0")
        return digest.hexdigest()[:16]


#: Staging directories are named ``workbook-grade-<grader pid>-<random>``.
STAGE_PREFIX = "workbook-grade-"


def remove_stale_stages() -> int:
    """Delete staging directories left by graders that no longer run (killed with SIGKILL,
    they could not clean up); return how many went."""
    removed = 0
    for path in Path(tempfile.gettempdir()).glob(STAGE_PREFIX + "*"):
        pid = path.name[len(STAGE_PREFIX):].split("-")[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)  # no error: its grader is alive
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
        except PermissionError:
            pass  # alive, someone else's
    return removed


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
        try:
            for rel, data in harness.files + harness.bytecode:
                target = self.dir / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            (self.dir / "pytest.ini").write_text("[pytest]\n", "utf-8")
            self.target = self.dir / "submission" / f"{module}.py"
            self.target.parent.mkdir()
            for rel, data in (helpers or {}).items():
                path = self.target.parent / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            self.target.write_bytes(source)
            self.work = self.dir / "work"
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
            self.cleanup()
            raise

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Stage":
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


# -- isolation ------------------------------------------------------------------------------

#: What the probe run tries; it prints one JSON line.  ``paths`` are files it must not read.
_PROBE = r"""
import json, os, sys
paths = json.loads(sys.argv[1])
readable = []
for p in paths:
    try:
        with open(p, "rb"):
            readable.append(p)
    except OSError:
        pass
sys.path.insert(0, json.loads(sys.argv[2]))
importable = []
for name in json.loads(sys.argv[3]):
    try:
        __import__("solutions." + name)
        importable.append(name)
    except Exception:
        pass
print(json.dumps({"uid": os.getuid(), "readable": readable, "importable": importable}))
"""


def _hide_list() -> list[tuple[str, str]]:
    """Directories made empty in the namespace view (mode of the covering tmpfs)."""
    hide = [(str(ROOT), "755")]
    home = Path.home().resolve()
    if home != Path("/") and home != ROOT:
        hide.append((str(home), "755"))
    for shared in ("/tmp", "/var/tmp", "/dev/shm", tempfile.gettempdir()):
        if os.path.isdir(shared) and os.path.realpath(shared) not in [h for h, _ in hide]:
            hide.append((os.path.realpath(shared), "1777"))
    extra = os.environ.get("WORKBOOK_SANDBOX_HIDE", "")
    hide += [(os.path.realpath(p), "755") for p in extra.split(os.pathsep) if os.path.isdir(p)]
    # Parents before children, so a child's tmpfs lands on top of its parent's.
    return sorted(dict(hide).items(), key=lambda item: item[0].count("/"))


_DETECTED: dict[str, Isolation] = {}
_DETECT_LOCK = threading.Lock()


def detect(forbidden: list[Path]) -> Isolation:
    """The best isolation this machine allows, verified by a probe run inside it.

    ``forbidden`` are files the sandboxed code must not read (the reference solutions).
    Raises ``IsolationError`` when running as root but the solutions would be reachable.
    """
    with _DETECT_LOCK:
        key = json.dumps(sorted(map(str, forbidden)))
        if key in _DETECTED:
            return _DETECTED[key]
        if os.geteuid() != 0:  # not root: nothing better is possible; the description says so
            _DETECTED[key] = Isolation("none", _DESCRIPTIONS["none"])
            return _DETECTED[key]
        wanted = os.environ.get("WORKBOOK_SANDBOX")  # force a level (for tests)
        problems = []
        for mode in [wanted] if wanted else ["namespaces", "uid"]:
            iso = Isolation(mode, _DESCRIPTIONS[mode])
            try:
                with UidClaim(1 if iso.drops_privileges else 0) as claim:
                    verdict = _probe(iso, forbidden, (claim.uids or [None])[0])
            except IsolationError as exc:
                verdict = str(exc)
            if verdict is None:
                _DETECTED[key] = iso
                return iso
            problems.append(f"{mode}: {verdict}")
        raise IsolationError("cannot isolate learner code: " + "; ".join(problems))


_DESCRIPTIONS = {
    "namespaces": "root: a uid per run slot, own mount/PID/network namespaces, "
                  "repository and home hidden",
    "uid": "root: a uid per run slot, without namespaces",
    "none": "not root: learner code runs as you (resource limits only; it could read "
            "solutions/ by path)",
}


def _probe(iso: Isolation, forbidden: list[Path], uid: int | None) -> str | None:
    """None if a run at this level works and reads no forbidden file; else why not."""
    with tempfile.TemporaryDirectory(prefix="workbook-probe-") as tmp:
        stage_dir = Path(tmp).resolve()
        work = stage_dir / "work"
        work.mkdir()
        if uid is not None:
            os.chown(stage_dir, 0, uid)
            os.chmod(stage_dir, 0o750)
            os.chown(work, uid, uid)
        paths = [str(p) for p in forbidden]
        modules = [p.stem for p in forbidden if p.parent.name == "solutions"]
        argv = [sys.executable, "-I", "-S", "-c", _PROBE, json.dumps(paths),
                json.dumps(str(ROOT)), json.dumps(modules)]
        config = _config(iso, uid, stage_dir, work, Limits.for_wall(30), argv)
        try:
            out = subprocess.run(_trampoline_argv(config), capture_output=True, timeout=60,
                                 env=_base_env(work), start_new_session=True)
        except subprocess.TimeoutExpired:
            return "the probe did not finish"
        finally:
            sweep(uid)
        if out.returncode != 0:
            text = (out.stderr or out.stdout).decode("utf-8", "replace").strip()
            return text.splitlines()[-1] if text else f"exit code {out.returncode}"
        try:
            found = json.loads(out.stdout.decode().strip().splitlines()[-1])
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

def _base_env(work: Path) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work),
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "MALLOC_ARENA_MAX": "2", "COLUMNS": "120",
    }
    if "WORKBOOK_BOUND" in os.environ:  # the acceptance sets' own knob
        env["WORKBOOK_BOUND"] = os.environ["WORKBOOK_BOUND"]
    return env


def _config(iso: Isolation, uid: int | None, stage_dir: Path, work: Path, limits: Limits,
            argv: list[str]) -> dict:
    nproc = limits.processes
    if uid is None:  # RLIMIT_NPROC counts every process of the user: leave room for theirs
        nproc += _tasks_of(os.getuid())
    return {
        "mode": iso.mode, "uid": uid, "gid": uid, "work": str(work),
        "work_size": limits.work_size,
        "hide": _hide_list() if iso.mode == "namespaces" else [],
        "expose": sorted({os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix),
                          str(stage_dir)}) if iso.mode == "namespaces" else [],
        "limits": {"cpu": [limits.cpu, limits.cpu + 5], "memory": limits.memory,
                   "processes": nproc, "file_size": limits.file_size,
                   "open_files": limits.open_files},
        "argv": argv,
    }


def _trampoline_argv(config: dict) -> list[str]:
    return [sys.executable, "-I", "-S", "-B", str(TRAMPOLINE), json.dumps(config)]


#: pytest started inside the sandbox: the stage first on sys.path, nothing from the grader's.
_LAUNCH = ("import sys; root = sys.argv.pop(1); sys.path.insert(0, root); "
           "sys.path.append(root + '/submission'); import pytest; "
           "raise SystemExit(pytest.main(sys.argv[1:]))")

_LIVE: set[subprocess.Popen] = set()  # runs in progress, for kill_all()
_LIVE_LOCK = threading.Lock()


def run(stage: Stage, pytest_args: list[str], limits: Limits, *, iso: Isolation,
        uid: int | None) -> Outcome:
    """Run pytest with ``pytest_args`` on ``stage`` inside the sandbox, as ``uid`` (claimed
    with ``UidClaim``; None when not root); never raises for anything the learner code
    does."""
    started = time.monotonic()
    key = secrets.token_bytes(32)
    report_r, report_w = os.pipe()
    key_r, key_w = os.pipe()
    out_r, out_w = os.pipe()
    os.write(key_w, key)
    os.close(key_w)
    argv = [sys.executable, "-I", "-B", "-c", _LAUNCH, str(stage.dir), *pytest_args]
    env = {**_base_env(stage.work), "WORKBOOK_REPORT_FD": str(report_w),
           "WORKBOOK_KEY_FD": str(key_r)}
    config = _config(iso, uid, stage.dir, stage.work, limits, argv)
    token = secrets.token_hex(12)  # marks every process of this run (found by sweep)
    env["WORKBOOK_SANDBOX_RUN"] = token
    sweep(uid)  # a grader killed earlier may have left this uid busy
    reader = ReportReader(report_r, key)
    drain = OutputDrain(out_r)
    try:
        proc = subprocess.Popen(_trampoline_argv(config), stdin=subprocess.DEVNULL,
                                stdout=out_w, stderr=out_w, pass_fds=(report_w, key_r),
                                env=env, start_new_session=True)
    finally:
        for fd in (report_w, key_r, out_w):
            os.close(fd)
    with _LIVE_LOCK:
        _LIVE.add(proc)
    reader.start()
    drain.start()
    outcome = Outcome(records=[])
    try:
        outcome.timed_out = _watch(proc, reader, limits, started)
    finally:
        _kill_group(proc)
        proc.wait()
        with _LIVE_LOCK:
            _LIVE.discard(proc)
        outcome.leftovers = sweep(uid, token, grace=3.0)
        reader.join(10)
        drain.join(10)
        if reader.is_alive() or drain.is_alive():  # something still holds a pipe open
            outcome.leftovers += sweep(uid, token)
            reader.join(5)
            drain.join(5)
    code = outcome.exit_code = proc.returncode  # never None: proc.wait() returned
    if code < 0 or (code > 128 and code != 255):  # killed, or the trampoline's 128 + signal
        outcome.signal = -code if code < 0 else code - 128
    if code == 125 and not reader.records:
        # The trampoline failed before pytest started (a learner's own exit code 125 comes
        # after the authenticated "start" record, so it cannot pose as this).
        lines = [ln for ln in drain.text().splitlines() if ln.startswith("workbook sandbox:")]
        outcome.sandbox_error = lines[-1] if lines else "the sandbox could not start the run"
    outcome.records = list(reader.records)
    outcome.forged = reader.forged
    outcome.violation = reader.violation
    outcome.output = drain.text()
    outcome.output_bytes = drain.total
    outcome.seconds = time.monotonic() - started
    return outcome


#: Seconds a run may take to exit after reporting its end (then it is stopped: a stray
#: non-daemon thread must not cost the whole wall-clock limit).
EXIT_GRACE = 5.0


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
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all() -> None:
    """Kill every run in progress (the grader is being interrupted)."""
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


def _processes(uid: int) -> dict[int, str]:
    """``pid -> state letter`` of every process whose real uid is ``uid``."""
    found = {}
    for pid, status in _each_process("status"):
        fields = dict(line.split(":", 1) for line in status.decode("utf-8", "replace")
                      .splitlines() if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            found[pid] = fields.get("State", "?").split()[0]
    return found


def processes_of(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid``."""
    return [pid for pid, state in _processes(uid).items() if state not in ("Z", "X")]


def _tasks_of(uid: int) -> int:
    """Processes and threads of ``uid`` (what RLIMIT_NPROC counts)."""
    count = 0
    for pid in _processes(uid):
        try:
            count += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return count


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
        find = lambda: processes_of(uid)  # noqa: E731
    elif token:
        find = lambda: processes_marked(token)  # noqa: E731
    else:
        return 0
    found = find()
    settle = time.monotonic() + grace
    while found and time.monotonic() < settle:
        time.sleep(0.02)
        found = find()
    seen = set(found)
    deadline = time.monotonic() + 10
    while found and time.monotonic() < deadline:
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
        found = find()
        seen |= set(found)
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
        self._next = 0

    def run(self) -> None:
        pending = b""
        skipping = False
        try:
            while True:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    break
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    if skipping:  # the tail of an over-long line
                        skipping = False
                        self.forged += 1
                        continue
                    self.feed(line)
                if len(pending) > LINE_MAX:
                    pending, skipping = b"", True
            if pending and not skipping:
                self.feed(pending)
        finally:
            os.close(self.fd)

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
        if seq != self._next:
            self.violation = f"report record {seq} arrived where {self._next} was due"
            return
        self._next += 1
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
        try:
            while True:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    break
                self.total += len(chunk)
                self.tail += chunk
                del self.tail[:-OUTPUT_TAIL]
        finally:
            os.close(self.fd)

    def text(self) -> str:
        return bytes(self.tail).decode("utf-8", "replace")


