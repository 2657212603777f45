"""P01 demo: measure your race -- the single drain, unforced.

    ./check.sh demo p01 [race] [-n ROUNDS] [--switch-interval SECONDS]

A producer thread and an asyncio consumer play ping-pong through a small sink: the thread
puts one item, the consumer takes it and answers through a ``queue.SimpleQueue``, and the
thread puts the next one.  Nothing forces an interleaving.  The single-drain sink loses a
wakeup whenever the put of round k+1 lands after the consumer's empty first drain and before
it arms; that round then waits for its whole timeout.  A round counts as bitten when
``get_batch`` took longer than half its 50 ms timeout.  The correct sink (drain, arm, drain again)
runs the same rounds for comparison.

The sinks here are the chapter's design in a dozen lines each, so that the demo measures the
pattern and not whatever is in ``mine/``.
"""
from __future__ import annotations

import asyncio
import collections
import queue
import random
import threading
import time

from workbook.demos import race

TIMEOUT = 0.05  # a lost wakeup costs one whole timeout; a good round takes microseconds


class Sink:
    """The chapter's OutputSink, reduced to what the race needs."""

    def __init__(self, drain_twice: bool) -> None:
        self.drain_twice = drain_twice
        self.items: collections.deque = collections.deque()
        self.lock = threading.Lock()
        self.in_flight = False
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def put(self, item: object) -> None:
        self.items.append(item)
        with self.lock:
            if self.in_flight:
                return
            self.in_flight = True
        self.loop.call_soon_threadsafe(self.event.set)

    def drain(self) -> list:
        out = []
        while self.items:
            out.append(self.items.popleft())
        return out

    async def get_batch(self, timeout: float) -> list:
        deadline = self.loop.time() + timeout
        while True:
            batch = self.drain()
            if batch:
                return batch
            # <- the window: a put here sees in_flight still True and does not ring
            self.event.clear()
            with self.lock:
                self.in_flight = False
            if self.drain_twice:
                batch = self.drain()
                if batch:
                    return batch
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                return []
            try:
                await asyncio.wait_for(self.event.wait(), remaining)
            except asyncio.TimeoutError:
                pass


def busy(microseconds: float) -> None:
    """Stand-in for the consumer's own work on a batch (pure Python, holds the GIL)."""
    end = time.perf_counter() + microseconds / 1e6
    while time.perf_counter() < end:
        pass


def pingpong(drain_twice: bool, rounds: int, work: float = 0.0, burst: int = 1,
             timeout: float = TIMEOUT) -> int:
    """Rounds bitten: a ``get_batch`` that took over half of ``timeout`` (wall clock), or
    the first one that found nothing at all."""
    async def session() -> int:
        sink = Sink(drain_twice)
        replies: queue.SimpleQueue = queue.SimpleQueue()

        def producer() -> None:
            for i in range(rounds):
                for j in range(burst):
                    sink.put((i, j))
                if replies.get(timeout=5) is None:
                    return

        thread = threading.Thread(target=producer, name="producer", daemon=True)
        thread.start()
        bitten = 0
        try:
            for _ in range(rounds):
                got, late = 0, False
                while got < burst:
                    start = time.perf_counter()
                    batch = await sink.get_batch(timeout)
                    late |= time.perf_counter() - start > timeout / 2
                    if not batch:  # not even the timeout's last look found it: stop
                        return bitten + 1
                    got += len(batch)
                bitten += late
                replies.put(got)
                busy(random.uniform(0, work))  # the producer may run now, and put while we are in get_batch
        finally:
            replies.put(None)
            thread.join(5)
        return bitten

    return asyncio.run(session())


def main(argv: list[str] | None = None) -> int:
    argv = list(argv or [])
    if argv and argv[0] == "race":
        argv = argv[1:]
    p = race.parser("check.sh demo p01 race",
                       "Ping-pong through a single-drain sink and a correct one; count the "
                       "rounds that waited out their timeout.", 2000)
    p.add_argument("--work", type=float, default=0.0, metavar="MICROSECONDS",
                   help="the consumer works up to this long after each reply, a random "
                        "amount each round (default 0)")
    p.add_argument("--burst", type=int, default=1, metavar="K",
                   help="items the producer puts per round before it waits (default 1)")
    args = p.parse_args(argv)
    race.run("P01 · ping-pong rounds that lost their wakeup (waited > 25 ms of a 50 ms timeout)",
             [("single drain (pitfall single_drain)", lambda n: pingpong(False, n, args.work, args.burst)),
              ("drain, arm, drain again (reference)", lambda n: pingpong(True, n, args.work, args.burst))],
             args.trials, args.switch_interval,
             note=f"{args.burst} item(s) per round; consumer work after each reply: "
                  f"0-{args.work:g} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
