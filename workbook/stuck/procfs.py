"""What the kernel says about a thread: the only code of the harness that reads ``/proc``.

Per-thread CPU clocks, the one-letter scheduler state, the system call a thread is blocked in
(with whether it has a timeout and, where the kernel was given an absolute deadline, when it
ends), and whether the process has a child.  Plain values in, plain values out.
"""
from __future__ import annotations

import _thread
import fcntl
import os
import sys
import threading
import time
import weakref
from typing import NamedTuple

#: The calling thread's kernel id, bound when the harness is imported (before any code under
#: test exists, so none can have replaced it).
_gettid = _thread.get_native_id
#: Kernel ids of the threads the harness runs code under test in, each recorded by the thread
#: itself (``note_tid``) in harness code, before it runs any of that code.  A thread object's
#: ``native_id`` is an attribute the code under test can rewrite (say, to the id of a thread
#: of its own asleep in ``select()``, while the real one polls): what the kernel says of a
#: thread is read through this table first.
_TIDS: "weakref.WeakKeyDictionary[threading.Thread, int]" = weakref.WeakKeyDictionary()


def note_tid(thread: threading.Thread) -> None:
    """Record the kernel id of the calling thread, ``thread``."""
    _TIDS[thread] = _gettid()


if threading.current_thread() is threading.main_thread():  # as a check imports the harness
    note_tid(threading.main_thread())


def kernel_tid(thread: threading.Thread) -> int | None:
    """``thread``'s kernel id: as recorded by ``note_tid``, else its ``native_id``."""
    tid = _TIDS.get(thread)
    return tid if tid is not None else getattr(thread, "native_id", None)


def thread_cpu_seconds(thread: threading.Thread) -> float | None:
    """CPU seconds ``thread`` has used so far (its own per-thread CPU clock), or None once it
    has ended.  Read through the kernel thread id, so a finished thread is never touched."""
    tid = kernel_tid(thread)
    if tid is None or not thread.is_alive():
        return None
    # Linux encodes a thread's CPU clock as ~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED
    # (what glibc's pthread_getcpuclockid returns); an ended tid gives EINVAL, not a crash.
    try:
        return time.clock_gettime((~tid << 3) | 6)
    except (OSError, OverflowError, AttributeError):
        pass
    try:  # other kernels: /proc's scheduler statistics (nanoseconds on the CPU)
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def run_delay_seconds(tid: int | None = None, pid: int | str = "self") -> float:
    """Seconds the thread ``tid`` (the calling one by default) of process ``pid`` (this one by
    default) has spent ready to run but waiting for a CPU (``/proc`` schedstat's run delay);
    0.0 where the kernel does not say."""
    tid = _gettid() if tid is None else tid
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def thread_demand_seconds(thread: threading.Thread) -> float | None:
    """How long ``thread`` has wanted a CPU: the CPU seconds it used plus the seconds it
    waited, runnable, for one.  A spinning thread's demand grows with the wall clock however
    crowded the machine (its CPU alone grows with its share of the machine); a parked
    thread's stands still.  None once the thread has ended."""
    cpu = thread_cpu_seconds(thread)
    if cpu is None:
        return None
    return cpu + run_delay_seconds(kernel_tid(thread))


def current_cpu() -> int | None:
    """The CPU the calling thread runs on now, or None where ``/proc`` does not say."""
    try:
        with open("/proc/thread-self/stat", "rb") as f:
            # The command name (field 2) may hold spaces: count the fields after its ")".
            return int(f.read().rpartition(b")")[2].split()[36])  # field 39, "processor"
    except (OSError, ValueError, IndexError):
        return None


def kernel_state(thread: threading.Thread) -> str | None:
    """The kernel's one-letter state of ``thread`` ('R' running, 'S' sleeping, ...), or None
    where /proc is not available or the thread has ended."""
    tid = kernel_tid(thread)
    if tid is None:
        return None
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None



# x86_64 and aarch64 system call numbers of the blocking calls we understand.
SYSCALLS = {
    "x86_64": {0: "read", 1: "write", 7: "poll", 23: "select", 34: "pause", 35: "nanosleep",
               43: "accept", 44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg",
               61: "wait4", 130: "rt_sigsuspend", 202: "futex", 230: "clock_nanosleep",
               232: "epoll_wait", 247: "waitid", 270: "pselect6", 271: "ppoll",
               281: "epoll_pwait", 288: "accept4", 441: "epoll_pwait2"},
    "aarch64": {22: "epoll_pwait", 63: "read", 64: "write", 72: "pselect6", 73: "ppoll",
                95: "waitid", 98: "futex", 101: "nanosleep", 115: "clock_nanosleep",
                133: "rt_sigsuspend", 202: "accept", 206: "sendto", 207: "recvfrom",
                211: "sendmsg", 212: "recvmsg", 242: "accept4", 260: "wait4",
                441: "epoll_pwait2"},
}.get(os.uname().machine if hasattr(os, "uname") else "", {})
_INFINITE_MS = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)
SELECT_CALLS = ("epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select",
                 "pselect6")
#: The system calls ``time.sleep`` blocks in (3.11+ sleeps until an absolute time).
SLEEP_CALLS = ("clock_nanosleep", "nanosleep")


class Call(NamedTuple):
    """The system call a thread is blocked in, as the kernel shows it."""
    name: str
    timed: bool | None  # it has a timeout (None: a call we do not understand)
    ends: float | None  # the time.monotonic() it gives up at, when given an absolute time
    timeout: float | None = None  # seconds it was given, when relative and readable


def _ms(value: int) -> float | None:
    """A poll(2)/epoll_wait(2) timeout register (an int of milliseconds; negative for
    none) as seconds, or None when there is none."""
    ms = value & 0xFFFFFFFF
    return None if ms & 0x80000000 else ms / 1e3


def thread_syscall(thread: threading.Thread) -> Call | None:
    """``syscall`` of ``thread``, read through its recorded kernel id (``kernel_tid``)."""
    tid = kernel_tid(thread)
    return syscall(tid) if tid is not None else None


def syscall(tid: int) -> Call | None:
    """The system call ``tid`` is blocked in, read from /proc/self/task/TID/syscall: its
    arguments say whether it has a timeout and how long (for poll and epoll the register
    holds milliseconds, for select and the p-variants it points at a struct, read through
    /proc/self/mem).  None when the thread is running or nothing can be read."""
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return None
    if not fields or not fields[0].isdigit():
        return None  # "running", or "-1 ..." (not in a system call)
    nr = int(fields[0])
    args = [int(a, 16) for a in fields[1:7]]
    name = SYSCALLS.get(nr)
    if name is None or len(args) < 6:
        return Call(f"syscall {nr}", None, None)
    if name == "futex":
        cmd = args[1] & 0x7F
        if cmd in (0, 9, 6, 11, 13):  # WAIT, WAIT_BITSET, LOCK_PI, WAIT_REQUEUE_PI, LOCK_PI2
            ends = None
            if args[3] and cmd == 9:  # WAIT_BITSET takes an absolute time (what CPython's
                # timed lock, Condition, Event and queue waits use, 3.10 to 3.13)
                ends = _absolute(args[3], realtime=bool(args[1] & 0x100))
            return Call(name, args[3] != 0, ends)
        return Call(name, None, None)
    if name in ("epoll_wait", "epoll_pwait"):
        return Call(name, args[3] not in _INFINITE_MS, None, _ms(args[3]))
    if name == "poll":
        return Call(name, args[2] not in _INFINITE_MS, None, _ms(args[2]))
    if name in ("ppoll", "epoll_pwait2", "select", "pselect6"):
        at = args[2 if name == "ppoll" else 3 if name == "epoll_pwait2" else 4]
        return Call(name, at != 0, None,
                    _relative(at, micro=name == "select") if at else None)
    if name == "clock_nanosleep":  # time.sleep from 3.11: TIMER_ABSTIME on CLOCK_MONOTONIC
        absolute = args[1] & 1 and args[0] in (0, 1)
        return Call(name, True, _absolute(args[2], realtime=args[0] == 0) if absolute else None)
    if name == "nanosleep":
        return Call(name, True, None)
    if name in ("read", "write") and _pipe_to_another_process(args[0]):
        # A pipe whose other end no descriptor of this process holds: only another process
        # (the runner reading a check's output, say) ends this wait, and nothing here can
        # tell whether it will.
        return Call(name, None, None)
    return Call(name, False, None)  # read, write, send, recv, accept, wait4, pause: only
    #                                 someone else (a reader, a writer, a peer) ends these


def _pipe_to_another_process(fd: int) -> bool:
    """Whether descriptor ``fd`` is a pipe whose other end no descriptor of this process
    holds (a pipe made here has both ends among /proc/self/fd; stdout and stderr sharing one
    pipe are two descriptors of the *same* end, told apart by their access mode)."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if not target.startswith("pipe:"):
            return False
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{name}") == target and \
                        fcntl.fcntl(int(name), fcntl.F_GETFL) & os.O_ACCMODE != mode:
                    return False  # the other end is here too
            except OSError:
                continue  # closed meanwhile (or the listing's own descriptor)
        return True
    except (OSError, ValueError):
        return False
        same = 0
        for name in os.listdir("/proc/self/fd"):
            try:
                same += os.readlink(f"/proc/self/fd/{name}") == target
            except OSError:
                continue  # closed meanwhile (or the listing's own descriptor)
        return same < 2
    except (OSError, ValueError):
        return False


def _pair(address: int, limit: int) -> tuple[int, int] | None:
    """The two signed 64-bit words of a ``struct timespec``/``timeval`` at ``address`` in
    this process, read through /proc/self/mem (an error, never a crash, for a stale
    address); None unless the second is a valid fraction (below ``limit``)."""
    try:
        fd = os.open("/proc/self/mem", os.O_RDONLY)
        try:
            raw = os.pread(fd, 16, address)
        finally:
            os.close(fd)
    except (OSError, OverflowError, ValueError):
        return None
    if len(raw) != 16:
        return None
    seconds = int.from_bytes(raw[:8], sys.byteorder, signed=True)
    fraction = int.from_bytes(raw[8:], sys.byteorder, signed=True)
    if not 0 <= fraction < limit or seconds < 0:
        return None  # the thread returned and the memory was reused
    return seconds, fraction


def _relative(address: int, *, micro: bool) -> float | None:
    """A relative timeout struct (``timeval`` when ``micro``, else ``timespec``) in seconds."""
    found = _pair(address, 1_000_000 if micro else 1_000_000_000)
    if found is None:
        return None
    return found[0] + found[1] / (1e6 if micro else 1e9)


def _absolute(address: int, *, realtime: bool) -> float | None:
    """The absolute ``struct timespec`` at ``address`` in this process, as a monotonic time."""
    found = _pair(address, 1_000_000_000)
    if found is None:
        return None
    at = found[0] + found[1] / 1e9
    return at - time.time() + time.monotonic() if realtime else at


def children_alive() -> bool:
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                if f.read().strip():
                    return True
    except OSError:
        return True  # cannot tell: something outside might wake us
    return False
