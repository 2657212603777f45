"""The limits of one run: wall clock, import time, and what each process and the whole run may
use (the trampoline sets the rlimits, ``cgroups`` the whole run's).
"""
from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20


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
