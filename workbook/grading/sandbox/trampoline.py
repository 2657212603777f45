"""The sandbox trampoline, run as ``python -I -S trampoline.py CONFIG_JSON`` (stdlib only).

With ``mode == "bwrap"`` it only joins the run's cgroups and execs bubblewrap (which makes the
namespaces and the root), whose command is this trampoline again (``mode == "inner"``): it
drops to the run's uid, applies the limits and execs the run.  The rest below is the
fallback where bubblewrap is missing.

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
CLONE_NEWIPC, CLONE_NEWUTS = 0x08000000, 0x04000000
MNT_DETACH = 2
#: pivot_root(2) has no libc wrapper: its system call number (x86_64, aarch64).
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine, 155)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 1, 38, 22, 2
#: System calls refused to every process of a run (EPERM), as ``(audit arch, numbers)``: the
#: kernel keyrings (``add_key``, ``request_key``, ``keyctl``), which no namespace separates
#: (a note in the uid's keyring would wait for the next run under that uid), and another
#: process's memory (``ptrace``, ``process_vm_readv``/``writev``).  A solution needs none.
REFUSED_CALLS = {"x86_64": (0xC000003E, (248, 249, 250, 101, 310, 311)),
                 "aarch64": (0xC00000B7, (217, 218, 219, 117, 270, 271))}


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


def _die_with_parent(libc, parent: int | None = None) -> None:
    """SIGKILL this process when its parent goes (a grader killed mid-batch leaves nothing).
    ``parent``: the pid it must have (the grader's, from the config): read here instead, it
    would already be init's if the grader died before this process got this far, and the
    run would live on."""
    parent = os.getppid() if parent is None else parent
    _syscall_ok(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(137)


def _build_view(libc, config: dict) -> None:
    """Inside the new mount namespace: a new root made only of what ``config["view"]`` allows
    (read-only binds of ``/usr``, the interpreter and the stage; a few device nodes; a
    minimal ``/etc``; private tmpfs ``/tmp`` and working directory), then ``pivot_root``
    into it and the old root detached: nothing else of the machine is reachable."""
    view = config["view"]
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    new = os.path.join(view["stage"], ".root")
    os.makedirs(new, exist_ok=True)
    _mount(libc, "tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")

    def bind(source: str, target: str, writable: bool = False, directory: bool = True,
             recursive: bool = True) -> None:
        inside = new + target
        if directory:
            os.makedirs(inside, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(inside), exist_ok=True)
            open(inside, "a").close()
        _mount(libc, source, inside, None, MS_BIND | (MS_REC if directory and recursive else 0))
        if not writable:
            _mount(libc, None, inside, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)

    for private in ("/tmp", "/dev/shm"):  # first: the stage may lie under /tmp
        os.makedirs(new + private, exist_ok=True)
        _mount(libc, "tmpfs", new + private, "tmpfs", MS_NOSUID | MS_NODEV,
               f"mode=1777,size={config['work_size']}")
    for path in view["binds"]:
        bind(path, path)
    for link, target in view["symlinks"]:
        os.symlink(target, new + link)
    bind(view["stage"], view["stage"], recursive=False)  # .root is not inside itself
    for name in view["etc_files"]:
        bind(os.path.join(view["etc"], name), "/etc/" + name, directory=False)
    for device in ("null", "zero", "full", "random", "urandom"):
        bind("/dev/" + device, "/dev/" + device, writable=True, directory=False)
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{new}/dev/{link}")
    # The learner's writable directory: a small private tmpfs owned by the sandbox uid.
    _mount(libc, "tmpfs", new + config["work"], "tmpfs", MS_NOSUID | MS_NODEV,
           f"mode=700,size={config['work_size']},uid={config['uid']},gid={config['gid']}")
    os.makedirs(new + "/proc", exist_ok=True)
    os.makedirs(new + "/.old", exist_ok=True)
    os.chdir(new)
    _syscall_ok(libc.syscall(SYS_PIVOT_ROOT, b".", b".old"), "pivot_root")
    os.chdir("/")
    _syscall_ok(libc.umount2(b"/.old", MNT_DETACH), "umount the old root")
    os.rmdir("/.old")
    _mount(libc, None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
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
    argv = config["argv"]
    if config["mode"] == "inner":  # bubblewrap's tmpfs mounts belong to root: hand them over
        for path in (config["work"], "/tmp"):
            os.chown(path, config["uid"], config["gid"])
            os.chmod(path, 0o700 if path == config["work"] else 0o1777)
    os.chdir(config["work"])
    if config["uid"] is not None:
        os.setgroups([])
        os.setresgid(config["gid"], config["gid"], config["gid"])
        os.setresuid(config["uid"], config["uid"], config["uid"])
    _syscall_ok(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
    _die_with_parent(libc)  # after setuid: a change of credentials clears it
    _refuse_calls(libc)
    for name, (soft, hard) in config["limits"].items():  # "RLIMIT_CPU": [soft, hard], ...
        resource.setrlimit(getattr(resource, name), (soft, hard))
    # Past the file-size limit a write fails with EFBIG instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    os.umask(0o077)
    if config.get("status_fd") is not None:  # the run never holds the failure channel
        os.set_inheritable(config["status_fd"], False)
    os.execve(argv[0], argv, os.environ)


def _refuse_calls(libc) -> None:
    """A seccomp filter: ``REFUSED_CALLS`` answer EPERM; so does every call of another
    architecture's numbering (i386 or x32 on x86_64), which would name other calls."""
    import struct
    arch, calls = REFUSED_CALLS.get(os.uname().machine, REFUSED_CALLS["x86_64"])
    load, jump_eq, jump_ge, ret = 0x20, 0x15, 0x35, 0x06
    allow, refuse = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO|EPERM
    program = [(load, 0, 0, 4)]  # the architecture
    program.append((jump_eq, 1, 0, arch))
    program.append((ret, 0, 0, refuse))
    program.append((load, 0, 0, 0))  # the call's number
    last = len(calls) + 1  # from the next instruction: the "refuse" at the end
    program.append((jump_ge, last, 0, 0x40000000))  # x32's numbering
    for i, call in enumerate(calls):
        program.append((jump_eq, last - 1 - i, 0, call))
    program += [(ret, 0, 0, allow), (ret, 0, 0, refuse)]
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in program))
    fprog = ctypes.create_string_buffer(struct.pack("HL", len(program), ctypes.addressof(code)))
    _syscall_ok(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0),
                "seccomp")


def _exit_like(status: int) -> None:
    """Leave with the child's wait status folded into an exit code (128 + signal)."""
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


def _join_cgroups(config: dict) -> None:
    """Into the run's own cgroups (made by the grader), before anything else starts:
    every process and thread of the run is counted there together."""
    for path in config.get("cgroups", []):
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))


def trampoline(config: dict) -> None:
    libc = _libc()
    _die_with_parent(libc, None if config["mode"] == "inner" else config.get("parent"))
    if config["mode"] == "inner":  # inside bubblewrap: its namespaces and root are made
        _become_learner(libc, config)
    _join_cgroups(config)
    if config["mode"] == "bwrap":  # bubblewrap makes the namespaces and the root, as root
        os.execve(config["argv"][0], config["argv"], os.environ)
    if config["mode"] != "namespaces":
        _become_learner(libc, config)
    _syscall_ok(libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
                             | CLONE_NEWUTS), "unshare")
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
    _config: dict = {}
    try:
        _config = json.loads(sys.argv[1])
        trampoline(_config)
    except BaseException as exc:  # noqa: BLE001
        message = f"workbook sandbox: {exc}\n".encode()
        os.write(2, message)
        if _config.get("status_fd") is not None:  # the grader's own channel
            try:
                os.write(_config["status_fd"], message)
            except OSError:
                pass
        os._exit(125)
