"""Acceptance set for P01: exploration.  No scenario here is written for any mistake: the
explorer (workbook/explore, P01's part in ``p01*.py``) runs producer threads and a real
asyncio event loop one thread at a time on a virtual clock -- the loop's select() parks in
the scheduler and the self-pipe write of ``call_soon_threadsafe`` wakes it -- first every
pair of a loop-side call and one producer's puts from five starting states under every
schedule with at most one preemption, then fixed shapes at the edges of each dimension
(stalled calls, stale wakeups, a busy loop, the hook handing its put to another thread,
cancellation, a closed loop, every edge value of ``max_items`` and ``timeout``), then
scenarios drawn by Hypothesis from a fixed seed.  Each run is judged against the contract:
the batches are those of a FIFO queue (each item exactly once, oldest first, 1..max_items,
``[]`` only at the deadline), nobody sleeps while an item waits, nothing waits on the
learner's locks while time passes, at most one wakeup per cycle and ``wakeups_scheduled``
counting them.  The first failing run is shrunk and shown as a per-thread timeline with a
token that replays it.

``WORKBOOK_EXPLORE_SECONDS`` searches longer (``./check.sh p01 --explore SECONDS``, which adds
triples and the remaining pairs at line level); ``WORKBOOK_EXPLORE_REPLAY`` runs the scenario
of one token (``--replay TOKEN``).
"""
from __future__ import annotations

import pytest

from workbook.explore import driver
from workbook.explore import p01 as explorer
from workbook.tuning import EXPLORE_TIMEOUT


@pytest.mark.checkpoint("p01.explore")
@pytest.mark.timeout(EXPLORE_TIMEOUT)
def test_no_explored_schedule_breaks_the_contract(impl):
    driver.check(explorer, impl.__file__)
