"""P01 exploration: the sink between producer threads and an asyncio consumer, run under the
explorer's scheduler and judged against the contract.

One run (``Run``): a setup alone (make the sink, maybe put, bind, look), then the event
loop's thread (a real asyncio loop on the virtual clock, ``p01_loop``) running the
consumer's calls, beside one to three producer threads putting items; at the end the loop's
thread waits for the producers and looks until the sink is empty (or closes the loop and
puts once more).  The scheduler runs one thread at a time and switches at locks, waits,
the clock, the loop's select() and ``call_soon_threadsafe``, and (optionally) the learner's
lines; faults, stale wakeups, stalls and late loop turns come from the scenario.

Whenever no thread can run, before virtual time moves on, the run is looked at
(``p01_judge.idle``): a consumer asleep in select() inside ``get_batch`` while an item put
and returned waits (a lost wakeup); a ``put`` or the loop's thread parked on something of
the learner's (a put that blocks, a deadlock, the hook called holding a lock); a
``get_batch`` still asleep at its deadline.  At the end the history is judged
(``p01_judge.judge``): linearizability against a FIFO of items, batch sizes and types,
``[]`` only at the deadline, exceptions, ``wakeups_scheduled`` against the calls made, at
most one ``call_soon_threadsafe`` per wakeup cycle, and calls through the object given to
``bind_loop``.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from workbook.explore import driver, p01_scenario
from workbook.explore.bounded import Choices
from workbook.explore.driver import Outcome, Report
from workbook.explore.p01_run import PROBLEM, Run
from workbook.explore.p01_scenario import Scenario, candidates, from_data, reseed

DEFAULT_EXAMPLES = 120
DEFAULT_SEED = 1
SCHEDULES = 2

__all__ = ["run", "explore", "replay", "probe", "load", "candidates", "reseed", "from_data",
           "strategy", "systematic", "pairs", "triples"]


# The driver's hooks for the scenarios (P01 has no extensions: the flag is ignored).
def strategy(extensions: bool = True) -> Any:
    return p01_scenario.scenarios()


def systematic(extensions: bool = True) -> list[Scenario]:
    return p01_scenario.systematic()


def pairs(extensions: bool = True) -> list[Scenario]:
    return p01_scenario.pairs()


def triples(extensions: bool = True) -> list[Scenario]:
    return p01_scenario.triples()


def load(path: str | os.PathLike) -> Any:
    return driver.load(path, PROBLEM)


def run(module: Any, sc: Scenario, choices: Choices | None = None) -> Outcome:
    """Run ``sc`` once against ``module`` (a controlled copy, see ``load``) and judge it."""
    if choices is None and sc.script is not None:
        choices = Choices(list(sc.script), sc.bound)
    return Run(module, sc, choices).go()


# ---- exploring (the driver's hooks) -------------------------------------------------------

def probe(module: Any, report: Report) -> bool:
    """Raises the learner's NotImplementedError while the sink is not written yet (and the
    AttributeError the other checkpoints report for a file with no ``OutputSink``, naming
    the learner's module, not the explorer's private copy of it)."""
    if not hasattr(module, "OutputSink"):
        raise AttributeError(f"module {Path(module.__file__).stem!r} has no attribute "
                             "'OutputSink'")
    out = run(module, Scenario([["bind", "running"], ["put", "obj"]],
                               [["get", "default", 0, 0, None]], []))
    driver.core_ran(out, report)
    return True


def explore(path: str | os.PathLike, *, examples: int = DEFAULT_EXAMPLES,
            seed: int = DEFAULT_SEED, seconds: float | None = None) -> Report:
    return driver.explore(sys.modules[__name__], path, examples=examples, seed=seed,
                          seconds=seconds)


def replay(path: str | os.PathLike, text: str) -> Outcome:
    return driver.replay(sys.modules[__name__], path, text)

