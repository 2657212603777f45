"""P04 benchmark: what a generator trampoline costs, and what "wake only when empty" saves.

Cases:
* done Futures -- coroutines of 100 yields each, every yield an already-done Future.  The
  Runner must keep going without the loop (and without recursion).  Designs: the
  reference Runner, the learner's, the recursive pitfall (``recursion_on_done``; 100 in a
  row stays below Python's recursion limit), real tornado ``gen.coroutine``, and native
  ``async``/``await`` on a done ``asyncio.Future``.
* moment -- one coroutine that steps aside 20 000 times (``yield moment``,
  ``yield gen.moment``, ``await asyncio.sleep(0)``): each yield is a full turn of the loop.
* cross-thread add_callback -- 4 threads each add N callbacks to a running loop.
  Callbacks per second until the last has run, and waker writes per callback: the
  reference (a write only when the callback list was empty), the ``wake_every_add``
  pitfall (a write every time), and tornado 6's ``IOLoop.add_callback``, which is asyncio's
  ``call_soon_threadsafe`` (a self-pipe write every call; counted by the loop).

    ./check.sh bench p04 [--file PATH] [--json] [--quick] [--reps N]
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from workbook import bench, variants
from workbook.bench.p01 import CountingLoop

PER_COROUTINE = 100
THREADS = 4


class Workbook:
    """A coroutine module of this workbook: the reference, a pitfall or the learner's."""

    def __init__(self, module: Any) -> None:
        self.m = module

    def _on_loop(self, body, what: str):
        """``IOLoop.run_sync(body)`` on a fresh thread (so a fresh IOLoop.current())."""
        def main():
            loop = self.m.IOLoop.current()
            try:
                return loop.run_sync(body, timeout=bench.LIMIT)
            finally:
                loop.close()
        return bench.run_in_thread(main, bench.LIMIT + 1, what=what)

    def done_futures(self, count: int) -> float:
        m = self.m

        @m.coroutine
        def inner(fut):
            total = 0
            for _ in range(PER_COROUTINE):
                total += yield fut
            return total

        def body():
            fut = m.Future()
            fut.set_result(1)
            start = time.perf_counter()
            for _ in range(count):
                result = inner(fut)
            elapsed = time.perf_counter() - start
            if not result.done() or result.result() != PER_COROUTINE:
                raise RuntimeError("a coroutine that yields only done Futures did not finish "
                                   "at once with the sum of their results")
            return elapsed
        return self._on_loop(body, "done Futures")

    def moments(self, n: int) -> float:
        m = self.m

        @m.coroutine
        def spin():
            for _ in range(n):
                yield m.moment
            return time.perf_counter()

        started = []

        def body():
            started.append(time.perf_counter())
            return spin()
        return self._on_loop(body, "yield moment") - started[0]

    def cross_thread(self, per_thread: int) -> dict:
        m = self.m
        total = THREADS * per_thread

        def main() -> dict:
            loop = m.IOLoop.current()
            ran = [0]  # loop thread only
            finished: list[float] = []

            def callback() -> None:
                ran[0] += 1
                if ran[0] == total:
                    finished.append(time.perf_counter())
                    loop.stop()

            go = threading.Barrier(THREADS + 1, timeout=bench.LIMIT)
            box: dict[str, float] = {}

            def produce() -> None:
                add = loop.add_callback
                go.wait()
                for _ in range(per_thread):
                    add(callback)

            def release() -> None:  # on the loop: the loop is running, start the clock
                box["before"] = loop.wakeups_scheduled
                box["start"] = time.perf_counter()
                go.wait()

            # A producer whose add_callback raises stops the loop: nothing else would.
            crew = bench.Crew([produce] * THREADS, on_error=loop.stop).start()
            loop.add_callback(release)
            try:
                loop.start()
            finally:
                loop.close()
            crew.wait(what="a producer")
            return {"seconds": finished[0] - box["start"], "callbacks": total,
                    "writes": loop.wakeups_scheduled - box["before"]}
        return bench.run_in_thread(main, bench.LIMIT + 1, what="cross-thread add_callback")


class Tornado:
    """Real tornado 6: ``gen.coroutine`` on its asyncio-based IOLoop."""

    def __init__(self) -> None:
        self.gen = bench.need("tornado.gen")
        self.ioloop = bench.need("tornado.ioloop")

    def done_futures(self, count: int) -> float:
        gen = self.gen

        @gen.coroutine
        def inner(fut):
            total = 0
            for _ in range(PER_COROUTINE):
                total += yield fut
            return total

        async def main():
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(1)
            start = time.perf_counter()
            for _ in range(count):
                await inner(fut)
            return time.perf_counter() - start
        return bench.run_in_thread(lambda: asyncio.run(main()), what="done Futures")

    def moments(self, n: int) -> float:
        gen = self.gen

        @gen.coroutine
        def spin():
            for _ in range(n):
                yield gen.moment

        async def main():
            start = time.perf_counter()
            await spin()
            return time.perf_counter() - start
        return bench.run_in_thread(lambda: asyncio.run(main()), what="yield gen.moment")

    def cross_thread(self, per_thread: int) -> dict:
        IOLoop = self.ioloop.IOLoop
        total = THREADS * per_thread

        async def scenario(loop: CountingLoop) -> dict:
            io = IOLoop.current()  # tornado's wrapper around the running asyncio loop
            done = loop.create_future()
            ran = [0]

            def callback() -> None:
                ran[0] += 1
                if ran[0] == total:
                    done.set_result(time.perf_counter())

            go = threading.Barrier(THREADS + 1, timeout=bench.LIMIT)

            def produce() -> None:
                add = io.add_callback
                go.wait()
                for _ in range(per_thread):
                    add(callback)

            crew = bench.Crew([produce] * THREADS,
                              on_error=lambda: loop.call_soon_threadsafe(done.cancel)).start()
            before = loop.wakeups()
            start = time.perf_counter()
            go.wait()
            try:
                end = await done
            except asyncio.CancelledError:
                crew.check()
                raise
            wakeups = loop.wakeups() - before - 1
            crew.wait(what="a producer")
            return {"seconds": end - start, "callbacks": total, "writes": wakeups}

        def main():
            loop = CountingLoop()
            asyncio.set_event_loop(loop)
            loop.owner = threading.get_ident()
            try:
                return loop.run_until_complete(scenario(loop))
            finally:
                loop.close()
                asyncio.set_event_loop(None)
        return bench.run_in_thread(main, bench.LIMIT + 1, what="tornado add_callback")


class Native:
    """``async``/``await`` on asyncio, for scale."""

    def done_futures(self, count: int) -> float:
        async def inner(fut):
            total = 0
            for _ in range(PER_COROUTINE):
                total += await fut
            return total

        async def main():
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(1)
            start = time.perf_counter()
            for _ in range(count):
                await inner(fut)
            return time.perf_counter() - start
        return bench.run_in_thread(lambda: asyncio.run(main()), what="done Futures")

    def moments(self, n: int) -> float:
        async def main():
            start = time.perf_counter()
            for _ in range(n):
                await asyncio.sleep(0)
            return time.perf_counter() - start
        return bench.run_in_thread(lambda: asyncio.run(main()), what="asyncio.sleep(0)")


def cross_thread(design, per_thread: int, min_seconds: float) -> dict:
    t = bench.sustain(lambda: design.cross_thread(per_thread), min_seconds)
    return {"callbacks_per_s": t["callbacks"] / t["seconds"],
            "writes_per_callback": t["writes"] / t["callbacks"]}


def build(problem, args) -> list[bench.Case]:
    coroutines = 20 if args.quick else 3_000  # × PER_COROUTINE yields each
    moments = 500 if args.quick else 50_000
    per_thread = 250 if args.quick else 5_000
    min_seconds = 0 if args.quick else 0.25  # fast designs repeat the burst this long

    reference = bench.file_design(problem.solution_file, "reference Runner", "reference",
                                  Workbook)
    yours = bench.learner_design(problem, args, Workbook)
    recursive = bench.file_design(variants.pitfall_file(problem, "recursion_on_done"),
                                  "pitfall: recursion on done Futures", "pitfall", Workbook)
    reference_loop = bench.file_design(problem.solution_file, "reference IOLoop",
                                       "reference", Workbook)
    yours_loop = bench.learner_design(problem, args, Workbook)
    wake_all = bench.file_design(variants.pitfall_file(problem, "wake_every_add"),
                                 "pitfall: wake on every add_callback", "pitfall", Workbook)
    tornado = bench.Design("tornado gen.coroutine", "peer", Tornado)
    native = bench.Design("asyncio async/await", "peer", Native)
    tornado_cb = bench.Design("tornado IOLoop.add_callback", "peer", Tornado)

    yields = coroutines * PER_COROUTINE
    per_yield = [bench.Metric("ns_per_yield", "cost per yield", "ns", "lower")]
    return [
        bench.Case(
            "done_futures", f"Yielding done Futures: {coroutines:,} coroutines × "
                            f"{PER_COROUTINE} yields",
            per_yield, "ns_per_yield", [reference, yours, recursive, tornado, native],
            lambda d, design: {"ns_per_yield": d.done_futures(coroutines) / yields * 1e9},
            note="The recursive pitfall is measured at 100 yields in a row; at 10 000 it "
                 "raises RecursionError.",
            warmup=lambda d, design: d.done_futures(5)),
        bench.Case(
            "moment", f"Stepping aside: {moments:,} × yield moment (one loop turn each)",
            per_yield, "ns_per_yield", [reference, yours, tornado, native],
            lambda d, design: {"ns_per_yield": d.moments(moments) / moments * 1e9},
            note="tornado: yield gen.moment; asyncio: await asyncio.sleep(0).",
            warmup=lambda d, design: d.moments(100)),
        bench.Case(
            "cross_thread", f"Cross-thread add_callback: {THREADS} threads → a running "
                            f"loop (bursts of {THREADS} × {per_thread:,} callbacks)",
            [bench.Metric("callbacks_per_s", "throughput", "callbacks/s", "higher"),
             bench.Metric("writes_per_callback", "waker writes", "per callback", "lower")],
            "callbacks_per_s", [reference_loop, yours_loop, wake_all, tornado_cb],
            lambda d, design: cross_thread(d, per_thread, min_seconds),
            note="Waker writes: wakeups_scheduled for the workbook loops; for tornado, "
                 "call_soon_threadsafe calls from other threads (each writes to asyncio's "
                 "self-pipe). A fast design repeats the burst until it has run for 0.25 s.",
            warmup=lambda d, design: cross_thread(d, 50, 0)),
    ]


def main(argv: list[str]) -> int:
    return bench.run_bench("p04", argv, build)
