"""The stuck detector's decision: a pure function from what one bounded wait has seen so
far and a new snapshot to what to do (nothing yet, stuck, or end an asyncio bound early).

No clock, no ``/proc``, no frames: everything comes in through the arguments (plain data of
``model``), so the decision is tested with hand-built snapshots (tests/selftest/
test_decide.py).  The rules:

* a **lock cycle** (each thread waits for a Lock that a thread of the cycle holds in a
  ``with`` block) cannot undo itself: two looks with every clock still are proof;
* **all parked**: every thread that could make progress is parked and nothing pending could
  wake one, over ``CONFIRM_LOOKS`` looks spanning ``CONFIRM`` seconds with the same lines
  and no CPU used; a state already judged stuck with the same clock needs no new streak;
* **a hog**: every thread that could still move is a learner thread inside a ``with`` block
  of a lock that parked threads wait to acquire, unchanged for ``HOLD_CONFIRM`` seconds;
* anything not understood counts as "could move": the bound then decides.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from workbook.stuck.model import Snapshot, ThreadLook
from workbook.stuck.procfs import SELECT_CALLS, Call
from workbook.tuning import (CONFIRM, CONFIRM_LOOKS, CYCLE_LOOK, GIL_ASLEEP_SHARE,
                             GIL_HOLDER_RATIO, GIL_SLACK, HOLD_CONFIRM, LOOK_INTERVAL,
                             SPINNING_CPU, SPINNING_SHARE, SPINNING_STEADY, STILL_CPU)


@dataclass(frozen=True)
class Progress:
    """What one bounded wait has seen so far."""
    streak: tuple[Snapshot, ...] = ()  # consecutive snapshots of the same still state
    hog: tuple | None = None  # the hogging state seen at every look since ``hog_at``
    hog_at: float = 0.0


@dataclass(frozen=True)
class Decision:
    """The outcome of one look: the new progress, when to look next and, once confirmed,
    the threads to explain (``kind`` "stuck", or "guard": end ``guard`` early instead)."""
    progress: Progress
    interval: float
    kind: str | None = None  # None | "stuck" | "guard"
    threads: Snapshot | None = None  # what the verdict explains
    header: str = ""  # the verdict's first line, when not "every thread is blocked"
    guard: Any = None
    learned: dict = field(default_factory=dict)  # look key -> CPU clock, judged stuck now


def classify(kstate: str | None, call: Call | None, *, selector: bool = False,
             fds_ready: bool = False, began: float | None = None, deadline: float = 0.0,
             harness_bound: bool = False, learner: bool = False) -> tuple[str, str]:
    """(state, detail) of one thread from what the kernel says (``kstate``, ``call``).

    ``selector``: its innermost frame is a ``selectors`` ``select()`` (which then decides by
    the kernel's timeout, never the frame's locals: ``PollSelector`` holds milliseconds
    there); ``fds_ready``: a fd registered with that selector is ready now; ``began``: when
    the thread (one of the harness's) started, so no call of it is older; ``deadline``: the
    bounded wait's; ``harness_bound``: a timed threading wait called from harness code;
    ``learner``: learner code is on its stack.  An asyncio loop asleep in its selector is
    read by ``observe`` from the loop itself."""
    if kstate != "S" or call is None:
        return "moving", f"kernel state {kstate}"
    if selector and call.name not in SELECT_CALLS:
        # The frames say select() but the kernel says otherwise: it has returned and waits
        # for the GIL (or is about to call it), so it is not asleep.
        return "timed", f"leaving select() ({call.name})"
    if selector:
        if fds_ready:
            return "timed", "a registered fd is ready"
        if call.timed and (call.timeout is None or began is None
                           or began + call.timeout < deadline):
            shown = "?" if call.timeout is None else f"{call.timeout:g}"
            return "timed", f"{call.name}(timeout={shown} s)"
        # Untimed, or (in a thread of ours that began after the call could have) timing
        # out only after the check's bound: nothing this thread waits for can come in time.
        return "asleep", ""
    if call.timed is None:
        return "moving", f"in {call.name}"
    if call.timed and call.ends is not None and call.ends >= deadline:
        # It gives up only after the check's own bound: nothing it does can come in time.
        return "parked", f"a timed {call.name} that ends after the bound"
    if call.timed:
        # A test's own bound (``event.wait(BOUND)`` in a producer of the test) is a
        # deadline, not progress -- unless learner code called it (a hook, a spy): then it
        # returns into learner code that goes on, so it may well be progress.
        return ("bound" if harness_bound and not learner else "timed"), f"a timed {call.name}"
    return "parked", ""


def spins(*, used: float, wanted: float, elapsed: float, moved: int, looks: int,
          slept: int = 0) -> bool:
    """Whether a thread watched for ``elapsed`` seconds spun: it wanted a CPU (``moved``) at
    nearly every one of ``looks`` looks, for a fair share of the time (``wanted``: CPU used
    plus time runnable waiting for one -- on a crowded machine a spinner spends most of its
    time waiting), and it did get some CPU (``used``).  A thread asleep in ``time.sleep`` at
    most looks (``slept``) is slow, not spinning, however long each wake-up waited for a CPU:
    at load 15 a 50 ms sleep loop wants a CPU at every look yet uses almost none."""
    if elapsed <= 0 or looks <= 0 or 2 * slept > looks:
        return False
    return (moved >= SPINNING_STEADY * looks and used >= SPINNING_CPU / 4
            and wanted >= max(SPINNING_SHARE * elapsed, SPINNING_CPU))


def ready_for_python(kstate: str | None, call: Call | None, *, now: float,
                     switch: float) -> bool:
    """Whether a thread whose frames show it inside Python code (not in a blocking call of
    its own: no lock, condition, sleep or selector wait) wants to run Python: it is running
    or runnable, or asleep in the GIL's own wait -- a futex whose deadline is at most one
    switch interval (``switch``) away.  The caller rules out the waits its frames name."""
    if kstate == "R" or (kstate == "S" and call is None):
        return True  # on a CPU, queued for one, or between two system calls
    if kstate != "S" or call is None or call.name != "futex" or not call.timed \
            or call.ends is None:
        return False
    return -GIL_SLACK <= call.ends - now <= switch + GIL_SLACK


def gil_starved(*, ready: int, looks: int, used: float, wanted: float, elapsed: float,
                holder_used: float) -> bool:
    """Whether a thread watched for ``elapsed`` seconds spent it waiting for the GIL: at most
    of ``looks`` looks it was ready to run Python (``ready``), yet it was asleep in the
    kernel (neither on a CPU nor queued for one: ``elapsed - wanted``) for most of the time,
    while another thread held the interpreter (``holder_used`` CPU seconds, several times
    its own ``used``).  A thread starved of *CPU* on a crowded machine is queued, not
    asleep, and is not called this."""
    if looks < 3 or elapsed <= 0 or 2 * ready <= looks:
        return False
    return (elapsed - wanted >= GIL_ASLEEP_SHARE * elapsed and holder_used >= SPINNING_CPU
            and holder_used >= GIL_HOLDER_RATIO * used)


def deadlocked(snap: Snapshot, *, with_only: bool = True) -> Snapshot | None:
    """The threads caught in a lock cycle (each waits for a Lock that a thread of the cycle
    holds, a thread waiting for itself included), with those waiting for a lock of theirs;
    None when there is no cycle.  No timer, fd or callback can free them.

    Only ``with`` blocks count unless ``with_only`` is false: a Lock taken by a bare
    acquire() may be meant to be released by another thread (a hand-made wait queue parks a
    waiter on its own lock that way)."""
    parked = [look for look in snap.looks if look.state == "parked"]
    held = {look.ident: [h.lock for h in look.held if h.with_block or not with_only]
            for look in parked}
    waits: dict[int, list[int]] = {}
    for look in parked:
        if look.waits_for is None:
            continue
        holders = [ident for ident, locks in held.items() if look.waits_for in locks
                   and not (look.waits_reentrant and ident == look.ident)]
        if holders:
            waits[look.ident] = holders
    dead: set[int] = set()
    for start in waits:
        path, node = [], start
        while node in waits and node not in path:
            path.append(node)
            node = waits[node][0]
        if node in path:
            dead.update(path[path.index(node):])
    if not dead:
        return None
    cycle = set(dead)
    changed = True
    while changed:  # threads waiting for a dead thread's lock are dead too
        changed = False
        for ident, holders in waits.items():
            if ident not in dead and any(h in dead for h in holders):
                dead.add(ident)
                changed = True
    found = Snapshot([look for look in snap.looks if look.ident in dead], snap.at)
    found.cycle = cycle
    return found


def hogging(snap: Snapshot) -> tuple[tuple, Snapshot, str] | None:
    """When every thread that could still move is a learner thread inside a ``with`` block of
    a lock that parked threads wait to acquire: (what identifies that state, its threads, a
    header line).  Held on, this is a lock nobody else can get: its holder sleeps or spins on
    a state only the threads it shuts out could change."""
    busy = [look for look in snap.looks if look.state in ("moving", "timed")]
    held = {look.ident: [h for h in look.held if h.with_block] for look in busy}
    if not busy or not all(held.values()):
        return None
    waiting: dict[int, list[ThreadLook]] = {}
    for look in snap.looks:
        if look.state == "parked" and look.waits_for is not None:
            waiting.setdefault(look.waits_for, []).append(look)
    key, involved, header = [], list(busy), []
    for look in busy:
        mine = [h for h in held[look.ident] if h.lock in waiting]
        if not mine:
            return None
        h = mine[0]
        waiters = waiting[h.lock]
        involved += [w for w in waiters if w not in involved]
        key.append((look.ident, h.owner, h.first, h.lock,
                    tuple(sorted((w.ident, w.cpu or 0.0) for w in waiters))))
        header.append(f"thread '{look.name}' keeps `{h.text}` (taken at line {h.first} in "
                      f"{h.where}()) and never lets go, while {len(waiters)} "
                      f"thread(s) wait for it")
    return tuple(key), Snapshot(involved, snap.at), "; ".join(header)


def same(a: Snapshot, b: Snapshot) -> bool:
    """The same threads at the same lines in the same states, no CPU clock moved."""
    if [x.key for x in a.looks] != [y.key for y in b.looks]:
        return False
    for x, y in zip(a.looks, b.looks):
        if x.cpu is None or y.cpu is None or y.cpu - x.cpu > STILL_CPU:
            return False
    return True


def decide(progress: Progress, snap: Snapshot, *, deadline: float,
           known: Mapping[tuple, float], guards: Iterable[Any] = ()) -> Decision:
    """One look's decision.  ``known``: states judged stuck before in this process (look
    key -> CPU clock then); ``guards``: the pending asyncio bounds (``deadline``, ``fired``)
    that could be ended early instead of calling the check stuck."""
    dead = deadlocked(snap)
    hog = hogging(snap) if snap.why and not snap.sooner else None
    streak = progress.streak
    if hog is None or hog[0] != progress.hog:
        hog_key, hog_at = (hog[0] if hog else None), snap.at
    elif snap.at - progress.hog_at >= HOLD_CONFIRM and not snap.children:
        # Not one of the threads shut out ran for a whole second while the same frames
        # kept the lock: a correct holder lets go within microseconds, even on a busy box.
        return Decision(Progress(streak, None, progress.hog_at), LOOK_INTERVAL, "stuck",
                        hog[1], hog[2])
    else:
        hog_key, hog_at = progress.hog, progress.hog_at
    if snap.why:
        if dead is None:
            return Decision(Progress((), hog_key, hog_at), LOOK_INTERVAL)
        snap = dead
    if streak and not same(streak[-1], snap):
        streak = ()
    streak = streak + (snap,)
    seen = bool(snap.looks) and all(
        look.cpu is not None and known.get(look.key) == look.cpu for look in snap.looks)
    # A lock cycle that every thread is in (each waits for a lock a thread of the cycle
    # holds) cannot undo itself: two looks with every clock still are proof enough, and
    # the second need not wait a whole window.
    certain = dead is not None and len(dead.looks) == len(snap.looks)
    interval = CYCLE_LOOK if certain else LOOK_INTERVAL
    looks, span = (2, CYCLE_LOOK * 0.9) if certain else (CONFIRM_LOOKS, CONFIRM)
    if not seen and (len(streak) < looks or snap.at - streak[0].at < span):
        return Decision(Progress(streak, hog_key, hog_at), interval)
    learned = {look.key: look.cpu for look in snap.looks if look.cpu is not None}
    pending = []
    # A sleeping loop with callbacks ready (queued from another thread without waking it)
    # would run them on any wakeup, the bound's own included: firing a bound early would
    # hide the lost wakeup, so the check itself is stuck.
    rescued = any(look.in_loop and look.loop_ready for look in snap.looks)
    if not snap.why and not rescued:
        pending = sorted((g for g in guards if not g.fired and g.deadline < deadline),
                         key=lambda g: g.deadline)
    after = Progress((), hog_key, hog_at)
    if pending:
        return Decision(after, interval, "guard", snap, guard=pending[0], learned=learned)
    return Decision(after, interval, "stuck", snap, learned=learned)
