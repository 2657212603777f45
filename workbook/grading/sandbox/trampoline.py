"""The sandbox trampoline, run as ``python -I -S trampoline.py CONFIG_JSON`` (stdlib only).

The few steps that must happen between ``fork`` and ``exec``, in a fresh process with no
learner code loaded: new mount/PID/network namespaces (``mode == "namespaces"``), a
filesystem view in which the repository, the home directory and the shared temporary
directories are empty except for what ``expose`` maps back read-only, dropping root to the
run's own uid, ``no_new_privs``, resource limits, and finally ``exec`` of the run.  As PID 1
of the new PID namespace it reaps orphans; when it exits the kernel kills what is left.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

# Linux constants (include/uapi/linux/sched.h, mount.h, prctl.h)
CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_char_p]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                           ctypes.c_ulong]
    return libc


def _syscall_ok(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _mount(libc, source, target, fstype, flags, data=None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _syscall_ok(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)),
                f"mount {target}")


def _die_with_parent(libc) -> None:
    """SIGKILL this process when its parent goes (a grader killed mid-batch leaves nothing)."""
    parent = os.getppid()
    _syscall_ok(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(137)


def _build_view(libc, config: dict) -> None:
    """Inside the new mount namespace: hide directories, map the allowed ones back read-only."""
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    # Handles on what must stay visible, taken before anything is covered.
    keep = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in config["expose"]}
    for hidden, mode in config["hide"]:
        os.makedirs(hidden, exist_ok=True)  # it may lie inside a directory hidden just before
        _mount(libc, "tmpfs", hidden, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode},size=16m")
        for path, fd in sorted(keep.items()):
            if path == hidden or path.startswith(hidden.rstrip("/") + "/"):
                os.makedirs(path, exist_ok=True)
                _mount(libc, f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
                _mount(libc, None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    for fd in keep.values():
        os.close(fd)
    # The learner's writable directory: a small private tmpfs owned by the sandbox uid.
    work = config["work"]
    _mount(libc, "tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV,
           f"mode=700,size={config['work_size']},uid={config['uid']},gid={config['gid']}")
    try:  # a /proc that shows only this PID namespace
        _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass  # some container runtimes refuse; the PID namespace still holds
    _loopback_up()


def _loopback_up() -> None:
    """A new network namespace starts with ``lo`` down; the tests need 127.0.0.1."""
    import fcntl
    import socket
    import struct
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


def _become_learner(libc, config: dict) -> None:
    """Drop privileges, apply the limits and exec the run.  Never returns."""
    import resource
    os.chdir(config["work"])
    if config["uid"] is not None:
        os.setgroups([])
        os.setresgid(config["gid"], config["gid"], config["gid"])
        os.setresuid(config["uid"], config["uid"], config["uid"])
    _syscall_ok(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
    _die_with_parent(libc)  # after setuid: a change of credentials clears it
    for name, (soft, hard) in config["limits"].items():  # "RLIMIT_CPU": [soft, hard], ...
        resource.setrlimit(getattr(resource, name), (soft, hard))
    # Past the file-size limit a write fails with EFBIG instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    os.umask(0o077)
    argv = config["argv"]
    os.execve(argv[0], argv, os.environ)


def _exit_like(status: int) -> None:
    """Leave with the child's wait status folded into an exit code (128 + signal)."""
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


def trampoline(config: dict) -> None:
    libc = _libc()
    _die_with_parent(libc)
    if config["mode"] != "namespaces":
        _become_learner(libc, config)
    _syscall_ok(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET), "unshare")
    init = os.fork()  # becomes PID 1 of the new PID namespace
    if init:
        _, status = os.waitpid(init, 0)
        _exit_like(status)
    _die_with_parent(libc)  # a failure from here to the exec leaves through __main__'s 125
    _build_view(libc, config)
    learner = os.fork()
    if learner == 0:
        _become_learner(libc, config)
    # PID 1: reap every orphan until the run itself ends.  When PID 1 exits, the kernel
    # kills every process left in the namespace -- no orphan can outlive the run.
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(125)
        if pid == learner:
            _exit_like(status)


if __name__ == "__main__":
    try:
        trampoline(json.loads(sys.argv[1]))
    except BaseException as exc:  # noqa: BLE001
        os.write(2, f"workbook sandbox: {exc}\n".encode())
        os._exit(125)
