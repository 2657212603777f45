"""Acceptance set for P03: exploration.  No scenario here is written for any mistake: the
explorer (workbook/explore) draws a fixed set of small concurrent scenarios from a fixed
seed -- capacity 1 or 2, items preloaded, 2-3 threads × 1-3 calls with edge values and
timeouts, both kinds of shutdown, exceptions and spurious wake-ups inside waits -- runs each
one thread at a time under a virtual clock, and checks the results against a sequential
model of the queue (linearizability), that nobody sleeps who could go on, that deadlines are
kept and that taken items are not kept alive.  The first failing scenario is shrunk and
shown as a per-thread timeline with a token that replays it.

``WORKBOOK_EXPLORE_SECONDS`` searches longer than the default set (``./check.sh p03
--explore SECONDS``); ``WORKBOOK_EXPLORE_REPLAY`` runs the scenario of one token
(``--replay TOKEN``).
"""
from __future__ import annotations

import os

import pytest

from workbook.explore import p03 as explorer
from workbook.testkit import fail, note


@pytest.mark.checkpoint("p03.explore")
def test_no_explored_schedule_breaks_the_contract(impl):
    token = os.environ.get("WORKBOOK_EXPLORE_REPLAY", "").strip()
    if token:
        outcome = explorer.replay(impl.__file__, token)
        if outcome.error is not None:
            raise outcome.error
        if outcome.problem:
            fail(outcome.message())
        note("the replayed scenario ran and broke nothing: " + outcome.scenario.describe())
        return
    seconds = float(os.environ.get("WORKBOOK_EXPLORE_SECONDS") or 0) or None
    report = explorer.explore(impl.__file__, seconds=seconds)
    if report.found is not None:
        fail(report.found.message())
    if report.uncontrolled:
        note("exploration stopped early: " + report.uncontrolled +
             " (a primitive outside threading/time, such as a ready-made queue?)")
    else:
        note(f"explored {report.runs} scenarios in {report.seconds:.1f} s: none breaks the contract")
