"""P02 benchmark: what a wakeup byte buys over polling.

Designs:
* the reference: ``select()`` with no timeout, woken by one byte on the control socket;
* the learner's file;
* the short-timeout polling pitfall, at 10 ms and 100 ms: it still gets the byte (its
  Control is the reference's) but also wakes every POLL seconds to look at the flag;
* the naive fix the chapter starts from: a Control that only sets the flag (the
  ``flag_only`` pitfall) run by the polling loop, at 10 ms and 100 ms.  Here the poll is
  the only way the cancel is noticed.

Cases:
* cancel latency -- ``run()`` waits for one dial that never completes (a loopback listener
  whose accept queue is full); once it is inside ``select()`` and a random part of its
  poll period has passed (the user presses Cancel at any moment), another thread calls
  ``request_stop()``.  From that call until ``run()`` has returned: median and p99.
* idle wakeups -- the same wait with nobody pressing anything: ``select()`` calls per
  second after the first, counted through an instrumented ``selectors.DefaultSelector``.

Only loopback addresses are used.

    ./check.sh bench p02 [--file PATH] [--json] [--quick] [--reps N]
"""
from __future__ import annotations

import random
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from workbook import bench, variants

#: The real selector class, taken before any measurement swaps the name.
_REAL_SELECTOR = selectors.DefaultSelector


@dataclass
class Setup:
    """The parts of one design that a measurement uses."""

    run: Callable
    Control: type
    dial: Callable
    phase: float = 0.02  # a press lands at a random moment this long into the wait


def plain(module: Any) -> Setup:
    return Setup(module.run, module.Control, module.dial)


def polling(problem, poll: float, flag_only: bool) -> Callable[[], Setup]:
    def load() -> Setup:
        loop = bench.load_file(variants.pitfall_file(problem, "short_timeout_polling"))
        if not hasattr(loop, "POLL"):
            raise RuntimeError("short_timeout_polling.py no longer has a POLL setting")
        loop.POLL = poll  # a fresh module per design: each keeps its own interval
        control = loop.Control
        if flag_only:  # this loop's Control (run() accepts only its own), pressed flag-only
            flagged = bench.load_file(variants.pitfall_file(problem, "flag_only")).Control
            control = type("FlagOnlyControl", (loop.Control,),
                           {"request_stop": flagged.request_stop})
        # Without the byte, when the press lands within the poll period decides the latency:
        # spread the presses over a whole period (and over the same 20 ms as the others).
        phase = max(Setup.phase, poll) if flag_only else Setup.phase
        return Setup(loop.run, control, loop.dial, phase)
    return load


# -- loopback endpoint and the instrumented selector ------------------------------------------

class PendingEndpoint:
    """A loopback address whose connects stay in progress: the accept queue is full."""

    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.address = self.listener.getsockname()
        # One finished connect fills a backlog of 0; later SYNs are dropped (and retried).
        self.filler = socket.create_connection(self.address, timeout=bench.LIMIT)

    def close(self) -> None:
        self.filler.close()
        self.listener.close()


_endpoint: PendingEndpoint | None = None


def endpoint() -> PendingEndpoint:
    global _endpoint
    if _endpoint is None:
        _endpoint = PendingEndpoint()
    return _endpoint


class SelectCounter:
    """Installs a ``selectors.DefaultSelector`` that counts ``select()`` calls."""

    def __init__(self) -> None:
        self.cond = threading.Condition()  # guards `entered`; notified on every select()
        self.entered = 0
        counter = self

        class CountingSelector(_REAL_SELECTOR):  # type: ignore[misc, valid-type]
            def select(self, timeout=None):
                with counter.cond:
                    counter.entered += 1
                    counter.cond.notify_all()
                return super().select(timeout)

        self.cls = CountingSelector

    def __enter__(self) -> "SelectCounter":
        selectors.DefaultSelector = self.cls
        return self

    def __exit__(self, *exc) -> None:
        selectors.DefaultSelector = _REAL_SELECTOR

    def count(self) -> int:
        with self.cond:
            return self.entered

    def wait_entered(self, n: int = 1) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: self.entered >= n, bench.LIMIT):
                raise bench.Hung("run() never called select() on a selector made by "
                                 "selectors.DefaultSelector() (the spec asks for that)")


class Waiting:
    """``run()`` over one pending dial, in a daemon thread."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.control = setup.Control()
        dial = setup.dial("stuck", endpoint().address)
        self.returned = threading.Event()
        self.box: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._main, args=([dial],), daemon=True)
        self.thread.start()

    def _main(self, dials) -> None:
        try:
            self.box["results"] = self.setup.run(dials, self.control)
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.box["error"] = exc
        finally:
            self.box["at"] = time.perf_counter()
            self.returned.set()

    def cancel(self) -> float:
        """Request the stop; return the seconds until run() had returned."""
        pressed = time.perf_counter()
        self.control.request_stop()
        if not self.returned.wait(bench.LIMIT):
            raise bench.Hung(f"run() had not returned {bench.LIMIT:g} s after request_stop()")
        if "error" in self.box:
            raise self.box["error"]
        statuses = [r.status for r in self.box["results"]]
        if statuses != ["cancelled"]:
            raise RuntimeError(f"a cancelled run() returned statuses {statuses}")
        return self.box["at"] - pressed


# -- the cases ------------------------------------------------------------------------------------

def cancel_latency(setup: Setup, cancels: int) -> dict:
    def scenario() -> dict:
        samples = []
        for _ in range(cancels):
            with SelectCounter() as counter:
                waiting = Waiting(setup)
                counter.wait_entered()
                # Not a proof of anything: it spreads the press over the poll period.
                time.sleep(random.uniform(0, setup.phase))
                samples.append(waiting.cancel())
        return {"latency": samples}
    return bench.run_in_thread(scenario, bench.LIMIT * 2, what="cancels")


def idle_wakeups(setup: Setup, window: float) -> dict:
    def scenario() -> dict:
        with SelectCounter() as counter:
            waiting = Waiting(setup)
            counter.wait_entered()
            first = counter.count()
            time.sleep(window)  # the observation window: nothing happens in it
            woke = counter.count() - first
            waiting.cancel()
        return {"wakeups_per_s": woke / window}
    return bench.run_in_thread(scenario, bench.LIMIT + window, what="idle wait")


def build(problem, args) -> list[bench.Case]:
    window = 0.1 if args.quick else 0.5

    def count(setup: Setup) -> int:  # fewer presses where each costs a poll period
        if args.quick:
            return 3
        return 60 if setup.phase < 0.05 else 20

    reference = bench.file_design(problem.solution_file, "reference (wakeup byte)",
                                  "reference", plain)
    yours = bench.learner_design(problem, args, plain)
    polled = [bench.Design(f"pitfall: polling every {ms} ms", "pitfall",
                           polling(problem, ms / 1000, flag_only=False),
                           note="also gets the byte")
              for ms in (10, 100)]
    naive = [bench.Design(f"flag only + polling every {ms} ms", "design",
                          polling(problem, ms / 1000, flag_only=True),
                          note="no byte: the poll is the only wakeup")
             for ms in (10, 100)]
    return [
        bench.Case(
            "cancel", "Cancel latency: request_stop() → run() returned",
            [bench.Metric("latency_median", "median", "ms", "lower", source="latency",
                          scale=1e3),
             bench.Metric("latency_p99", "p99", "ms", "lower", source="latency",
                          stat="p99", scale=1e3)],
            "latency_median", [reference, yours, *polled, *naive],
            lambda setup, design: cancel_latency(setup, count(setup)),
            note="Each press comes at a random moment 0-20 ms into the wait (0-100 ms for the "
                 "flag-only 100 ms design, a whole poll period). Presses per repetition: 60, "
                 "or 20 for that design."),
        bench.Case(
            "idle", f"Idle wakeups: select() calls per second while nothing happens "
                    f"({window:g} s window)",
            [bench.Metric("wakeups_per_s", "idle wakeups", "per s", "lower")],
            "wakeups_per_s", [reference, yours, *polled],
            lambda setup, design: idle_wakeups(setup, window),
            note="The reference does not wake at all while idle, so there is no ratio: every "
                 "wakeup of the polling loop is overhead."),
    ]


def main(argv: list[str]) -> int:
    try:
        return bench.run_bench("p02", argv, build, default_reps=3)
    finally:
        if _endpoint is not None:
            _endpoint.close()
