"""A cgroup for each run, where the host lets the grader make one: memory and task limits for
the whole run (every process and thread of it together; the per-process rlimits stay as the
floor) and the CPU it used, read from outside (``outside``).

Two layouts: cgroup v2 (one hierarchy; ``memory.max``, ``pids.max``, ``cpu.stat``) and v1
(one hierarchy per controller: ``memory``, ``pids``, ``cpuacct``), as on this machine.  The
grader's own cgroups are read from ``/proc/self/cgroup``; the mount point and that text are
parameters, so the selftest can lay out either kind in a temporary folder.
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

MOUNT = Path("/sys/fs/cgroup")
#: The v1 controllers a run's cgroups are made in.
V1_KINDS = ("memory", "pids", "cpuacct")


@dataclass(frozen=True)
class Place:
    """One of the grader's own cgroups that can have children: ``kind`` is "v2" or the v1
    controller's name."""
    kind: str
    path: Path


def own_places(proc_cgroup: str, mount: Path = MOUNT) -> tuple[Place, ...]:
    """The grader's cgroups (``proc_cgroup``: the text of ``/proc/self/cgroup``) in which it
    may make children: the v2 one where ``mount`` is a v2 hierarchy, else v1's memory, pids
    and cpuacct ones."""
    places = []
    for line in proc_cgroup.splitlines():
        try:
            _, controllers, path = line.split(":", 2)
        except ValueError:
            continue
        rel = path.lstrip("/")
        if controllers == "" and (mount / "cgroup.controllers").exists():
            places.append(Place("v2", mount / rel))
        for kind in V1_KINDS:
            if kind in controllers.split(","):
                places.append(Place(kind, mount / kind / rel))
    return tuple(p for p in places if os.access(p.path, os.W_OK))


@functools.lru_cache(maxsize=None)
def _machine_places() -> tuple[Place, ...]:
    try:
        return own_places(Path("/proc/self/cgroup").read_text())
    except OSError:
        return ()


def _settings(places: tuple[Place, ...], memory: int, tasks: int):
    """``(place, [(file, value), ...])`` for each cgroup a run gets."""
    kinds = {p.kind: p for p in places}
    if any(kind in kinds for kind in V1_KINDS):  # v1 (a v2 hierarchy beside it holds none)
        wanted = {"memory": [("memory.limit_in_bytes", memory),
                             ("memory.memsw.limit_in_bytes", memory)],
                  "pids": [("pids.max", tasks)], "cpuacct": []}
        for kind, values in wanted.items():
            if kind in kinds:
                yield kinds[kind], values
    elif "v2" in kinds:
        yield kinds["v2"], [("memory.max", memory), ("memory.swap.max", 0), ("pids.max", tasks)]


def _enable_v2_controllers(parent: Path) -> None:
    """Let the children of ``parent`` limit memory and tasks (v2 hands controllers down only
    through ``cgroup.subtree_control``).  The kernel refuses where ``parent`` holds processes
    of its own and is not the root; the run's cgroup then counts CPU and tasks, unlimited
    except by the per-process rlimits."""
    try:
        available = (parent / "cgroup.controllers").read_text().split()
        enabled = (parent / "cgroup.subtree_control").read_text().split()
    except OSError:
        return
    wanted = [f"+{c}" for c in ("memory", "pids") if c in available and c not in enabled]
    if wanted:
        with contextlib.suppress(OSError):
            (parent / "cgroup.subtree_control").write_text(" ".join(wanted))


class RunGroup:
    """The cgroups of one run (``dirs``: empty where none could be made).  The trampoline
    writes the run's first process into each ``cgroup.procs`` before anything else starts."""

    def __init__(self, name: str, memory: int, tasks: int,
                 places: tuple[Place, ...] | None = None) -> None:
        self.dirs: list[Path] = []
        self.kinds: dict[str, Path] = {}
        if places is None:
            places = _machine_places() if os.geteuid() == 0 else ()
        for place, settings in _settings(places, memory, tasks):
            if place.kind == "v2":
                _enable_v2_controllers(place.path)
            path = place.path / name
            try:
                path.mkdir()
            except OSError:
                continue
            self.dirs.append(path)
            self.kinds[place.kind] = path
            for setting, value in settings:
                with contextlib.suppress(OSError):
                    (path / setting).write_text(str(value))

    def processes(self) -> set[int]:
        found = set()
        for path in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found.update(map(int, (path / "cgroup.procs").read_text().split()))
        return found

    def cpu(self) -> float | None:
        """CPU seconds every process and thread of the run has used so far (those that ended
        included); None where no cgroup counts it."""
        path = self.kinds.get("cpuacct")
        if path is not None:
            with contextlib.suppress(OSError, ValueError):
                return int((path / "cpuacct.usage").read_text()) / 1e9
        path = self.kinds.get("v2")
        if path is not None:
            with contextlib.suppress(OSError, ValueError, StopIteration):
                lines = (path / "cpu.stat").read_text().splitlines()
                return int(next(ln.split()[1] for ln in lines
                                if ln.startswith("usage_usec "))) / 1e6
        return None

    def tasks(self) -> int | None:
        """Processes and threads in the run right now (None: not counted)."""
        for path in (self.kinds.get("pids"), self.kinds.get("v2")):
            if path is not None:
                with contextlib.suppress(OSError, ValueError):
                    return int((path / "pids.current").read_text())
        return None

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
            for path in self.dirs:  # v2 (5.14+): the kernel kills the whole cgroup at once
                if (path / "cgroup.kill").exists():
                    with contextlib.suppress(OSError):
                        (path / "cgroup.kill").write_text("1")
            for pid in self.processes():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        for path in self.dirs:
            with contextlib.suppress(OSError):
                path.rmdir()
        return len(left)
