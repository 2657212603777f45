"""P02 demo: the wakeup probe.

A thread sleeps in ``select()`` on the read end of a socket pair.  We set a
``threading.Event`` and watch for a while: the thread does not move, because nothing it
waits for became ready.  Then we send one byte on the write end: the thread wakes at once,
reads the byte and finds the Event already set.

    ./check.sh demo p02 [--window SECONDS]
    ./check.sh demo p02 race [-n TRIALS] [--switch-interval SECONDS]
    ./check.sh demo p02 facts

``facts`` runs the two small experiments the chapter quotes: what each selector does with a
socket closed before it was unregistered, and what a blocking writer does on a full buffer
with the reader open and then closed.

``race`` measures the other half of the chapter: how often a press that sends the byte
before it sets the Event is lost, with real threads and nothing forced.

The observation window is not a latency guarantee; it only gives the counterexample room
to show itself: a change of state in memory does not wake a wait on sockets.
"""
from __future__ import annotations

import os
import selectors
import socket
import threading
import time

from rich.console import Console

from workbook.demos import race
from workbook.errors import ArgumentParser


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


# -- measure your race: notification before state, unforced -------------------------------

def lost_cancels(state_first: bool, trials: int, bound: float = 0.1) -> int:
    """How many of ``trials`` cancels a loop in select() never observes.

    Each trial: a loop thread sleeps in ``select()`` on the control reader; the requester
    sets the Event and sends one byte, in the order given.  The loop drains, reads the
    Event and either leaves (the cancel was seen) or sleeps again.  A loop that sleeps again
    after the requester has finished lost the cancel for good: nothing else will ever make
    the reader readable.  It is detected by a bounded ``select(bound)`` that times out (even
    though the Event is set by then), and counted.  Nothing forces the interleaving; only the GIL and the scheduler decide.
    """
    lost = 0
    for _ in range(trials):
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        stop = threading.Event()
        asleep = threading.Event()
        outcome: list[str] = []

        def loop() -> None:
            with selectors.DefaultSelector() as sel:
                sel.register(reader, selectors.EVENT_READ)
                asleep.set()
                sel.select()                      # 1. asleep; the byte wakes it
                try:
                    reader.recv(4096)             # 2. drain
                except BlockingIOError:
                    pass
                if stop.is_set():                 # 3. read the state
                    outcome.append("seen")
                    return
                # 4. Back to sleep.  The requester sets the Event a moment later, but
                #    nothing will make the reader readable again: in a real loop this
                #    select() would never return.  The bound only ends the trial.
                ready = sel.select(bound)
                outcome.append("woken again" if ready else "lost")

        t = threading.Thread(target=loop, name="loop", daemon=True)
        t.start()
        asleep.wait(5)
        if state_first:
            stop.set()
            writer.send(b"Q")
        else:
            writer.send(b"Q")                     # WRONG order: notification first
            stop.set()
        t.join(5)
        lost += outcome == ["lost"]
        writer.close()
        reader.close()
    return lost


def race_main(argv: list[str]) -> int:
    args = race.parser("check.sh demo p02 race",
                       "Press Cancel many times with the notification before the state and "
                       "with the state first; count the cancels the loop never saw.",
                       500).parse_args(argv)
    race.run("P02 · cancels lost (the loop drained the byte, read no stop, slept again)",
             [("byte, then Event (pitfall notify_before_state)",
               lambda n: lost_cancels(False, n)),
              ("Event, then byte (reference)", lambda n: lost_cancels(True, n))],
             args.trials, args.switch_interval)
    return 0


# -- facts: the two experiments behind "Who closes what" and "Why both ends are non-blocking"

def close_before_unregister(console: Console) -> None:
    """Close a registered socket first; the next socket reuses its number.  Per selector."""
    for name in ("EpollSelector", "PollSelector", "SelectSelector"):
        cls = getattr(selectors, name, None)
        if cls is None:
            console.print(f"  {name:15} not available here")
            continue
        sel = cls()
        old, old_peer = socket.socketpair()
        sel.register(old, selectors.EVENT_READ, data="old")
        old_fd = old.fileno()
        old.close()                          # WRONG order: closed while registered
        new, new_peer = socket.socketpair()  # the lowest free number: usually old_fd again
        new_peer.send(b"x")                  # the new socket is readable
        events = [key.data for key, _ in sel.select(0.1)]
        try:
            sel.register(new, selectors.EVENT_READ, data="new")
            registered = "register(new) works"
        except KeyError:
            registered = "register(new) raises KeyError"
        reported = f"select() reports the key {events}" if events else "select() reports nothing"
        console.print(f"  {name:15} number reused: {new.fileno() == old_fd}; {reported}; "
                      f"{registered}")
        sel.close()
        for s in (old_peer, new, new_peer):
            s.close()


def blocking_writer(console: Console) -> None:
    """A blocking writer on a full socket pair: with the reader open, then closed."""
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    sent = 0
    try:
        while True:
            writer.send(b"Q")
            sent += 1
    except BlockingIOError:
        pass
    writer.setblocking(True)
    console.print(f"  the buffer is full after {sent} one-byte sends")
    errors: list[str] = []

    def press() -> None:
        try:
            writer.send(b"Q")
            errors.append("no error")
        except OSError as exc:
            errors.append(type(exc).__name__)

    t = threading.Thread(target=press, name="press", daemon=True)
    t.start()
    t.join(0.5)
    console.print(f"  reader open, nobody reads: a blocking send is still waiting after "
                  f"0.5 s: {t.is_alive()}")
    reader.close()
    t.join(2)
    console.print(f"  reader closed: the waiting send returned: {not t.is_alive()} "
                  f"({errors[0] if errors else 'still waiting'})")
    try:
        writer.send(b"Q")
        console.print("  a new send: no error")
    except OSError as exc:
        console.print(f"  a new send: {type(exc).__name__}")
    writer.close()


def facts_main(argv: list[str]) -> int:
    console = Console(highlight=False)
    console.print("[bold]Closing a registered socket before unregistering it[/bold]")
    close_before_unregister(console)
    console.print("[bold]A blocking control writer on a full buffer[/bold]")
    blocking_writer(console)
    console.print(f"[dim]{race.machine()}[/dim]")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    if argv and argv[0] == "race":
        return race_main(argv[1:])
    if argv and argv[0] == "facts":
        return facts_main(argv[1:])
    parser = ArgumentParser(prog="check.sh demo p02",
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
