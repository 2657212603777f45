"""On a terminal the checklist is drawn while the check runs (issue 23.1): a spinner on the
running checkpoint, each one ticked as it finishes; piped output stays the final report."""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

from workbook import ROOT, manifest

P01 = manifest.get("p01")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _run_on_a_terminal(*args: str) -> list[tuple[float, str]]:
    """The command's output read from a pseudo-terminal, as (seconds since start, text)."""
    leader, follower = pty.openpty()
    env = dict(os.environ, COLUMNS="110", LINES="40", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "workbook", *args], cwd=ROOT,
                            stdin=follower, stdout=follower, stderr=follower, env=env)
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
    chunks = _run_on_a_terminal("p01", "--solution")
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
    # The bound leaves room for a box crowded by the selftest itself (0.54 s seen once).
    stamps = [t for t, _ in chunks]
    silence = max(b - a for a, b in zip(stamps, stamps[1:]))
    print(f"\nfirst output after {stamps[0]:.2f} s, longest silence {silence:.3f} s")
    assert silence < 1.0, [round(b - a, 3) for a, b in zip(stamps, stamps[1:])]


def test_piped_output_is_the_final_report_only():
    out = subprocess.run([sys.executable, "-m", "workbook", "p01", "--solution"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "checking…" not in out.stdout and "importing the file…" not in out.stdout
    assert "\x1b[" not in out.stdout
    assert out.stdout.count("P01 · OutputSink") == 1


def test_repeat_on_a_terminal_turns_a_spinner_through_every_run():
    chunks = _run_on_a_terminal("p04", "--solution", "--repeat", "2")
    text = "".join(ANSI.sub("", c) for _, c in chunks)
    assert "0 of 2 runs failed" in text, text[-2000:]
    assert "run 1/2… (0 failed so far)" in text and "run 2/2…" in text, text[-2000:]
    stamps = [t for t, _ in chunks]
    assert max(b - a for a, b in zip(stamps, stamps[1:])) < 1.0  # never a silent run
