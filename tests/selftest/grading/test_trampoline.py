"""What surrounds a run before it starts: its cgroups on both layouts, against a fake cgroup
filesystem laid out in a temporary folder (this machine has v1 only, so v2 would go untested
otherwise), the trampoline joining them, and the system calls it refuses to the run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from workbook.grading.sandbox import cgroups
from workbook.grading.sandbox.cgroups import Place, RunGroup
from workbook.grading.sandbox.command import TRAMPOLINE

MEMORY, TASKS = 1 << 30, 256


def _v2_tree(tmp_path: Path) -> Path:
    """A v2 mount with the grader's cgroup ``/grader.slice``, as the kernel shows them."""
    mount = tmp_path / "cgroup"
    parent = mount / "grader.slice"
    parent.mkdir(parents=True)
    for folder in (mount, parent):
        (folder / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        (folder / "cgroup.subtree_control").write_text("cpu\n")
    return mount


def test_on_v2_a_run_gets_one_cgroup_that_limits_memory_and_tasks_and_counts_cpu(tmp_path):
    mount = _v2_tree(tmp_path)
    places = cgroups.own_places("0::/grader.slice\n", mount)
    assert places == (Place("v2", mount / "grader.slice"),)
    group = RunGroup("run-1", MEMORY, TASKS, places)
    child = mount / "grader.slice" / "run-1"
    assert group.dirs == [child]
    # The controllers are handed down to the children first, in one write.
    assert (mount / "grader.slice" / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert {name: (child / name).read_text() for name in
            ("memory.max", "memory.swap.max", "pids.max")} == {
        "memory.max": str(MEMORY), "memory.swap.max": "0", "pids.max": str(TASKS)}
    # What the kernel would write as the run goes: read back through the same object.
    (child / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n"
                                    "system_usec 500000\n")
    (child / "pids.current").write_text("7\n")
    (child / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    assert (group.cpu(), group.tasks(), group.hit_memory_limit()) == (1.5, 7, False)
    (child / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert group.hit_memory_limit()
    (child / "cgroup.procs").write_text("")
    assert group.processes() == set() and group.remove(grace=0) == 0


def test_on_v1_a_run_gets_a_memory_a_pids_and_a_cpuacct_cgroup(tmp_path):
    mount = tmp_path / "cgroup"
    for kind in ("memory", "pids", "cpuacct", "blkio"):
        (mount / kind / "grader").mkdir(parents=True)
    text = "5:blkio:/grader\n4:memory:/grader\n3:pids:/grader\n2:cpu,cpuacct:/grader\n0::/\n"
    places = cgroups.own_places(text, mount)  # no v2 controllers file: a hybrid mount
    assert sorted(p.kind for p in places) == ["cpuacct", "memory", "pids"]
    group = RunGroup("run-1", MEMORY, TASKS, places)
    assert (mount / "memory/grader/run-1/memory.limit_in_bytes").read_text() == str(MEMORY)
    assert (mount / "pids/grader/run-1/pids.max").read_text() == str(TASKS)
    (mount / "cpuacct/grader/run-1/cpuacct.usage").write_text("2250000000\n")
    (mount / "pids/grader/run-1/pids.current").write_text("3\n")
    (mount / "memory/grader/run-1/memory.failcnt").write_text("0\n")
    assert (group.cpu(), group.tasks(), group.hit_memory_limit()) == (2.25, 3, False)


def test_a_cgroup_that_cannot_be_made_is_left_out_and_counts_nothing(tmp_path):
    mount = _v2_tree(tmp_path)
    places = cgroups.own_places("0::/grader.slice\n", mount)
    (mount / "grader.slice" / "run-1").write_text("in the way")
    group = RunGroup("run-1", MEMORY, TASKS, places)
    assert group.dirs == [] and group.cpu() is None and group.tasks() is None
    assert cgroups.own_places("0::/elsewhere\n", mount) == ()  # not ours to write


def test_the_trampoline_joins_the_runs_cgroups_before_the_run_starts(tmp_path):
    mount = _v2_tree(tmp_path)
    group = RunGroup("run-1", MEMORY, TASKS, cgroups.own_places("0::/grader.slice\n", mount))
    out = tmp_path / "pid"
    config = {"mode": "none", "uid": None, "gid": None, "work": str(tmp_path),
              "cgroups": [str(d) for d in group.dirs], "status_fd": None, "limits": {},
              "argv": [sys.executable, "-S", "-c",
                       f"import os; open({str(out)!r}, 'w').write(str(os.getpid()))"]}
    subprocess.run([sys.executable, "-I", "-S", str(TRAMPOLINE), json.dumps(config)],
                   check=True, timeout=60)
    # The trampoline wrote its own pid, then exec'd the run: the same process.
    assert (group.dirs[0] / "cgroup.procs").read_text() == out.read_text()
    assert int(out.read_text()) != os.getpid()


def test_the_run_cannot_use_the_kernel_keyrings_or_another_process_memory(tmp_path):
    """Keyrings are not namespaced: a key added by one run would wait in its uid's keyring
    for the next run under that uid.  ptrace would reach another process's memory."""
    probe = ("import ctypes, os\n"
             "libc = ctypes.CDLL(None, use_errno=True)\n"
             "calls = {'add_key': (248, b'user', b'note', b'42', 2, -4), 'keyctl': (250, 0, -4),"
             " 'ptrace': (101, 16, os.getppid(), 0, 0), 'getpid': (39,)}\n"
             "out = {}\n"
             "for name, args in calls.items():\n"
             "    result = libc.syscall(*args)\n"
             "    out[name] = os.strerror(ctypes.get_errno()) if result == -1 else 'allowed'\n"
             "print(out)\n")
    if os.uname().machine != "x86_64":
        return  # the numbers above are x86_64's
    config = {"mode": "none", "uid": None, "gid": None, "work": str(tmp_path), "cgroups": [],
              "status_fd": None, "limits": {}, "argv": [sys.executable, "-S", "-c", probe]}
    out = subprocess.run([sys.executable, "-I", "-S", str(TRAMPOLINE), json.dumps(config)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str({"add_key": "Operation not permitted",
                                      "keyctl": "Operation not permitted",
                                      "ptrace": "Operation not permitted", "getpid": "allowed"})


def test_a_run_whose_grader_died_before_it_could_watch_for_it_does_not_start(tmp_path):
    """The grader's pid travels in the config: a trampoline that finds another parent (the
    grader was killed while it was starting, and init adopted it) leaves before the run."""
    ran = tmp_path / "ran"
    config = {"mode": "none", "uid": None, "gid": None, "work": str(tmp_path), "cgroups": [],
              "status_fd": None, "limits": {}, "parent": 1 if os.getpid() != 1 else 2,
              "argv": [sys.executable, "-S", "-c", f"open({str(ran)!r}, 'w').close()"]}
    out = subprocess.run([sys.executable, "-I", "-S", str(TRAMPOLINE), json.dumps(config)],
                         timeout=60)
    assert out.returncode == 137 and not ran.exists()
