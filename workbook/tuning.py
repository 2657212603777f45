"""Every tuning constant of the harness, with the reason for its value.

One place, so that a reader sees what separates "stuck" from "slow" and a grader's reporter
can guard them all (``workbook.grading.sandbox.reporter``: a threshold raised is a test
weakened).  Where two figures sound alike but mean different things they have different
names.  Nothing here imports anything of the workbook.
"""
from __future__ import annotations

import os

# -- bounds: how long a check waits before it calls something hung -------------------------

#: Seconds every bounded wait of the acceptance sets allows by default: what separates
#: "hung" from "slow" on a busy 2-core machine (a correct call returns in milliseconds;
#: load ~10 stretches that to a few hundred).  ``WORKBOOK_BOUND`` overrides it.
BOUND = float(os.environ.get("WORKBOOK_BOUND", "5"))
#: Seconds per test before pytest-timeout interrupts it: a backstop only, the tests bound
#: their own waits much tighter (several ``BOUND`` fit in it).
TEST_TIMEOUT = 30
#: The same backstop for an exploration checkpoint: its work is thousands of short
#: controlled runs (3 s of CPU for P03's), which a crowded 2-core box can stretch tenfold;
#: a hang there cannot last, since the explorer gives up a run whose thread reaches no
#: controlled point (``explore.outside``: after 1 s, 1 s more tells a blocked one, 3 s of
#: CPU a busy one; 30 s at most).
EXPLORE_TIMEOUT = 100

# -- the stuck detector (workbook/stuck/) ---------------------------------------------------

#: Seconds between two looks of the stuck detector at the process (and between two looks of
#: the watchdog): short enough that a stuck check ends in a fraction of a second, long
#: enough that a look (a frame walk and a few /proc reads) costs a few percent of a CPU.
LOOK_INTERVAL = 0.05
#: Seconds, and consecutive looks, the same all-parked state must stand still before it is
#: called stuck: three looks 50 ms apart with no CPU used rule out a thread that was only
#: descheduled (a runnable thread shows state R, not S, anyway).
CONFIRM = 0.1
CONFIRM_LOOKS = 3
#: Seconds between the looks that confirm a lock cycle every thread is in: a cycle cannot
#: undo itself, so two looks with every clock still are proof; 10 ms keeps that quick.
CYCLE_LOOK = 0.01
#: Seconds a lock must stay held, by the same learner frame, while parked threads wait to
#: acquire it and nothing else moves, before the check is called stuck: a correct holder
#: lets go within microseconds, so a whole second is far beyond scheduling noise.
HOLD_CONFIRM = 1.0
#: CPU seconds a parked thread may show between two looks of the detector: none, in
#: practice (a thread asleep in the kernel does not run); 0.1 ms absorbs clock granularity.
STILL_CPU = 1e-4

# -- the learner file's import (``stuck.importing``) ------------------------------------------

#: Seconds the import of the learner file may run before the watch over it looks for a
#: verdict (spinning, or blocked in the kernel): a correct file imports in milliseconds,
#: even on a busy machine (a third of a second at load 20 on 2 cores), so a whole second
#: is far beyond slowness.  A verdict also needs its evidence: 0.2 s of CPU used at nearly
#: every look (spinning), or three looks asleep in the kernel at the same frame (blocked).
IMPORT_PATIENCE = 1.0
#: Seconds after which an import that is neither clearly spinning nor clearly blocked (a
#: thread starved of CPU on a crowded box) is reported as still running, with its line.
IMPORT_GIVE_UP = 3.0
#: The same patience in a graded run, where many runs share the machine (four jobs per two
#: cores, under every Python): a verdict there costs the submission its points, so only an
#: import still spinning or asleep at one line after five seconds is stopped -- fifteen
#: times the third of a second a correct import took at load 20, and a spinning import
#: still costs 5 s of CPU, not the 30 of the grader's import limit.
GRADED_IMPORT_PATIENCE = 5.0

# -- parked or spinning, seen over an observation window (``testkit.parked``) ---------------

#: Seconds ``testkit.parked`` / ``cpu_used`` watch a thread by default.
PARKED_WINDOW = 0.05
#: CPU a parked thread may use in one such window (wake-up bookkeeping, a spurious wake-up
#: or two).  A spinning Python thread uses far more, even sharing two busy cores.
PARKED_CPU = 0.002
#: CPU seconds a waiting thread must burn through most of a timed-out wait to be reported as
#: spinning (at least this, or 5 % of the wait, whichever is more): a fair share of a CPU
#: even on a crowded machine, far above a parked thread's bookkeeping.
SPINNING_CPU = 0.2
SPINNING_SHARE = 0.05
#: Share of the detector's looks at which a thread's CPU clock must have moved for it to
#: count as spinning (a thread parked most of the time is not).
SPINNING_STEADY = 0.6
#: A thread that wanted to run Python at most looks yet was asleep in the kernel for at
#: least this share of a timed-out wait was waiting for the GIL (CPython's wait for it is a
#: timed futex that ends within one switch interval, ``sys.getswitchinterval()``, 5 ms) --
#: when another thread used at least ``SPINNING_CPU`` meanwhile and four times its CPU.
GIL_ASLEEP_SHARE = 0.5
GIL_HOLDER_RATIO = 4.0
#: Seconds past one switch interval that a GIL wait's deadline may lie (clock reads).
GIL_SLACK = 0.005

# -- P03's queue tests (tests/p03/support.py) -----------------------------------------------

#: One observation window of the P03 tests, in seconds: a thread quiet for one whole window
#: is parked.  Shorter than ``PARKED_WINDOW`` because those tests also count wake-ups: the
#: kernel state (not runnable) and the wake-up count make a short window safe on a busy box.
QUIET_WINDOW = 0.025
#: Wake-ups a parked thread may make in one quiet window (a timed safety-net wait, say).
QUIET_SWITCHES = 2
#: Seconds a thread the kernel shows in a sleep, or in a wait that ends by itself within
#: this time, must stay quiet (every window at rest) before it counts as parked.  One window
#: is not enough there: a thread polling every millisecond, starved of CPU on a crowded box,
#: looked quiet for one 25 ms window (once in five selftests beside the grading battery); for
#: eight in a row it must be starved at each check.  A wait with a safety-net timeout (a
#: Condition.wait(0.05) loop, which a correct queue may use) is quiet in every window and is
#: parked after these 200 ms.  An untimed wait, or one with a long timeout, after one window.
TIMED_QUIET = 8 * QUIET_WINDOW
#: Evidence of spinning or polling in P03: CPU seconds, or wake-ups, used without ever
#: parking.  Correct queues (the reference and five alternates, 45 runs beside two CPU
#: burners) showed at most 5 wake-ups and 0.4 ms of CPU on their way to parking; polling
#: every millisecond reaches 50 in about 60 ms.
SPIN_CPU = 0.1
SPIN_SWITCHES = 50

# -- --watch and the page's "re-run when saved" ---------------------------------------------

#: Milliseconds a watched file must stay unchanged after a save before it is checked: saves
#: closer together than this (an editor's save-all, a formatter rewriting the file just
#: saved) are one check, not one each.  Short enough not to be felt.
WATCH_QUIET_MS = 300
#: The longest a stream of saves is grouped before a check starts anyway (milliseconds).
WATCH_GROUP_MS = 1600
