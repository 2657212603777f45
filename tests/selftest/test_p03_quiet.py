"""Which kernel waits make the P03 tests look longer before calling a thread parked
(``tests/p03/support._ends_soon``): a sleep, or a wait that ends by itself within
``TIMED_QUIET``; never an untimed wait, a long timeout or a call the kernel cannot show."""
from __future__ import annotations

import time

from tests.p03.support import _ends_soon
from workbook.stuck.procfs import Call
from workbook.tuning import TIMED_QUIET


def test_a_sleep_ends_soon_whatever_its_length():
    assert _ends_soon(Call("clock_nanosleep", True, time.monotonic() + 3600))
    assert _ends_soon(Call("nanosleep", True, None, 0.001))


def test_a_timed_wait_ends_soon_only_within_timed_quiet():
    now = time.monotonic()
    assert _ends_soon(Call("futex", True, now + TIMED_QUIET / 4))
    assert not _ends_soon(Call("futex", True, now + 4 * TIMED_QUIET))
    assert _ends_soon(Call("futex", True, None, TIMED_QUIET / 4))
    assert not _ends_soon(Call("futex", True, None, 60.0))


def test_untimed_unknown_and_unreadable_waits_are_long():
    assert not _ends_soon(Call("futex", False, None))
    assert not _ends_soon(Call("futex", None, None))
    assert not _ends_soon(Call("futex", True, None, None))  # its end is not readable
    assert not _ends_soon(None)
