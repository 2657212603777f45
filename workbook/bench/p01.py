"""P01 benchmark: how much does a wakeup per item cost?

Designs: the reference OutputSink (one wakeup per burst), the per-put wakeup pitfall
(``call_soon_threadsafe`` on every put), ``janus.Queue`` and ``culsans.Queue`` (real
sync -> async queues, optional peers) and the learner's file.

Cases:
* throughput -- 4 producer threads put N items each; one asyncio consumer takes them in
  batches.  Items per second from the start barrier to the last item, and cross-thread
  wakeups per item: calls of ``call_soon_threadsafe`` made by other threads on the
  consumer's loop, counted by the loop itself, so every design is counted the same way.
* ping-pong -- one item at a time: a thread puts, the consumer hands it back through a
  ``queue.SimpleQueue``, the thread waits for it.  The round trip, in microseconds.

The queues are consumed in batches too (one awaited ``get`` then ``get_nowait`` until
empty), so the comparison is about waking, not about one await per item.

    ./check.sh bench p01 [--file PATH] [--json] [--quick] [--reps N]
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
import time
from typing import Any

from workbook import bench, variants

PRODUCERS = 4
MAX_BATCH = 1024


class CountingLoop(asyncio.SelectorEventLoop):
    """An asyncio loop that counts ``call_soon_threadsafe`` calls from other threads."""

    def __init__(self) -> None:
        super().__init__()
        self.owner: int | None = None
        self._calls = itertools.count()  # next() is atomic under the GIL: no lock needed

    def call_soon_threadsafe(self, callback, *args, context=None):
        if threading.get_ident() != self.owner:
            next(self._calls)
        return super().call_soon_threadsafe(callback, *args, context=context)

    def wakeups(self) -> int:
        """Cross-thread calls so far (reading the counter advances it: take it once)."""
        return next(self._calls)


# -- adapters: the same three operations for every design -------------------------------------

class SinkChannel:
    """An OutputSink (reference, pitfall or the learner's)."""

    def __init__(self, module: Any) -> None:
        self.sink = module.OutputSink()
        self.sink.bind_loop()
        self.put = self.sink.put

    async def take(self) -> list:
        return await self.sink.get_batch(MAX_BATCH)

    async def close(self) -> None:
        pass


class QueueChannel:
    """A janus or culsans queue: the sync side for producers, the async side for us."""

    def __init__(self, q: Any, empty: type[BaseException]) -> None:
        self.q, self.empty = q, empty
        self.put = q.sync_q.put
        self._get, self._get_nowait = q.async_q.get, q.async_q.get_nowait

    async def take(self) -> list:
        batch = [await self._get()]
        try:
            while len(batch) < MAX_BATCH:
                batch.append(self._get_nowait())
        except self.empty:
            pass
        return batch

    async def close(self) -> None:
        closing = getattr(self.q, "aclose", None)
        if closing is not None:
            await closing()
            return
        self.q.close()
        await self.q.wait_closed()


def sink_factory(module: Any):
    return lambda: SinkChannel(module)


def janus_factory():
    janus = bench.need("janus")
    return lambda: QueueChannel(janus.Queue(), janus.AsyncQueueEmpty)


def culsans_factory():
    culsans = bench.need("culsans")
    return lambda: QueueChannel(culsans.Queue(), culsans.AsyncQueueEmpty)


def in_loop(scenario, what: str):
    """Run ``scenario(loop)`` to completion on a fresh CountingLoop in a daemon thread."""
    def main():
        loop = CountingLoop()
        asyncio.set_event_loop(loop)
        loop.owner = threading.get_ident()
        try:
            return loop.run_until_complete(scenario(loop))
        finally:
            loop.close()
            asyncio.set_event_loop(None)
    return bench.run_in_thread(main, what=what)


def interrupt(loop: CountingLoop):
    """For a Crew: a failing thread cancels the consumer's task, which is waiting for items
    that will now never come."""
    task = asyncio.current_task()
    return lambda: loop.call_soon_threadsafe(task.cancel)


@contextlib.contextmanager
def reraise(crew: bench.Crew):
    """Turn the consumer's cancellation by ``interrupt`` into the thread's own error."""
    try:
        yield
    except asyncio.CancelledError:
        crew.check()
        raise


# -- the cases ------------------------------------------------------------------------------------

def burst(factory, per_producer: int) -> dict:
    """One run of the scenario on a fresh loop and channel: totals, not rates."""
    total = PRODUCERS * per_producer

    async def scenario(loop: CountingLoop) -> dict:
        channel = factory()
        go = threading.Barrier(PRODUCERS + 1, timeout=bench.LIMIT)

        def produce(tag: int) -> None:
            put = channel.put
            go.wait()
            for i in range(per_producer):
                put((tag, i))

        crew = bench.Crew([lambda p=p: produce(p) for p in range(PRODUCERS)],
                          on_error=interrupt(loop)).start()
        before = loop.wakeups()
        go.wait()  # every producer is at the line: start the clock
        start = time.perf_counter()
        got = 0
        with reraise(crew):
            while got < total:
                got += len(await channel.take())
        elapsed = time.perf_counter() - start
        wakeups = loop.wakeups() - before - 1  # minus the read in `before`
        crew.wait(what="a producer")
        await channel.close()
        return {"seconds": elapsed, "items": total, "wakeups": wakeups}

    return in_loop(scenario, "4 producers -> 1 consumer")


def throughput(factory, per_producer: int, min_seconds: float) -> dict:
    t = bench.sustain(lambda: burst(factory, per_producer), min_seconds)
    return {"items_per_s": t["items"] / t["seconds"], "wakeups_per_item": t["wakeups"] / t["items"]}


def ping_pong(factory, rounds: int) -> dict:
    async def scenario(loop: CountingLoop) -> dict:
        channel = factory()
        back: queue.SimpleQueue = queue.SimpleQueue()
        samples: list[float] = []

        def pinger() -> None:
            put, get = channel.put, back.get
            for i in range(rounds):
                t0 = time.perf_counter()
                put(i)
                get(timeout=bench.LIMIT)
                samples.append(time.perf_counter() - t0)

        crew = bench.Crew([pinger], on_error=interrupt(loop)).start()
        handled = 0
        with reraise(crew):
            while handled < rounds:
                for item in await channel.take():
                    back.put(item)
                    handled += 1
        crew.wait(what="the pinging thread")
        await channel.close()
        return {"round_trip": samples}

    return in_loop(scenario, "ping-pong")


def build(problem, args) -> list[bench.Case]:
    per_producer = 250 if args.quick else 5_000
    min_seconds = 0 if args.quick else 0.25  # fast designs repeat the burst this long
    rounds = 50 if args.quick else 1_000
    designs = [
        bench.file_design(problem.solution_file, "reference", "reference",
                          sink_factory),
        bench.learner_design(problem, args, sink_factory),
        bench.file_design(variants.pitfall_file(problem, "per_put_wakeup"),
                          "pitfall: wakeup per put", "pitfall", sink_factory),
        bench.Design("janus.Queue", "peer", janus_factory),
        bench.Design("culsans.Queue", "peer", culsans_factory),
    ]
    def warm(factory, design):
        throughput(factory, 100, 0)
        ping_pong(factory, 10)
    return [
        bench.Case(
            "throughput", f"{PRODUCERS} producer threads → 1 asyncio consumer "
                          f"(bursts of {PRODUCERS} × {per_producer:,} items)",
            [bench.Metric("items_per_s", "throughput", "items/s", "higher"),
             bench.Metric("wakeups_per_item", "wakeups", "per item", "lower")],
            "items_per_s", designs,
            lambda factory, design: throughput(factory, per_producer, min_seconds),
            note="Wakeups: call_soon_threadsafe calls made by the producer threads on the "
                 "consumer's loop (each one takes a lock and writes to the loop's self-pipe). "
                 "A fast design repeats the burst until it has run for 0.25 s.",
            warmup=warm),
        bench.Case(
            "ping_pong", f"Ping-pong: one item at a time, thread → loop → thread, "
                         f"{rounds:,} round trips",
            [bench.Metric("rt_median", "round trip, median", "µs", "lower",
                          source="round_trip", scale=1e6),
             bench.Metric("rt_p99", "round trip, p99", "µs", "lower",
                          source="round_trip", stat="p99", scale=1e6)],
            "rt_median", designs,
            lambda factory, design: ping_pong(factory, rounds),
            note="The reply goes back through a queue.SimpleQueue for every design."),
    ]


def main(argv: list[str]) -> int:
    return bench.run_bench("p01", argv, build)
