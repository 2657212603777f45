"""Acceptance set for P04: exploration.  No scenario here is written for any mistake: the
explorer (workbook/explore, p04*) runs small programs -- main as a coroutine or a plain
function under run_sync, callbacks that do one more thing when they run, timeouts with every
edge value (0, negative, NaN, inf, past select's 24.8 days), Futures completed twice, multis,
bad yields, exceptions of every kind, other threads calling add_callback, a second run_sync,
close, IOLoop.current() on every thread, faults in the loop's OS calls -- on real threads one
at a time under a virtual clock, with the loop really sleeping in its selector and really
woken by its waker, from every starting state under every schedule with one preemption and
then drawn from a fixed seed.  Each run is compared event by event with a model of the
contract (p04_model): the same program's events in the same order, one sleep per turn and
never with work pending, no lost wakeup, waker writes only when the list was empty and each
one counted, every descriptor closed, every callback let go once it has run.  The first
failing program is shrunk and shown as a per-thread timeline with a token that replays it.

``WORKBOOK_EXPLORE_SECONDS`` searches longer (``./check.sh p04 --explore SECONDS``, which
also runs every triple of calls); ``WORKBOOK_EXPLORE_SEED`` draws other programs
(``--seed N``); ``WORKBOOK_EXPLORE_REPLAY`` runs the program of one token (``--replay TOKEN``).
"""
from __future__ import annotations

import pytest

from workbook.explore import driver
from workbook.explore import p04 as explorer
from workbook.tuning import EXPLORE_TIMEOUT


@pytest.mark.checkpoint("p04.explore")
@pytest.mark.timeout(EXPLORE_TIMEOUT)
def test_no_explored_program_or_schedule_breaks_the_contract(impl):
    driver.check(explorer, impl.__file__)
