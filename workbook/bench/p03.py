"""P03 benchmark: what do two conditions buy over one?

Designs: the reference (one lock, two Conditions, ``notify()``), the learner's file,
``queue.Queue`` (the standard library: one lock, two Conditions too, in Python), and the
one-Condition design that must use ``notify_all()`` to stay correct (the alternate
solution ``solutions/alternates/p03/deque_one_condition.py``).

Case: 4 producer threads and 4 consumer threads move N items through the queue at
capacities 1, 16 and 1024.  Figures: items per second from the start barrier until every
thread is done, and voluntary context switches per item (``getrusage``, the whole
process): each one is a thread that went to sleep, which is what a wasted wakeup costs.

    ./check.sh bench p03 [--file PATH] [--json] [--quick] [--reps N]
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any

from workbook import bench

try:
    import resource
except ImportError:  # not on Windows: the context-switch column stays empty
    resource = None  # type: ignore[assignment]

PRODUCERS = CONSUMERS = 4
CAPACITIES = (1, 16, 1024)


def workbook_queue(module: Any):
    """put/take of a BoundedBlockingQueue (reference, alternate or the learner's)."""
    def make(capacity: int):
        q = module.BoundedBlockingQueue(capacity)
        return q.put, q.take
    return make


def stdlib_queue():
    def make(capacity: int):
        q = queue.Queue(maxsize=capacity)
        return q.put, q.get
    return make


def switches() -> int:
    if resource is None:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def transfer(make, capacity: int, per_thread: int) -> dict:
    """Move PRODUCERS * per_thread items through one queue; time it."""
    def scenario() -> dict:
        put, take = make(capacity)
        go = threading.Barrier(PRODUCERS + CONSUMERS + 1, timeout=bench.LIMIT)

        def produce(tag: int) -> None:
            go.wait()
            for i in range(per_thread):
                put((tag, i))

        def consume() -> None:
            go.wait()
            for _ in range(per_thread):
                take()

        crew = bench.Crew([lambda p=p: produce(p) for p in range(PRODUCERS)]
                          + [consume] * CONSUMERS).start()
        before = switches()
        go.wait()
        start = time.perf_counter()
        crew.wait(what=f"capacity {capacity}: a producer or consumer")
        elapsed = time.perf_counter() - start
        return {"seconds": elapsed, "items": PRODUCERS * per_thread,
                "switches": switches() - before}

    return bench.run_in_thread(scenario, bench.LIMIT + 1, what=f"capacity {capacity}")


def throughput(make, capacity: int, per_thread: int, min_seconds: float) -> dict:
    t = bench.sustain(lambda: transfer(make, capacity, per_thread), min_seconds)
    out = {"items_per_s": t["items"] / t["seconds"]}
    if resource is not None:
        out["switches_per_item"] = t["switches"] / t["items"]
    return out


def build(problem, args) -> list[bench.Case]:
    per_thread = 200 if args.quick else 4_000
    min_seconds = 0 if args.quick else 0.25  # fast designs repeat the transfer this long
    designs = [
        bench.file_design(problem.solution_file, "reference (two Conditions)", "reference",
                          workbook_queue),
        bench.learner_design(problem, args, workbook_queue),
        bench.Design("queue.Queue", "peer", stdlib_queue),
        bench.file_design(problem.alternates_dir / "deque_one_condition.py",
                          "one Condition + notify_all", "design", workbook_queue),
    ]
    metrics = [bench.Metric("items_per_s", "throughput", "items/s", "higher")]
    if resource is not None:
        metrics.append(bench.Metric("switches_per_item", "context switches", "per item",
                                    "lower"))

    def case(capacity: int) -> bench.Case:
        return bench.Case(
            f"capacity_{capacity}",
            f"{PRODUCERS} producers × {CONSUMERS} consumers, capacity {capacity} "
            f"(bursts of {PRODUCERS * per_thread:,} items)",
            metrics, "items_per_s", designs,
            lambda make, design: throughput(make, capacity, per_thread, min_seconds),
            warmup=lambda make, design: transfer(make, capacity, 50))

    cases = [case(c) for c in CAPACITIES]
    cases[-1].note = ("Context switches: voluntary ones (a thread went to sleep), counted "
                      "for the whole process by getrusage. A fast design repeats the "
                      "transfer until it has run for 0.25 s.")
    return cases


def main(argv: list[str]) -> int:
    return bench.run_bench("p03", argv, build)
