"""P03 demo: measure your race -- ``if`` instead of ``while``, and one wait-set with notify().

    ./check.sh demo p03 [race] [-n TRIALS] [--items K] [--switch-interval SECONDS]
    ./check.sh demo p03 gil    (context switches that are only GIL hand-offs)

Two of the chapter's mistakes, run with real threads and nothing forced:

* ``if`` instead of ``while`` (pitfall if_not_while): capacity 1, one producer, three
  consumers.  A consumer woken by ``notify()`` must still retake the lock; if another
  consumer gets there first and takes the item (a stolen wakeup), the ``if`` version reads
  an empty slot.  A trial is bitten when any take returned ``None``.
* one condition for both roles with ``notify()`` (pitfall single_condition_notify):
  capacity 1, two producers, two consumers.  A take can wake another taker instead of the
  waiting putter; when every thread ends up waiting, the queue is stuck.  A trial is bitten
  when the run has not finished within a bound (the demo then wakes everyone to end it).

The queues are the chapter's design in a few lines each, with the one line changed.
"""
from __future__ import annotations

import threading
import time

from workbook.demos import race

BOUND = 0.25  # seconds a trial may take before it counts as stuck (a good one: ~10 ms)


class Ring:
    """Capacity-bounded FIFO; ``use_while``/``two_conditions`` select the right or wrong line."""

    def __init__(self, capacity: int, *, use_while: bool, two_conditions: bool) -> None:
        self.slots: list = [None] * capacity
        self.head = self.tail = self.size = 0
        self.lock = threading.Lock()
        self.not_empty = threading.Condition(self.lock)
        self.not_full = threading.Condition(self.lock) if two_conditions else self.not_empty
        self.use_while = use_while
        self.abort = False  # only to end a stuck trial; not part of the design

    def _wait(self, cond: threading.Condition, blocked) -> None:
        if self.use_while:
            while blocked() and not self.abort:
                cond.wait()
        elif blocked() and not self.abort:  # WRONG: no second look after the wakeup
            cond.wait()

    def put(self, item: object) -> None:
        with self.lock:
            self._wait(self.not_full, lambda: self.size == len(self.slots))
            self.slots[self.tail] = item
            self.tail = (self.tail + 1) % len(self.slots)
            self.size += 1
            self.not_empty.notify()

    def take(self) -> object:
        with self.lock:
            self._wait(self.not_empty, lambda: self.size == 0)
            item, self.slots[self.head] = self.slots[self.head], None
            self.head = (self.head + 1) % len(self.slots)
            self.size -= 1
            self.not_full.notify()
            return item

    def release_everyone(self) -> None:
        with self.lock:
            self.abort = True
            self.not_empty.notify_all()
            self.not_full.notify_all()


def _trial(q: Ring, producers: int, consumers: int, items: int) -> tuple[bool, bool]:
    """Run one trial; return (a take returned None, the trial got stuck)."""
    bad = threading.Event()
    per_consumer = producers * items // consumers

    def produce() -> None:
        for i in range(items):
            if q.abort:
                return
            q.put(i)

    def consume() -> None:
        for _ in range(per_consumer):
            if q.abort:
                return
            if q.take() is None:
                bad.set()

    threads = [threading.Thread(target=produce, daemon=True) for _ in range(producers)]
    threads += [threading.Thread(target=consume, daemon=True) for _ in range(consumers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + BOUND
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = any(t.is_alive() for t in threads)
    while any(t.is_alive() for t in threads):  # end the trial: wake everyone, repeatedly
        q.release_everyone()
        for t in threads:
            t.join(0.01)
    return bad.is_set(), stuck


def stolen(use_while: bool, trials: int, items: int) -> int:
    return sum(_trial(Ring(1, use_while=use_while, two_conditions=True), 1, 3, items * 3)[0]
               for _ in range(trials))


def wrong_role(two_conditions: bool, trials: int, items: int) -> int:
    return sum(_trial(Ring(1, use_while=True, two_conditions=two_conditions), 2, 2, items)[1]
               for _ in range(trials))


def gil_main(argv: list[str]) -> int:
    """Voluntary context switches of threads that never wait for each other."""
    import resource
    console = race.Console(highlight=False)
    total = 20_000_000

    def spin(n: int) -> None:
        x = 0
        for i in range(n):
            x += i

    for k in (1, 8):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        start = time.perf_counter()
        threads = [threading.Thread(target=spin, args=(total // k,)) for _ in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - start
        switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before
        console.print(f"{k} thread(s), pure computation, no queue and no lock of ours: "
                      f"{switches} voluntary context switches in {seconds:.2f} s")
    console.print(f"[dim]{race.machine()}[/dim]")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    if argv and argv[0] == "gil":
        return gil_main(argv[1:])
    if argv and argv[0] == "race":
        argv = argv[1:]
    p = race.parser("check.sh demo p03 race",
                    "Run the stolen-wakeup and wrong-role mistakes unforced; count the "
                    "trials in which they bit.", 200)
    p.add_argument("--items", type=int, default=100, metavar="K",
                   help="items per producer per trial (default 100)")
    args = p.parse_args(argv)
    note = f"{args.items} items per producer per trial, capacity 1"
    race.run("P03 · trials in which a take returned None (1 producer, 3 consumers)",
             [("if (pitfall if_not_while)", lambda n: stolen(False, n, args.items)),
              ("while (reference)", lambda n: stolen(True, n, args.items))],
             args.trials, args.switch_interval, note=note)
    race.run(f"P03 · trials stuck for {BOUND:g} s with every thread waiting "
             "(2 producers, 2 consumers)",
             [("one condition + notify() (pitfall single_condition_notify)",
               lambda n: wrong_role(False, n, args.items)),
              ("two conditions (reference)", lambda n: wrong_role(True, n, args.items))],
             args.trials, args.switch_interval, note=note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
