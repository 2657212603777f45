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

import pytest

from workbook.explore import driver
from workbook.explore import p03 as explorer
from workbook.tuning import EXPLORE_TIMEOUT


@pytest.mark.checkpoint("p03.explore")
@pytest.mark.timeout(EXPLORE_TIMEOUT)
def test_no_explored_schedule_breaks_the_contract(impl):
    driver.check(explorer, impl.__file__)
