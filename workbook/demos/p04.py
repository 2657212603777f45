"""P04 demos: measure your race (the waker), and the turn order of tornado and the reference.

    ./check.sh demo p04 [race] [-n TRIALS] [--burst K] [--switch-interval SECONDS]
    ./check.sh demo p04 order

``race``: a thread adds a burst of callbacks to a loop that sleeps in ``select()`` between
bursts, then waits (bounded) for the last one to run.  With the emptiness check outside the
lock (pitfall check_outside_lock) the loop can take the list and fall asleep between the
thread's check ("not empty: someone already rang") and its append; the rest of the burst
then sits in the list with nobody ringing.  A trial is bitten when the burst's last callback
had not run within the bound.  The loop here is the chapter's design reduced to callbacks
and a waker, with the one line changed.

``order``: two small programs whose output the chapter quotes, run on the reference and, when
it is installed, on real tornado: where a coroutine resumes relative to ``set_result``, and
whether a ``call_later(0)`` made inside a callback runs in the same turn.
"""
from __future__ import annotations

import functools
import selectors
import socket
import threading

from rich.console import Console

from workbook.demos import race

BOUND = 0.2  # seconds for a burst's last callback to run; a good burst needs microseconds


def _nothing() -> None:
    """A Python-level call: a point where the interpreter may hand the GIL over."""


class Loop:
    """Callbacks and a waker: only the call that finds the list empty writes a byte."""

    def __init__(self, check_under_lock: bool, gap: int = 0) -> None:
        self.check_under_lock = check_under_lock
        self.gap = gap
        self.callbacks: list = []
        self.lock = threading.Lock()
        self.waker_r, self.waker_w = socket.socketpair()
        self.waker_r.setblocking(False)
        self.waker_w.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.waker_r, selectors.EVENT_READ)
        self.stopped = False

    def wake(self) -> None:
        try:
            self.waker_w.send(b"x")
        except BlockingIOError:
            pass

    def add_callback(self, fn) -> None:  # called from the producer thread only
        if self.check_under_lock:
            with self.lock:
                wake = not self.callbacks
                self.callbacks.append(fn)
        else:
            wake = not self.callbacks  # WRONG: the loop may take the list right after this
            for _ in range(self.gap):  # optional: Python calls between check and lock
                _nothing()
            with self.lock:
                self.callbacks.append(fn)
        if wake:
            self.wake()

    def run(self) -> None:
        while not self.stopped:
            with self.lock:
                callbacks, self.callbacks = self.callbacks, []
            for fn in callbacks:
                fn()
            if not self.callbacks:
                self.selector.select(None)  # no timeout: only the waker wakes us
                try:
                    self.waker_r.recv(4096)
                except BlockingIOError:
                    pass

    def close(self) -> None:
        self.stopped = True
        self.wake()


def lost_bursts(check_under_lock: bool, trials: int, burst: int, gap: int = 0) -> int:
    loop = Loop(check_under_lock, gap)
    thread = threading.Thread(target=loop.run, name="loop", daemon=True)
    thread.start()
    lost = 0
    try:
        for _ in range(trials):
            done = threading.Event()
            for _ in range(burst - 1):
                loop.add_callback(int)
            loop.add_callback(done.set)
            if not done.wait(BOUND):
                lost += 1
                loop.wake()  # rescue: ring by hand so that the next trial starts clean
                done.wait(5)
    finally:
        loop.close()
        thread.join(5)
        loop.selector.close()
        loop.waker_r.close()
        loop.waker_w.close()
    return lost


def race_main(argv: list[str]) -> int:
    p = race.parser("check.sh demo p04 race",
                    "Add bursts of callbacks from another thread with the emptiness check "
                    "outside and inside the lock; count the bursts left unrun.", 500)
    p.add_argument("--burst", type=int, default=1000, metavar="K",
                   help="callbacks per burst (default 1000)")
    p.add_argument("--gap", type=int, default=0, metavar="CALLS",
                   help="Python calls the wrong add_callback makes between its check and "
                        "the lock (default 0, as in the pitfall)")
    args = p.parse_args(argv)
    race.run(f"P04 · bursts whose last callback had not run after {BOUND:g} s",
             [("check outside the lock (pitfall check_outside_lock)",
               lambda n: lost_bursts(False, n, args.burst, args.gap)),
              ("check and append under the lock (reference)",
               lambda n: lost_bursts(True, n, args.burst))],
             args.trials, args.switch_interval, note=f"{args.burst} callbacks per burst, gap {args.gap}")
    return 0


# -- order: the two programs the chapter quotes -------------------------------------------

def _asyn_sum(api) -> list[str]:
    IOLoop, Future, coroutine = api
    out: list[str] = []

    @coroutine
    def asyn_sum(a, b):
        out.append("begin")
        future = Future()

        def callback(a, b):
            out.append("calculating")
            future.set_result(a + b)
            out.append("set_result returned")

        IOLoop.current().add_callback(callback, a, b)
        yield future
        out.append("after yielded")

    @coroutine
    def main():
        yield asyn_sum(2, 3)

    IOLoop.current().run_sync(main)
    return out


def _later_zero(api) -> list[str]:
    IOLoop = api[0]
    io = IOLoop.current()
    out: list[str] = []

    def first():
        out.append("A")
        io.call_later(0, functools.partial(out.append, "call_later(0)"))
        io.add_callback(functools.partial(out.append, "add_callback"))
        io.add_callback(io.stop)

    io.add_callback(first)
    io.start()
    return out


def order_main(argv: list[str]) -> int:
    console = Console(highlight=False)
    apis = []
    from solutions import p04_coroutine_runner as ref
    apis.append(("reference", (ref.IOLoop, ref.Future, ref.coroutine)))
    try:
        import tornado
        from tornado import concurrent, gen, ioloop
        apis.append((f"tornado {tornado.version}",
                     (ioloop.IOLoop, concurrent.Future, gen.coroutine)))
    except ImportError:
        console.print("[dim]tornado is not installed: only the reference runs "
                      "(pip install tornado, or the project's dev extra)[/dim]")
    for name, api in apis:
        console.print(f"[bold]{name}[/bold]")
        console.print("  asyn_sum:  " + ", ".join(_run_fresh(_asyn_sum, api)))
        console.print("  callback A adds call_later(0) and add_callback: "
                      + ", ".join(_run_fresh(_later_zero, api)))
    console.print("\n'set_result returned' before 'after yielded': the coroutine resumes on "
                  "a later turn, not inside set_result.\n'add_callback' before "
                  "'call_later(0)': the timeout did not run in the turn that added it.")
    return 0


def _run_fresh(program, api) -> list[str]:
    """Each program on a fresh thread, so that IOLoop.current() is a new loop."""
    result: list = []
    t = threading.Thread(target=lambda: result.append(program(api)), daemon=True)
    t.start()
    t.join(10)
    return result[0] if result else ["(did not finish in 10 s)"]


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    if argv and argv[0] == "order":
        return order_main(argv[1:])
    if argv and argv[0] == "race":
        argv = argv[1:]
    return race_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
