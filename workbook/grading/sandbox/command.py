"""The command that runs a stage inside the sandbox: bubblewrap around the run (``bwrap``), or
the trampoline's own namespaces and ``pivot_root`` (``namespaces``), or only the trampoline's
uid and limits (``uid``, ``none``).  Both namespace modes build the root from the same
allow-list (``allowed_view``).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

from workbook.grading.sandbox.limits import MiB, Limits
from workbook.grading.sandbox.procs import statuses
from workbook.grading.sandbox.stage import ETC, ETC_FILES, Stage

TRAMPOLINE = Path(__file__).resolve().with_name("trampoline.py")
#: Where the trampoline is in bubblewrap's view of the run.
INNER_TRAMPOLINE = "/.workbook-trampoline.py"


def bwrap_argv(stage: Stage, limits: Limits, python: Sequence[str] = ()) -> list[str]:
    """bubblewrap around a run: a root made only of read-only binds of the system's shared
    libraries (``/usr``), the interpreter and its packages, the stage and the trampoline;
    private tmpfs ``/tmp`` and working directory; a minimal ``/etc``; new mount, PID, IPC,
    UTS, network and cgroup namespaces.  bubblewrap runs as root (it can bind a pyenv Python
    under a 0700 ``/root``); inside, the trampoline drops to the run's own uid.  No user
    namespace: it would map the run to root outside, where the real uid is the boundary.
    ``python``: the folders of the interpreter that runs the judged process, when it is not
    the grader's (``grade --pythons``: its venv and its installation)."""
    size = str(_bytes(limits.work_size))
    args = [shutil.which("bwrap") or "/usr/bin/bwrap", "--unshare-ipc", "--unshare-pid",
            "--unshare-net", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent",
            "--new-session", "--hostname", "sandbox", "--ro-bind", "/usr", "/usr",
            "--size", size, "--tmpfs", "/tmp"]  # first: the stage or a venv may be under /tmp
    view = allowed_view(python)
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
    for name in ETC_FILES:
        args += ["--ro-bind", str(stage.dir / ETC / name), f"/etc/{name}"]
    return args + ["--chdir", "/", "--"]


def allowed_view(python: Sequence[str] = ()) -> dict[str, list]:
    """What a run's root is made of, in both namespace modes: read-only binds of the
    system's shared libraries and programs (``/usr`` and the top-level links into it), the
    interpreter and its installed packages, nothing else of the machine.  ``python``: the
    folders of another interpreter the run uses (its venv, its installation); the grader's
    own is bound in any case (bubblewrap's mode runs the trampoline with it inside)."""
    binds, links = ["/usr"], []
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            links.append([top, os.readlink(top)])
        elif os.path.isdir(top):
            binds.append(top)
    own = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    own |= {sys.prefix, sys.base_prefix, os.path.dirname(sys.executable), *python}
    for path in sorted(own, key=lambda p: (p.count("/"), p)):
        if not path.startswith("/usr/") and os.path.isdir(path) and path not in binds:
            binds.append(path)
    return {"binds": binds, "symlinks": links}


def _bytes(size: str) -> int:
    units = {"k": 1 << 10, "m": MiB, "g": 1 << 30}
    return int(size[:-1]) * units[size[-1].lower()] if size[-1].isalpha() else int(size)


def command(mode: str, uid: int | None, stage: Stage, limits: Limits,
               argv: list[str], cgroups: list[str] | None = None,
               status_fd: int | None = None, python: Sequence[str] = ()) -> list[str]:
    """The command that runs ``argv`` on ``stage`` inside the sandbox; ``python``: the
    folders of the interpreter ``argv`` names, when it is not the grader's."""
    nproc = limits.processes
    if uid is None:  # RLIMIT_NPROC counts every process of the user: leave room for theirs
        nproc += sum(int(status.get("Threads", "1")) for _, status in statuses(os.getuid()))
    namespaces = mode == "namespaces"
    config = {
        "mode": mode, "uid": uid, "gid": uid, "work": str(stage.work), "cgroups": cgroups or [],
        "parent": os.getpid(),  # the trampoline's parent: dead already, it must not run
        "status_fd": status_fd,
        "work_size": limits.work_size,
        "view": {**allowed_view(python), "stage": str(stage.dir), "etc": str(stage.dir / ETC),
                 "etc_files": sorted(ETC_FILES)} if namespaces else None,
        "limits": {"RLIMIT_CPU": [limits.cpu, limits.cpu + 5], "RLIMIT_AS": [limits.memory] * 2,
                   "RLIMIT_NPROC": [nproc] * 2, "RLIMIT_FSIZE": [limits.file_size] * 2,
                   "RLIMIT_NOFILE": [limits.open_files] * 2, "RLIMIT_CORE": [0, 0]},
        "argv": argv,
    }
    if mode == "bwrap":  # the trampoline again inside, to drop to the uid and exec the run
        inner = {**config, "mode": "inner", "cgroups": []}
        config["argv"] = bwrap_argv(stage, limits, python) + [
            sys.executable, "-I", "-S", "-B", INNER_TRAMPOLINE, json.dumps(inner)]
    return [sys.executable, "-I", "-S", "-B", str(TRAMPOLINE), json.dumps(config)]
