"""The grader's side of a sandboxed run: ``Stage`` it (never ``solutions/``), ``detect`` the
best isolation (proved by a probe run), ``run`` it through ``trampoline.py`` with the report on
its own pipe and the output drained to a bounded tail, then ``sweep`` whatever it left.

Isolation levels, best first: ``bwrap`` (root with bubblewrap installed: a uid per run slot,
then bubblewrap's new user, mount, PID, IPC, UTS, network and cgroup namespaces around a root
made only of read-only binds of the interpreter, its packages and the stage, with private
tmpfs ``/tmp`` and working directory), ``namespaces`` (root: a uid per run slot, own mount,
PID and network namespaces, the repository, home and /tmp hidden), ``uid`` (root without
namespaces: a uid per slot; refused unless that uid can neither read nor import the
solutions), ``none`` (not root: resource limits only).  As root, every level also puts the
run in a cgroup of its own (memory and process count for the whole run) where the host
allows it.
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
import stat
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
#: Where the trampoline is in bubblewrap's view of the run.
INNER_TRAMPOLINE = "/.workbook-trampoline.py"
#: The stage's folder of the few ``/etc`` files a run sees under bubblewrap.
ETC = "sandbox-etc"
_ETC = {"hosts": b"127.0.0.1 localhost\n::1 localhost ip6-localhost\n",
        "nsswitch.conf": b"passwd: files\ngroup: files\nhosts: files\n",
        "passwd": b"root:x:0:0::/:/usr/sbin/nologin\nlearner:x:%d:%d::/tmp:/usr/sbin/nologin\n"
                  % ((UID_BASE,) * 2),
        "group": b"root:x:0:\nlearner:x:%d:\n" % UID_BASE}


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
    run_memory: int = 1024 * MiB  # memory of the whole run (its cgroup), all processes

    @classmethod
    def for_wall(cls, wall: float, import_wall: float = 30.0) -> "Limits":
        return cls(wall=wall, import_wall=min(import_wall, wall), cpu=int(wall) + 10)


#: Where the uid locks live: a folder of root's alone (0700), so no one else can put a
#: directory, a link or a held lock at a uid's path.  The first of these that is, or can be
#: made, such a folder is used.
LOCK_FOLDERS = ("/run/workbook-sandbox", "/var/lib/workbook-sandbox")


def lock_folder() -> str:
    """The uid locks' folder, owned by this user and closed to everyone else."""
    problems = []
    for folder in LOCK_FOLDERS:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            info = os.lstat(folder)
        except OSError as exc:
            problems.append(f"{folder}: {exc.strerror}")
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() \
                and not info.st_mode & 0o077:
            return folder
        problems.append(f"{folder} is not a folder of this user's alone (mode 0700)")
    raise IsolationError("no folder for the sandbox uid locks: " + "; ".join(problems))


def _legacy_lock(uid: int) -> int | None | bool:
    """The lock older graders took for ``uid`` (in the shared /run/lock), taken too so that
    they and this one never share a uid: its descriptor, False if another holds it, None
    if there is none to take (no such folder, or something else at the path)."""
    try:
        fd = os.open(f"/run/lock/workbook-sandbox-{uid}.lock",
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    except OSError:
        os.close(fd)
        return None
    return fd


class UidClaim(contextlib.ExitStack):
    """Sandbox uids held by this process alone, machine-wide: one ``flock`` per uid.

    Two graders on one machine (a batch and a selftest, say) must never share a uid: each
    run kills whatever still runs as its uid, and RLIMIT_NPROC counts per uid.  The locks go
    when the process does, however it ends."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.uids: list[int] = []
        locks = lock_folder() if count else None
        for uid in range(UID_BASE, UID_BASE + UID_POOL):
            if len(self.uids) == count:
                break
            try:
                fd = os.open(f"{locks}/{uid}.lock",
                             os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except OSError:  # something else sits at that path: not this uid
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            legacy = _legacy_lock(uid)
            if legacy is False:  # a grader of an older version holds this uid
                os.close(fd)
                continue
            self.callback(os.close, fd)
            if legacy is not None:
                self.callback(os.close, legacy)
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
    run_memory: bool = False            # the run's cgroup hit its memory limit


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
                 **{f"{ETC}/{name}": data for name, data in _ETC.items()},
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
    modes = (["bwrap"] if shutil.which("bwrap") else []) + ["namespaces", "uid"]
    for mode in [wanted] if wanted else modes:
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
    if out.sandbox_error and "Permission denied" in out.sandbox_error and uid is not None \
            and mode != "bwrap":
        return (f"{out.sandbox_error}: the sandbox uid cannot run {sys.executable} (a Python "
                "under a private home such as /root?). Install bubblewrap (it binds the "
                "interpreter in as root), or grade with a Python every user can run "
                "(WORKBOOK_PYTHON=/usr/bin/python3 ./check.sh grade …, or one under /opt)")
    if out.exit_code != 0:
        return out.sandbox_error or (lines[-1] if lines else f"exit code {out.exit_code}")
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

def bwrap_argv(stage: Stage, limits: Limits) -> list[str]:
    """bubblewrap around a run: a root made only of read-only binds of the system's shared
    libraries (``/usr``), the interpreter and its packages, the stage and the trampoline;
    private tmpfs ``/tmp`` and working directory; a minimal ``/etc``; new mount, PID, IPC,
    UTS, network and cgroup namespaces.  bubblewrap runs as root (it can bind a pyenv Python
    under a 0700 ``/root``); inside, the trampoline drops to the run's own uid.  No user
    namespace: it would map the run to root outside, where the real uid is the boundary."""
    size = str(_bytes(limits.work_size))
    args = [shutil.which("bwrap") or "/usr/bin/bwrap", "--unshare-ipc", "--unshare-pid",
            "--unshare-net", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
            "--new-session", "--hostname", "sandbox", "--ro-bind", "/usr", "/usr",
            "--size", size, "--tmpfs", "/tmp"]  # first: the stage or a venv may be under /tmp
    view = allowed_view()
    for link, target in view["symlinks"]:
        args += ["--symlink", target, link]
    made: set[str] = set()

    def parents(path: str) -> list[str]:
        """Its missing parent folders, made 0755 (bubblewrap would make them 0700)."""
        out = []
        for parent in reversed(Path(path).parents[:-1] if len(Path(path).parents) > 1 else []):
            if str(parent) not in made and str(parent) not in ("/usr", "/tmp") \
                    and not str(parent).startswith("/usr/"):
                made.add(str(parent))
                out += ["--perms", "0755", "--dir", str(parent)]
        return out

    for path in view["binds"]:
        if path != "/usr":
            args += parents(path) + ["--ro-bind", path, path]
    args += [*parents(str(stage.dir)), "--ro-bind", str(stage.dir), str(stage.dir), "--size", size,
             "--tmpfs", str(stage.work), "--proc", "/proc", "--dev", "/dev",
             "--ro-bind", str(TRAMPOLINE), INNER_TRAMPOLINE]
    for name in _ETC:
        args += ["--ro-bind", str(stage.dir / ETC / name), f"/etc/{name}"]
    return args + ["--chdir", "/", "--"]


def allowed_view() -> dict[str, list]:
    """What a run's root is made of, in both namespace modes: read-only binds of the
    system's shared libraries and programs (``/usr`` and the top-level links into it), the
    interpreter and its installed packages, nothing else of the machine."""
    binds, links = ["/usr"], []
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            links.append([top, os.readlink(top)])
        elif os.path.isdir(top):
            binds.append(top)
    python = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    python |= {sys.prefix, sys.base_prefix, os.path.dirname(sys.executable)}
    for path in sorted(python, key=lambda p: (p.count("/"), p)):
        if not path.startswith("/usr/") and os.path.isdir(path) and path not in binds:
            binds.append(path)
    return {"binds": binds, "symlinks": links}


def _bytes(size: str) -> int:
    units = {"k": 1 << 10, "m": MiB, "g": 1 << 30}
    return int(size[:-1]) * units[size[-1].lower()] if size[-1].isalpha() else int(size)


class RunGroup:
    """A cgroup for one run, made by the grader where the host lets it (v2, or v1's
    ``memory`` and ``pids`` controllers): memory and process count for the whole run, every
    process and thread of it together (the rlimits stay, per process, as the floor).
    ``dirs`` is empty where no cgroup could be made."""

    def __init__(self, name: str, limits: Limits) -> None:
        self.dirs: list[Path] = []
        if os.geteuid() != 0:
            return
        for base, settings in _cgroup_bases(limits):
            path = base / name
            try:
                path.mkdir()
            except OSError:
                continue
            self.dirs.append(path)
            for setting, value in settings:
                with contextlib.suppress(OSError):
                    (path / setting).write_text(str(value))

    def processes(self) -> set[int]:
        found = set()
        for path in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found.update(map(int, (path / "cgroup.procs").read_text().split()))
        return found

    def hit_memory_limit(self) -> bool:
        for path in self.dirs:
            for name in ("memory.failcnt", "memory.memsw.failcnt", "memory.oom_control",
                         "memory.events"):
                with contextlib.suppress(OSError, ValueError):
                    text = (path / name).read_text()
                    if name.endswith("failcnt") and int(text) > 0:
                        return True
                    if any(line.split()[0] in ("oom_kill", "max") and int(line.split()[1])
                           for line in text.splitlines() if len(line.split()) == 2):
                        return True
        return False

    def remove(self, grace: float = 3.0) -> int:
        """Kill what is still in it, then remove it; how many processes were left.
        ``grace``: seconds for processes already on their way out (bubblewrap's init and
        what its PID namespace held die once the run's process group is killed) to go."""
        settle = time.monotonic() + grace
        while self.processes() and time.monotonic() < settle:
            time.sleep(0.02)
        left = self.processes()
        deadline = time.monotonic() + 10
        while self.processes() and time.monotonic() < deadline:
            for pid in self.processes():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        for path in self.dirs:
            with contextlib.suppress(OSError):
                path.rmdir()
        return len(left)


@functools.lru_cache(maxsize=None)
def _cgroup_roots() -> tuple[tuple[str, Path], ...]:
    """``(kind, directory)`` of this process's own cgroups that can have children: the v2
    one, or v1's memory and pids ones."""
    roots = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return ()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            roots.append(("v2", Path("/sys/fs/cgroup") / rel))
        for kind in ("memory", "pids"):
            if kind in controllers.split(","):
                roots.append((kind, Path("/sys/fs/cgroup") / kind / rel))
    return tuple((kind, path) for kind, path in roots if os.access(path, os.W_OK))


def _cgroup_bases(limits: Limits):
    memory, pids = limits.run_memory, limits.processes
    roots = dict(_cgroup_roots())
    if "memory" in roots or "pids" in roots:  # v1 (here v2 holds no controllers)
        if "memory" in roots:
            yield roots["memory"], [("memory.limit_in_bytes", memory),
                                    ("memory.memsw.limit_in_bytes", memory)]
        if "pids" in roots:
            yield roots["pids"], [("pids.max", pids)]
    elif "v2" in roots:
        yield roots["v2"], [("memory.max", memory), ("memory.swap.max", 0), ("pids.max", pids)]


def _sandboxed(mode: str, uid: int | None, stage: Stage, limits: Limits,
               argv: list[str], cgroups: list[str] | None = None,
               status_fd: int | None = None) -> list[str]:
    """The command that runs ``argv`` on ``stage`` inside the sandbox."""
    nproc = limits.processes
    if uid is None:  # RLIMIT_NPROC counts every process of the user: leave room for theirs
        nproc += sum(int(status.get("Threads", "1")) for _, status in _statuses(os.getuid()))
    namespaces = mode == "namespaces"
    config = {
        "mode": mode, "uid": uid, "gid": uid, "work": str(stage.work), "cgroups": cgroups or [],
        "status_fd": status_fd,
        "work_size": limits.work_size,
        "view": {**allowed_view(), "stage": str(stage.dir), "etc": str(stage.dir / ETC),
                 "etc_files": sorted(_ETC)} if namespaces else None,
        "limits": {"RLIMIT_CPU": [limits.cpu, limits.cpu + 5], "RLIMIT_AS": [limits.memory] * 2,
                   "RLIMIT_NPROC": [nproc] * 2, "RLIMIT_FSIZE": [limits.file_size] * 2,
                   "RLIMIT_NOFILE": [limits.open_files] * 2, "RLIMIT_CORE": [0, 0]},
        "argv": argv,
    }
    if mode == "bwrap":  # the trampoline again inside, to drop to the uid and exec the run
        inner = {**config, "mode": "inner", "cgroups": []}
        config["argv"] = bwrap_argv(stage, limits) + [
            sys.executable, "-I", "-S", "-B", INNER_TRAMPOLINE, json.dumps(inner)]
    return [sys.executable, "-I", "-S", "-B", str(TRAMPOLINE), json.dumps(config)]


_LIVE: set[subprocess.Popen] = set()  # runs in progress, for kill_all()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()  # kill_all() was called: a run that starts after it dies at once


def run(stage: Stage, argv: list[str], limits: Limits, *, iso: str, uid: int | None,
        explore_seed: int | None = None) -> Outcome:
    """Run ``argv`` (pytest, or the probe) on ``stage`` inside the sandbox (``iso``: what
    ``detect`` found), as ``uid`` (claimed with ``UidClaim``; None when not root); never
    raises for anything the learner code does.  ``explore_seed``: the seed the exploration
    checkpoint draws its scenarios from (recorded in the gradebook)."""
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
    group = RunGroup(f"{STAGE_PREFIX}{os.getpid()}-{token}", limits) if iso != "none" \
        else None
    memory_hit = False
    reader = ReportReader(report_r, key)
    drain = OutputDrain(out_r)
    try:
        proc = subprocess.Popen(_sandboxed(iso, uid, stage, limits, argv,
                                           [str(d) for d in group.dirs] if group else [],
                                           status_w),
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
        records=list(reader.records), forged=reader.forged, violation=reader.violation,
        timed_out=timed_out, exit_code=code, output=drain.text(), output_bytes=drain.total,
        # killed, or the trampoline's 128 + signal
        signal=-code if code < 0 else code - 128 if code > 128 and code != 255 else None,
        seconds=time.monotonic() - started, leftovers=leftovers, sandbox_error=sandbox_error,
        run_memory=memory_hit)


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
