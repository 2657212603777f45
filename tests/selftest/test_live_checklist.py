"""On a terminal the checklist is drawn while the check runs (issue 23.1): a spinner on the
running checkpoint, each one ticked as it finishes; piped output stays the final report."""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import threading
import time

from workbook import ROOT, manifest
from workbook.stuck.procfs import run_delay_seconds

P01 = manifest.get("p01")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Lag:
    """How late this machine wakes a sleeping thread, measured beside a command: a daemon
    thread asks for 50 ms naps and records, at each wake-up, how much longer it slept.  A
    gap in a command's output that the machine's own lag explains is not the command being
    silent (on a loaded 2-core box a thread may wait a second for a CPU)."""

    NAP = 0.05

    def __init__(self, started: float) -> None:
        self.started, self.seen = started, [(0.0, 0.0)]
        self.pid: int | None = None  # the command's process, once started
        #: (seconds since start, {thread id: seconds it waited runnable for a CPU so far})
        self.queued: list[tuple[float, dict[str, float]]] = []
        self.stop = threading.Event()
        threading.Thread(target=self._probe, daemon=True).start()

    def _probe(self) -> None:
        while not self.stop.is_set():
            before = time.monotonic()
            time.sleep(self.NAP)
            after = time.monotonic()
            self.seen.append((after - self.started, max(0.0, after - before - self.NAP)))
            if self.pid is not None:
                self.queued.append((after - self.started, _run_delays(self.pid)))

    def during(self, a: float, b: float) -> float:
        """The longest lag of a nap that overlapped [a, b] (seconds since start), or the
        longest any thread of the command itself waited for a CPU over it, if longer: on a
        crowded box the command's drawing thread may wait where this one did not."""
        naps = max((lag for end, lag in list(self.seen) if a <= end <= b + 2 * self.NAP
                    or end - lag - self.NAP <= b <= end), default=0.0)
        samples = list(self.queued)
        first = next((d for t, d in reversed(samples) if t <= a), None)
        last = next((d for t, d in samples if t >= b), None)
        if first is None or last is None:
            return naps
        return max([naps] + [last[tid] - first.get(tid, 0.0) for tid in last])


def _run_delays(pid: int) -> dict[str, float]:
    """Per thread of process ``pid``: the seconds it has waited runnable for a CPU."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}  # the process ended: the naps alone decide
    return {tid: run_delay_seconds(int(tid), pid) for tid in tids}


def silences(chunks: list[tuple[float, str]], lag: Lag) -> list[float]:
    """Each gap between two drawings, less the machine's lag over it."""
    return [round(b - a - lag.during(a, b), 3)
            for (a, _), (b, _) in zip(chunks, chunks[1:])]


def _run_on_a_terminal(*args: str, lag: Lag | None = None) -> list[tuple[float, str]]:
    """The command's output read from a pseudo-terminal, as (seconds since start, text)."""
    leader, follower = pty.openpty()
    env = dict(os.environ, COLUMNS="110", LINES="40", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    started = time.monotonic()
    if lag is not None:
        lag.started = started
    proc = subprocess.Popen([sys.executable, "-m", "workbook", *args], cwd=ROOT,
                            stdin=follower, stdout=follower, stderr=follower, env=env)
    if lag is not None:
        lag.pid = proc.pid
    os.close(follower)
    chunks = []
    try:
        while time.monotonic() - started < 120:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not data:
                break
            chunks.append((time.monotonic() - started, data.decode("utf-8", "replace")))
    finally:
        proc.kill() if proc.poll() is None else None
        proc.wait(10)
        os.close(leader)
    return chunks


def test_each_checkpoint_ticks_while_the_check_runs_with_a_spinner_on_the_running_one():
    lag = Lag(time.monotonic())
    chunks = _run_on_a_terminal("p01", "--solution", lag=lag)
    lag.stop.set()
    text = "".join(ANSI.sub("", c) for _, c in chunks)
    core = sum(cp.kind == "core" for cp in P01.checkpoints)
    assert f"All {core} core checkpoints passed" in text, text[-2000:]
    assert "importing the file…" in text and "checking…" in text
    titles = [cp.title for cp in P01.checkpoints]
    # A drawing in which the first checkpoint is ticked and the last is still to come:
    # the ticks appear as checkpoints finish, not all at once at the end.
    partial = [c for _, c in chunks if re.search(r"✓\s+" + re.escape(titles[0][:30]),
                                                 ANSI.sub("", c))
               and re.search(r"·\s+" + re.escape(titles[-1][:30]), ANSI.sub("", c))]
    assert partial, text[-3000:]
    # The spinner turns: its frames are redrawn many times during the run.
    assert sum(text.count(s) for s in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏") >= 5
    # The final report is printed once, after the live drawing (which is erased).
    assert text.count("P01 · OutputSink") == 1
    # Never silent: from its first drawing to its report the terminal is redrawn ten times
    # a second (0.11-0.27 s the longest silence at load 11; it was the whole run, 4-9 s).
    # Issue 23's bound, 0.5 s, once what the machine's own lag explains is taken off each
    # gap (raw gaps of 0.54 s and 1.35 s were seen on boxes crowded by the selftest itself;
    # less their lag, 0.21-0.25 s at load 5).
    gaps = silences(chunks, lag)
    print(f"\nfirst output after {chunks[0][0]:.2f} s, longest silence {max(gaps):.3f} s")
    assert max(gaps) < 0.5, gaps


def test_piped_output_is_the_final_report_only():
    out = subprocess.run([sys.executable, "-m", "workbook", "p01", "--solution"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "checking…" not in out.stdout and "importing the file…" not in out.stdout
    assert "\x1b[" not in out.stdout
    assert out.stdout.count("P01 · OutputSink") == 1


def test_repeat_on_a_terminal_turns_a_spinner_through_every_run():
    lag = Lag(time.monotonic())
    chunks = _run_on_a_terminal("p04", "--solution", "--repeat", "2", lag=lag)
    lag.stop.set()
    text = "".join(ANSI.sub("", c) for _, c in chunks)
    assert "0 of 2 runs failed" in text, text[-2000:]
    assert "run 1/2… (0 failed so far)" in text and "run 2/2…" in text, text[-2000:]
    gaps = silences(chunks, lag)
    assert max(gaps) < 0.5, gaps  # never a silent run


def test_the_lag_probe_sees_a_machine_that_stalls_its_threads():
    """The excuse is measured, not assumed: holding the GIL in one C call for a while (a
    stall every thread of this process feels, as a crowded CPU makes) shows as lag."""
    lag = Lag(time.monotonic())
    time.sleep(0.2)
    # Between reading the clock and the C call, the interpreter could hand the GIL to the
    # probe (every switch interval), which would start a nap after ``a``: a long interval
    # keeps it here from ``a`` until this thread sleeps again after ``b``.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        a = time.monotonic() - lag.started
        sum(range(12_000_000))  # one C call: no bytecode runs, so the GIL is never handed over
        b = time.monotonic() - lag.started
    finally:
        sys.setswitchinterval(interval)
    time.sleep(0.2)
    lag.stop.set()
    # A nap that was due during the stall wakes at its end: the probe sees all of a stall
    # but the part before its nap was due, at most one NAP (it saw 0.046 s of a 0.095 s
    # stall when that was asked to be half).
    assert b - a > 2 * Lag.NAP, (a, b)
    assert lag.during(a, b) >= (b - a) - Lag.NAP - 0.005, (a, b, lag.seen)


def test_the_lag_probe_reads_how_long_each_thread_of_the_command_waited_for_a_cpu():
    """The command's own wait for a CPU is read from the kernel (schedstat), per thread."""
    delays = _run_delays(os.getpid())
    assert str(threading.get_native_id()) in delays and all(d >= 0 for d in delays.values())
    assert _run_delays(2 ** 22 + 1) == {}  # no such process: nothing, never an error
    lag = Lag(time.monotonic())
    lag.stop.set()
    lag.queued = [(0.0, {"7": 1.0}), (1.0, {"7": 1.6}), (2.0, {"7": 1.7})]
    assert abs(lag.during(0.2, 0.9) - 0.6) < 1e-9  # between the samples around the gap
