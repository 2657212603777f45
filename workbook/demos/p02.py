"""P02 demo: the wakeup probe.

A thread sleeps in ``select()`` on the read end of a socket pair.  We set a
``threading.Event`` and watch for a while: the thread does not move, because nothing it
waits for became ready.  Then we send one byte on the write end: the thread wakes at once,
reads the byte and finds the Event already set.

    ./check.sh demo p02 [--window SECONDS]

The observation window is not a latency guarantee; it only gives the counterexample room
to show itself: a change of state in memory does not wake a wait on sockets.
"""
from __future__ import annotations

import argparse
import os
import selectors
import socket
import threading
import time

from rich.console import Console


def _kernel_wait(native_id: int | None) -> str:
    """What /proc says the thread is doing: its state letter and kernel wait channel."""
    if native_id is None:
        return "unknown"
    base = f"/proc/self/task/{native_id}"
    try:
        with open(f"{base}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "unknown (no /proc)"
    try:
        with open(f"{base}/wchan") as f:
            wchan = f.read().strip()
    except OSError:
        wchan = ""
    label = {"S": "sleeping", "R": "running", "D": "uninterruptible"}.get(state, state)
    return f"{label}" + (f" in {wchan}" if wchan and wchan != "0" else "")


def probe(window: float, console: Console) -> bool:
    """Run the probe once; True if it behaved as the chapter says."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    stop = threading.Event()         # the state; nobody waits on it
    entering = threading.Event()     # set by the sleeper just before it calls select()
    woke = {}                        # written by the sleeper once, read after join()

    def sleeper() -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(reader, selectors.EVENT_READ)
            entering.set()
            ready = sel.select()     # no timeout: it returns only when something is ready
            woke["at"] = time.perf_counter()
            woke["events"] = len(ready)
            woke["saw_stop"] = stop.is_set()
            woke["drained"] = len(reader.recv(4096))
            sel.unregister(reader)

    t = threading.Thread(target=sleeper, name="sleeper", daemon=True)
    try:
        t.start()
        if not entering.wait(5):
            console.print("the sleeper thread did not start")
            return False
        # Let /proc confirm it is parked in the kernel (bounded; the demo only reports it).
        deadline = time.monotonic() + 2
        while not _kernel_wait(t.native_id).startswith("sleeping") and time.monotonic() < deadline:
            time.sleep(0.001)
        console.print(f"1. sleeper thread calls select() on the control reader: "
                      f"[bold]{_kernel_wait(t.native_id)}[/bold]")

        stop.set()
        console.print("2. main thread: [cyan]stop.set()[/cyan]  (state written)")
        t.join(window)
        still = t.is_alive()
        console.print(f"3. after {window * 1e3:.0f} ms the sleeper is "
                      + ("[bold red]still inside select()[/bold red] "
                         f"({_kernel_wait(t.native_id)}): the Event woke nobody"
                         if still else "[bold]awake[/bold] (unexpected!)"))

        sent_at = time.perf_counter()
        writer.send(b"Q")
        console.print("4. main thread: [cyan]writer.send(b'Q')[/cyan]  (notification)")
        t.join(5)
        if t.is_alive():
            console.print("5. the sleeper did not wake on the byte (unexpected!)")
            return False
        latency = (woke["at"] - sent_at) * 1e3
        console.print(f"5. sleeper woke {latency:.3f} ms after the byte: {woke['events']} "
                      f"ready event, drained {woke['drained']} byte, "
                      f"stop_requested = [bold]{woke['saw_stop']}[/bold]")
        ok = still and woke["saw_stop"]
        console.print()
        console.print("State alone never wakes a thread that waits on sockets; the byte does, "
                      "and because the state was written first, the woken loop sees it."
                      if ok else "[red]The probe did not behave as expected.[/red]")
        return ok
    finally:
        if t.is_alive():           # never leave the sleeper parked on a closed socket
            try:
                writer.send(b"Q")
            except OSError:
                pass
            t.join(1)
        writer.close()
        reader.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="check.sh demo p02",
                                     description="Watch a thread in select() ignore an "
                                                 "Event and wake on one control byte.")
    parser.add_argument("--window", type=float, default=0.5,
                        help="how long to watch after Event.set() (seconds, default 0.5)")
    args = parser.parse_args(argv or [])
    console = Console(highlight=False)
    console.print(f"[bold]P02 wakeup probe[/bold] (pid {os.getpid()})\n")
    return 0 if probe(max(0.05, args.window), console) else 1


if __name__ == "__main__":
    raise SystemExit(main())
