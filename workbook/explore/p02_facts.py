"""P02 exploration: the facts the judgement reads off one run (``p02.Record``) -- who made
a call, what it raised, whether a step fell within it, what was injected into it, the
accepted run and its deadline, when the control was finished with -- and the tolerances
the checks of ``p02_judge`` and ``p02_runs`` share."""
from __future__ import annotations

from typing import Any

from workbook.explore.oracle import Call
from workbook.explore.p02_scenario import timeout_value
from workbook.explore.sched import HORIZON, INSTANT

#: Virtual times this close are one instant (each clock reading moves the clock a tick).
EPS = INSTANT
#: A timed wait shorter than this that ends with nothing ready, before any deadline of the
#: run, is the loop waking on a timer of its own (polling).  Long waits cut in pieces (the
#: correct designs' longest single wait is an hour to a week, under epoll's ~24.8 days) are
#: not polling.
POLL_FLOOR = 60.0
DRAIN_CHUNK = 4096
REFUSALS = (TypeError, ValueError)
#: Invalid timeouts run must refuse; "True" reads both ways (refused, or one second).
INVALID_TIMEOUTS = ("-1", "nan", "-inf", "'1'")
#: Calls that let go: a fault there leaves how far the cleanup gets outside the contract.
RELEASE_KINDS = ("close", "unregister")
#: With every step of the loop costing time (``Scenario.slow``), a deadline or a stop may be
#: seen this many steps late: one turn of a loop, however it is written.
SLOW_STEPS = 200


def who(c: Call) -> str:
    return "the setup" if c.task == 0 else f"T{c.task}"


def raised(c: Call) -> BaseException | None:
    return c.outcome[1] if c.outcome[:1] == ("raise",) else None


def err(exc: BaseException) -> str:
    return type(exc).__name__ + (f": {exc}" if str(exc) else "")


def within(c: Call, step: int) -> bool:
    return c.call < step and (c.ret is None or step <= c.ret)


def injected(rec: Any, c: Call) -> tuple[BaseException | None, str]:
    """The exception injected into call ``c`` (inside a wait, or into an OS call it made),
    and the kind of call it was injected into ("" inside a wait)."""
    landed = c.meta.get("injected")
    if landed is not None:
        return landed, ""
    for fault, exc, step in rec.world.injected:
        if fault.task == c.task and within(c, step):
            return exc, fault.kind
    return None, ""


def carries(exc: BaseException | None, target: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 20:
        if exc is target:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def waiting_on(rec: Any, c: Call) -> str:
    task = rec.sched.tasks[c.task]
    return task.waiting_what or "something nobody will ever signal"


def closed_by(rec: Any, c: Call) -> list[str]:
    """Names of what task ``c.task`` closed during ``c``."""
    return [r.name for r in rec.world.resources
            if r.closed is not None and r.closed_by == c.task and within(c, r.closed)
            and r.how != "explorer"]


def deadline(rec: Any, c: Call) -> float | None:
    value = timeout_value(rec.sc.timeout) if c.args[:1] == ("main",) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value != value or value < 0 or value >= HORIZON:  # NaN, refused, or never due
        return None
    return c.call_time + value


def slack(rec: Any) -> float:
    return (float(rec.sc.lag[2]) if rec.sc.lag else 0.0) + rec.sc.slow * SLOW_STEPS


def release_fault(rec: Any) -> bool:
    """A fault landed in a call that lets go (a close, an unregister) of the run: how far
    its cleanup then gets, and so the control's state after it, is not the contract's."""
    run = accepted(rec)
    return run is not None and any(f.kind in RELEASE_KINDS and f.task == run.task
                                   and within(run, step) for f, _, step in rec.world.injected)


def finish_steps(rec: Any) -> tuple[int | None, int | None]:
    """The accepted run's finishing point (after its last wait; its start when it never
    waited), and the step at which it returned."""
    c = accepted(rec)
    if c is None:
        return close_step(rec), close_step(rec)
    waits = [w for w in rec.world.waits if w.task == c.task and within(c, w.start)]
    ends = [w.end for w in waits if w.end is not None]
    finish = max(ends) if ends else c.call
    return (finish if c.ret is not None or ends else None), c.ret


def close_step(rec: Any) -> int | None:
    closes = [c.call for c in rec.calls if c.kind == "close" and c.task != 0]
    return min(closes) if closes else None


def accepted(rec: Any) -> Call | None:
    """The run that took the control (the first valid run that did not refuse)."""
    for c in rec.calls:
        if c.kind == "run" and c.args[0] != "bad" and not invalid_main(rec, c):
            exc = raised(c)
            if exc is None or not isinstance(exc, REFUSALS) \
                    or injected(rec, c)[0] is not None:
                return c
    return None


def invalid_main(rec: Any, c: Call) -> bool:
    return c.args[0] == "main" and rec.sc.timeout in INVALID_TIMEOUTS


def writer_closed_before(rec: Any, c: Call) -> bool:
    """The requester closed the control's writer before ``c`` returned: refusing the control
    then is one reading of "open" the contract allows (meeting its EOF is the other)."""
    return rec.eof is not None and c.ret is not None and rec.eof < c.ret
