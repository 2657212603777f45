"""A uid of its own for each run slot, claimed machine-wide: two graders on one machine never
share one (each run kills whatever still runs as its uid, and RLIMIT_NPROC counts per uid).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import stat

from workbook.grading.sandbox import IsolationError

#: Sandbox uids are claimed from UID_BASE .. UID_BASE + UID_POOL - 1 (override the base with
#: WORKBOOK_SANDBOX_UID); the gid equals the uid.  A claim is exclusive machine-wide.
UID_BASE = int(os.environ.get("WORKBOOK_SANDBOX_UID", "62000"))
UID_POOL = 64


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
