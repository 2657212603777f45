"""P02 exploration, the judgement of one run (``p02.Record``): what no correct Control and
``run`` would have done.  In order: the setup's calls (``Control()``, ``dial()``: a failure
leaves nothing open); calls still waiting at the end (a press, a look or a drain never
waits for good); each press (never blocks, never raises while the control is in use,
``RuntimeError`` once ``run`` has finished with it); each drain (one read of at most 4096
bytes, its count, 0 on EAGAIN, ``ConnectionError`` on EOF); each ``run``
(``p02_runs``); and the control's state explained by some sequential order of the
calls (``oracle.linearize``).
"""
from __future__ import annotations

from typing import Any

from workbook.explore import p02_facts as f
from workbook.explore.oracle import Call, Undecided, linearize
from workbook.explore.p02_runs import runs
from workbook.explore.p02_scenario import BAD_ADDRESSES


def judge(rec: Any) -> str | None:
    for check in (_twice, _setup, _pending, _presses, _drains, _closes, runs, _state):
        problem = check(rec)
        if problem:
            return problem
    return None


def _twice(rec: Any) -> str | None:
    """A raw descriptor closed twice: the root cause of whatever follows (an EBADF, say)."""
    return rec.world.again_sentence(
        rec.sched, "Control.close() after run() has closed its sockets") or None


def _setup(rec: Any) -> str | None:
    for c in rec.calls:
        if c.kind not in ("Control", "dial") or c.ret is None:
            continue
        exc, (injected, _) = f.raised(c), f.injected(rec, c)
        if exc is None:
            if c.kind == "dial":
                if c.args[0] in BAD_ADDRESSES:
                    return f"{c.label} returned a Dial: that address cannot be dialled"
                if not c.meta.get("open"):
                    return f"{c.label} returned {c.outcome[1]!r}: a Dial holding an open socket"
                if c.meta.get("blocking"):
                    return f"{c.label} returned a blocking socket: a dial's socket is non-blocking"
            continue
        if not (c.kind == "dial" and c.args[0] in BAD_ADDRESSES) \
                and not (injected is not None and f.carries(exc, injected)):
            return f"{f.who(c)}'s {c.label} raised {f.err(exc)}"
        left = [r.name for r in rec.world.resources if r.task == 0 and f.within(c, r.opened)
                and (r.closed is None or r.closed > c.ret)]
        if left:
            return (f"{c.label} raised {f.err(exc)} and left {', '.join(left)} open: before "
                    "it raises it closes the socket it made (else the socket waits for the "
                    "garbage collector)")
    return None


def _pending(rec: Any) -> str | None:
    for c in rec.calls:
        if c.ret is not None or c.kind == "run":
            continue
        what = f.waiting_on(rec, c)
        if c.kind in ("press", "presses"):
            return (f"{f.who(c)}'s {c.label} never returned (it waits in {what}): a press "
                    "never blocks, whatever the other threads are doing")
        return f"{f.who(c)}'s {c.label} never returned (it waits in {what})"
    return None


def _presses(rec: Any) -> str | None:
    finish, after = f.finish_steps(rec)
    if f.release_fault(rec):
        after = None
    for c in rec.calls:
        if c.kind not in ("press", "presses") or c.ret is None:
            continue
        label = f"{f.who(c)}'s {c.label}"
        if rec.eof is not None and c.ret > rec.eof:
            continue  # the writer was closed under it: outside the contract
        for w in rec.world.waits:
            if w.task == c.task and w.on is not None and f.within(c, w.start):
                return (f"{label} blocked in {w.what}: a press must never wait -- with a "
                        "non-blocking writer a full buffer raises BlockingIOError, which "
                        "means a wakeup is already pending, so the byte is dropped")
        exc = f.raised(c)
        injected, _ = f.injected(rec, c)
        closed = after if after is not None else f.close_step(rec)
        if exc is None:
            if closed is not None and c.call > closed:
                return (f"{label} returned normally after run() had finished with the "
                        "control: it must raise RuntimeError (nobody reads the control any "
                        "more)")
            continue
        if injected is not None and f.carries(exc, injected):
            continue
        if isinstance(exc, RuntimeError) and not isinstance(exc, NotImplementedError):
            if finish is not None and c.ret > finish:
                continue
            return (f"{label} raised {f.err(exc)} while the control was still in use (run() "
                    "had not finished with it): it raises RuntimeError only after run() is "
                    "over")
        if closed is not None and c.call > closed:
            return (f"{label} raised {f.err(exc)} after run() had finished with the control: "
                    "it must raise RuntimeError")
        return (f"{label} raised {f.err(exc)}: while the control is in use a press never "
                "raises (a full buffer means a wakeup is already pending: drop the byte)")
    return None


def _drains(rec: Any) -> str | None:
    for c in rec.calls:
        if c.kind != "drain" or c.ret is None:
            continue
        reads = [t for t in rec.world.transfers if t.op == "recv" and t.task == c.task
                 and rec.reader is not None and t.resource is rec.reader and f.within(c, t.step)]
        exc, (injected, _) = f.raised(c), f.injected(rec, c)
        if injected is not None and f.carries(exc, injected):
            continue
        eof = any(t.nbytes == 0 for t in reads)
        if eof and not isinstance(exc, ConnectionError):
            got = "returned " + repr(c.outcome[1]) if exc is None else "raised " + f.err(exc)
            return (f"drain() {got} at EOF (the writer end is closed): it raises "
                    "ConnectionError -- treated as empty, the channel stays readable and the "
                    "loop spins")
        if exc is not None:
            if isinstance(exc, ConnectionError) and eof:
                continue
            if isinstance(exc, BlockingIOError):
                return "drain() raised BlockingIOError: EAGAIN means empty -- return 0"
            return f"drain() raised {f.err(exc)}"
        total = sum(t.nbytes for t in reads if t.nbytes > 0)
        if len(reads) > 1:
            return (f"drain() read the control {len(reads)} times in one call: one recv per "
                    "call -- a flood must not starve the loop; the rest is read next round")
        if total > f.DRAIN_CHUNK:
            return f"drain() read {total} bytes in one call: at most {f.DRAIN_CHUNK}"
        if c.outcome[1] != total or isinstance(c.outcome[1], bool):
            return f"drain() returned {c.outcome[1]!r}, but it read {total} byte(s)"
    return None


def _closes(rec: Any) -> str | None:
    for c in rec.calls:
        if c.kind == "close" and c.task != 0 and c.ret is not None:
            exc, (injected, _) = f.raised(c), f.injected(rec, c)
            if exc is not None and not (injected is not None and f.carries(exc, injected)):
                return (f"{f.who(c)}'s control.close() after run() raised {f.err(exc)}: closing "
                        "a closed control is fine")
    return None


def _state(rec: Any) -> str | None:
    run = f.accepted(rec)
    history: list[Call] = []
    for c in rec.calls:
        if c.ret is None:
            continue
        if c.kind in ("press", "presses", "look", "close") and not (c.kind == "close" and c.task == 0):
            history.append(c)
        elif c.kind == "run" and c is not run and c.args[0] != "bad" and not f.invalid_main(rec, c) \
                and not (c.args[0] == "main" and rec.sc.timeout == "True"):
            if isinstance(f.raised(c), f.REFUSALS):
                history.append(Call(c.task, c.label, "refused", (), c.call, c.ret))
    if run is not None:
        waits = [w for w in rec.world.waits if w.task == run.task and f.within(run, w.start)]
        first = min((w.start for w in waits), default=run.ret)
        results = run.outcome[1] if run.outcome[:1] == ("return",) else None
        statuses = [getattr(r, "status", None) for r in results] \
            if isinstance(results, (list, tuple)) else None
        history.append(Call(run.task, "run() takes the control", "claim",
                            (statuses,), run.call, first if first is not None else run.call))
        finish, _ = f.finish_steps(rec)
        if run.ret is not None and not f.release_fault(rec):
            history.append(Call(run.task, "run() finishes with the control", "finish",
                                (statuses,), min(finish or run.call, run.ret), run.ret))
    injected = {id(c) for c in history if f.injected(rec, c)[0] is not None}

    def step(state: tuple, c: Call):
        stopped, phase = state
        exc = f.raised(c) if c.outcome else None
        if c.kind in ("press", "presses"):
            if id(c) in injected or (rec.eof is not None and c.ret > rec.eof):
                yield state
                yield (True, phase)
            elif exc is None:
                if phase < 2:
                    yield (True, phase)
            elif isinstance(exc, RuntimeError):
                # raised once the run was over (``_presses`` checks that), perhaps after
                # storing the state first: whether it did is the order's business
                yield state
                yield (True, phase)
            else:
                yield state
        elif c.kind == "look":
            if exc is not None or bool(c.outcome[1]) == stopped:
                yield state
        elif c.kind == "claim":
            statuses = c.args[0]
            if phase == 0 and not (stopped and statuses
                                   and any(s != "cancelled" for s in statuses)):
                yield (stopped, 1)
        elif c.kind == "finish":
            statuses = c.args[0]
            if phase == 1 and not (statuses and "cancelled" in statuses and not stopped):
                yield (stopped, 2)
        elif c.kind == "refused":  # taken, closed, or (a reading allowed) its writer closed
            if phase != 0 or f.writer_closed_before(rec, c):
                yield state
        elif c.kind == "close":
            yield (stopped, 2)

    try:
        order = linearize(history, (False, 0), step, lambda s, c: True)
    except Undecided:
        return None
    if order is not None:
        return None
    shown = "; ".join(f"{f.who(c)} {c.label} → " + (
        repr(c.outcome[1]) if c.outcome[:1] == ("return",) and c.kind == "look" else
        "returned" if c.outcome[:1] == ("return",) else
        type(c.outcome[1]).__name__ if c.outcome else "done") for c in history)
    return ("no order of these calls on one Control explains what they returned (a press "
            "makes stop_requested true for good; a control serves one run; RuntimeError only "
            f"once the run is over): {shown}")
