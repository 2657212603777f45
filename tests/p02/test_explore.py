"""Acceptance set for P02: exploration.  No scenario here is written for any mistake: the
explorer (workbook/explore/p02*.py on top of the controlled I/O of workbook/explore/io)
draws small scenarios from a fixed seed -- a Control, dials that connect, are refused or
never answer (some finished by another thread at a chosen moment), presses from other
threads and from a signal handler, stray notification bytes, EOF, a second run, invalid
arguments, faults in the OS calls, time passing and the wall clock jumping -- runs each with
one thread at a time under a virtual clock, and judges it against the contract: the
control's answers explained by some order of the calls, every dial's result by what its
connect did, the deadline kept, a cancel seen at once, no polling, one bounded drain per
wakeup, nobody asleep who could go on, every socket unregistered, then closed.  The first
failing scenario is shrunk and shown as a per-thread timeline with a token that replays it.

``WORKBOOK_EXPLORE_SECONDS`` searches longer (``./check.sh p02 --explore SECONDS``);
``WORKBOOK_EXPLORE_REPLAY`` runs the scenario of one token (``--replay TOKEN``).
"""
from __future__ import annotations

import pytest

from workbook.explore import driver
from workbook.explore import p02 as explorer
from workbook.tuning import EXPLORE_TIMEOUT


@pytest.mark.checkpoint("p02.explore")
@pytest.mark.timeout(EXPLORE_TIMEOUT)
def test_no_explored_schedule_breaks_the_contract(impl):
    driver.check(explorer, impl.__file__)
