"""P02 exploration, the judgement of one run (``p02.Record``): what no correct Control and
``run`` would have done.  In order: the setup's calls (``Control()``, ``dial()``: a failure
leaves nothing open); calls still waiting at the end (a press, a look or a drain never
waits for good); each press (never blocks, never raises while the control is in use,
``RuntimeError`` once ``run`` has finished with it); each drain (one read of at most 4096
bytes, its count, 0 on EAGAIN, ``ConnectionError`` on EOF); each ``run`` (invalid input
refused with nothing closed; a control serves one run; results explained by the dials' own
connects, the presses and the deadline; a stop requested before it began cancels every
dial; an injected error propagates; the deadline kept; a cancel seen without the clock
moving; no wait on a timer of its own; at most one drain per wakeup; every socket it owns
unregistered, then closed, and its selector closed; still waiting only when nothing it
waits for has happened); and the control's state explained by some sequential order of the
calls (``oracle.linearize``).
"""
from __future__ import annotations

from typing import Any

from workbook.explore.oracle import Call, Undecided, linearize
from workbook.explore.p02_scenario import BAD_ADDRESSES, timeout_value
from workbook.explore.sched import HORIZON

EPS = 1e-6
#: A timed wait shorter than this that ends with nothing ready, before any deadline of the
#: run, is the loop waking on a timer of its own (polling).  Long waits cut in pieces (the
#: correct designs' longest single wait is an hour to a week, under epoll's ~24.8 days) are
#: not polling.
POLL_FLOOR = 60.0
DRAIN_CHUNK = 4096
REFUSALS = (TypeError, ValueError)
#: Invalid timeouts run must refuse; "True" reads both ways (refused, or one second).
INVALID_TIMEOUTS = ("-1", "nan", "-inf", "'1'")
RELEASE_KINDS = ("close", "unregister")


def judge(rec: Any) -> str | None:
    for check in (_setup, _pending, _presses, _drains, _closes, _runs, _state):
        problem = check(rec)
        if problem:
            return problem
    return None


# ---- helpers -----------------------------------------------------------------------------------

def _who(c: Call) -> str:
    return "the setup" if c.task == 0 else f"T{c.task}"


def _raised(c: Call) -> BaseException | None:
    return c.outcome[1] if c.outcome[:1] == ("raise",) else None


def _err(exc: BaseException) -> str:
    return type(exc).__name__ + (f": {exc}" if str(exc) else "")


def _within(c: Call, step: int) -> bool:
    return c.call < step and (c.ret is None or step <= c.ret)


def _injected(rec: Any, c: Call) -> tuple[BaseException | None, str]:
    """The exception injected into call ``c`` (inside a wait, or into an OS call it made),
    and the kind of call it was injected into ("" inside a wait)."""
    landed = c.meta.get("injected")
    if landed is not None:
        return landed, ""
    for fault, exc, step in rec.world.injected:
        if fault.task == c.task and _within(c, step):
            return exc, fault.kind
    return None, ""


def _carries(exc: BaseException | None, target: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 20:
        if exc is target:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _waiting_on(rec: Any, c: Call) -> str:
    task = rec.sched.tasks[c.task]
    return task.waiting_what or "something nobody will ever signal"


def _closed_by(rec: Any, c: Call) -> list[str]:
    """Names of what task ``c.task`` closed during ``c``."""
    return [r.name for r in rec.world.resources
            if r.closed is not None and r.closed_by == c.task and _within(c, r.closed)
            and r.how != "explorer"]


def _deadline(rec: Any, c: Call) -> float | None:
    value = timeout_value(rec.sc.timeout) if c.args[:1] == ("main",) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value != value or value < 0 or value >= HORIZON:  # NaN, refused, or never due
        return None
    return c.call_time + value


#: With every step of the loop costing time (``Scenario.slow``), a deadline or a stop may be
#: seen this many steps late: one turn of a loop, however it is written.
SLOW_STEPS = 200


def _slack(rec: Any) -> float:
    return (float(rec.sc.lag[2]) if rec.sc.lag else 0.0) + rec.sc.slow * SLOW_STEPS


def _release_fault(rec: Any) -> bool:
    """A fault landed in a call that lets go (a close, an unregister) of the run: how far
    its cleanup then gets, and so the control's state after it, is not the contract's."""
    run = _accepted(rec)
    return run is not None and any(f.kind in RELEASE_KINDS and f.task == run.task
                                   and _within(run, step) for f, _, step in rec.world.injected)


def _presses(rec: Any) -> str | None:
    finish, after = _finish_steps(rec)
    if _release_fault(rec):
        after = None
    for c in rec.calls:
        if c.kind not in ("press", "presses") or c.ret is None:
            continue
        label = f"{_who(c)}'s {c.label}"
        if rec.eof is not None and c.ret > rec.eof:
            continue  # the writer was closed under it: outside the contract
        for w in rec.world.waits:
            if w.task == c.task and w.on is not None and _within(c, w.start):
                return (f"{label} blocked in {w.what}: a press must never wait -- with a "
                        "non-blocking writer a full buffer raises BlockingIOError, which "
                        "means a wakeup is already pending, so the byte is dropped")
        exc = _raised(c)
        injected, _ = _injected(rec, c)
        closed = after if after is not None else _close_step(rec)
        if exc is None:
            if closed is not None and c.call > closed:
                return (f"{label} returned normally after run() had finished with the "
                        "control: it must raise RuntimeError (nobody reads the control any "
                        "more)")
            continue
        if injected is not None and _carries(exc, injected):
            continue
        if isinstance(exc, RuntimeError) and not isinstance(exc, NotImplementedError):
            if finish is not None and c.ret > finish:
                continue
            return (f"{label} raised {_err(exc)} while the control was still in use (run() "
                    "had not finished with it): it raises RuntimeError only after run() is "
                    "over")
        if closed is not None and c.call > closed:
            return (f"{label} raised {_err(exc)} after run() had finished with the control: "
                    "it must raise RuntimeError")
        return (f"{label} raised {_err(exc)}: while the control is in use a press never "
                "raises (a full buffer means a wakeup is already pending: drop the byte)")
    return None


def _finish_steps(rec: Any) -> tuple[int | None, int | None]:
    """The accepted run's finishing point (after its last wait; its start when it never
    waited), and the step at which it returned."""
    c = _accepted(rec)
    if c is None:
        return _close_step(rec), _close_step(rec)
    waits = [w for w in rec.world.waits if w.task == c.task and _within(c, w.start)]
    ends = [w.end for w in waits if w.end is not None]
    finish = max(ends) if ends else c.call
    return (finish if c.ret is not None or ends else None), c.ret


def _close_step(rec: Any) -> int | None:
    closes = [c.call for c in rec.calls if c.kind == "close" and c.task != 0]
    return min(closes) if closes else None


def _accepted(rec: Any) -> Call | None:
    """The run that took the control (the first valid run that did not refuse)."""
    for c in rec.calls:
        if c.kind == "run" and c.args[0] != "bad" and not _invalid_main(rec, c):
            exc = _raised(c)
            if exc is None or not isinstance(exc, REFUSALS) \
                    or _injected(rec, c)[0] is not None:
                return c
    return None


def _invalid_main(rec: Any, c: Call) -> bool:
    return c.args[0] == "main" and rec.sc.timeout in INVALID_TIMEOUTS


# ---- the setup and calls left waiting -----------------------------------------------------------

def _setup(rec: Any) -> str | None:
    for c in rec.calls:
        if c.kind not in ("Control", "dial") or c.ret is None:
            continue
        exc, (injected, _) = _raised(c), _injected(rec, c)
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
                and not (injected is not None and _carries(exc, injected)):
            return f"{_who(c)}'s {c.label} raised {_err(exc)}"
        left = [r.name for r in rec.world.resources if r.task == 0 and _within(c, r.opened)
                and (r.closed is None or r.closed > c.ret)]
        if left:
            return (f"{c.label} raised {_err(exc)} and left {', '.join(left)} open: before "
                    "it raises it closes the socket it made (else the socket waits for the "
                    "garbage collector)")
    return None


def _pending(rec: Any) -> str | None:
    for c in rec.calls:
        if c.ret is not None or c.kind == "run":
            continue
        what = _waiting_on(rec, c)
        if c.kind in ("press", "presses"):
            return (f"{_who(c)}'s {c.label} never returned (it waits in {what}): a press "
                    "never blocks, whatever the other threads are doing")
        return f"{_who(c)}'s {c.label} never returned (it waits in {what})"
    return None


def _drains(rec: Any) -> str | None:
    for c in rec.calls:
        if c.kind != "drain" or c.ret is None:
            continue
        reads = [t for t in rec.world.transfers if t.op == "recv" and t.task == c.task
                 and rec.reader is not None and t.resource is rec.reader and _within(c, t.step)]
        exc, (injected, _) = _raised(c), _injected(rec, c)
        if injected is not None and _carries(exc, injected):
            continue
        eof = any(t.nbytes == 0 for t in reads)
        if eof and not isinstance(exc, ConnectionError):
            got = "returned " + repr(c.outcome[1]) if exc is None else "raised " + _err(exc)
            return (f"drain() {got} at EOF (the writer end is closed): it raises "
                    "ConnectionError -- treated as empty, the channel stays readable and the "
                    "loop spins")
        if exc is not None:
            if isinstance(exc, ConnectionError) and eof:
                continue
            if isinstance(exc, BlockingIOError):
                return "drain() raised BlockingIOError: EAGAIN means empty -- return 0"
            return f"drain() raised {_err(exc)}"
        total = sum(t.nbytes for t in reads if t.nbytes > 0)
        if len(reads) > 1:
            return (f"drain() read the control {len(reads)} times in one call: one recv per "
                    "call -- a flood must not starve the loop; the rest is read next round")
        if total > DRAIN_CHUNK:
            return f"drain() read {total} bytes in one call: at most {DRAIN_CHUNK}"
        if c.outcome[1] != total or isinstance(c.outcome[1], bool):
            return f"drain() returned {c.outcome[1]!r}, but it read {total} byte(s)"
    return None


def _closes(rec: Any) -> str | None:
    for c in rec.calls:
        if c.kind == "close" and c.task != 0 and c.ret is not None:
            exc, (injected, _) = _raised(c), _injected(rec, c)
            if exc is not None and not (injected is not None and _carries(exc, injected)):
                return (f"{_who(c)}'s control.close() after run() raised {_err(exc)}: closing "
                        "a closed control is fine")
    return None


# ---- run ---------------------------------------------------------------------------------------

def _runs(rec: Any) -> str | None:
    accepted = _accepted(rec)
    for c in rec.calls:
        if c.kind != "run":
            continue
        if c.args[0] == "bad" or _invalid_main(rec, c):
            problem = _refused(rec, c, c.args[1] if c.args[0] == "bad"
                               else f"timeout={rec.sc.timeout}")
        elif c is accepted:
            problem = _accepted_run(rec, c)
        else:
            problem = _second(rec, c, accepted)
        if problem:
            return problem
    return None


def _refused(rec: Any, c: Call, what: str) -> str | None:
    exc = _raised(c)
    if c.ret is None:
        return f"run() with {what} never returned: invalid input is refused at once"
    if exc is None:
        return (f"run() accepted {what}: invalid input raises TypeError or ValueError "
                "before run owns anything")
    injected, _ = _injected(rec, c)
    if injected is not None and _carries(exc, injected):
        return None
    if not isinstance(exc, REFUSALS):
        return f"run() with {what} raised {_err(exc)}: invalid input raises TypeError or ValueError"
    closed = _closed_by(rec, c)
    if closed:
        return (f"run() refused {what} but closed {', '.join(closed)}: on invalid input it "
                "closes nothing (ownership stays with the caller)")
    return None


def _second(rec: Any, c: Call, accepted: Call | None) -> str | None:
    """A valid run that did not take the control: it must have found it taken (or closed),
    refused it with ValueError at once, and closed nothing."""
    exc = _raised(c)
    if c.ret is None:
        return (f"{_who(c)}'s {c.label} never returned: a control another run() has taken "
                "is refused at once")
    if not isinstance(exc, REFUSALS):
        return (f"{_who(c)}'s {c.label} ran with a control another run() had taken: a "
                "control serves exactly one run (ValueError)")
    if accepted is not None and accepted.call < c.ret:
        return _refused(rec, c, "a control another run() had taken")
    closed = _close_step(rec)
    if closed is not None and closed < c.ret:
        return _refused(rec, c, "a closed control")
    if c.args[0] == "main" and rec.sc.timeout == "True":
        return _refused(rec, c, "timeout=True")
    return f"run() refused valid arguments: it raised {_err(exc)}"


def _accepted_run(rec: Any, c: Call) -> str | None:
    if c.ret is None:
        return _still_waiting(rec, c)
    exc = _raised(c)
    injected, kind = _injected(rec, c)
    if exc is not None:
        if injected is not None and _carries(exc, injected):
            pass
        elif isinstance(exc, ConnectionError) and rec.eof is not None and rec.eof < c.ret:
            pass
        elif injected is not None:
            return (f"run() raised {_err(exc)} after {type(injected).__name__} was raised "
                    "inside it: the error of the loop must come out of run (after the cleanup)")
        else:
            return f"run() raised {_err(exc)}"
    elif injected is not None and (kind not in RELEASE_KINDS
                                   or not isinstance(injected, Exception)):
        return (f"run() returned normally although {type(injected).__name__} was raised inside "
                f"it{' (in ' + kind + ')' if kind else ''}: an error inside the loop is not "
                "swallowed, run raises it after the cleanup")
    if exc is None:
        problem = _results(rec, c)
        if problem:
            return problem
    for check in (_timely, _no_polling, _drain_per_wakeup):
        problem = check(rec, c)
        if problem:
            return problem
    if injected is None or kind not in RELEASE_KINDS:
        return _released(rec, c)
    return None


def _still_waiting(rec: Any, c: Call) -> str | None:
    presses = [p for p in rec.calls if p.kind in ("press", "presses") and p.ret is not None
               and p.outcome[:1] == ("return",) and _injected(rec, p)[0] is None]
    if presses:
        p = min(presses, key=lambda p: p.ret)
        return (f"run() was still waiting (in {_waiting_on(rec, c)}) although {_who(p)}'s "
                f"{p.label} had returned at {p.ret_time:g} s: the loop missed the stop -- a "
                "thread asleep that could go on")
    dials = c.args[1]
    mine = [d for d in rec.dials + rec.spares if d.obj in dials]
    if all(d.finished is not None for d in mine):
        return (f"run() was still waiting (in {_waiting_on(rec, c)}) although every dial had "
                "finished: it returns when all dials are done")
    if rec.eof is not None:
        return ("run() was still waiting after the control's writer was closed (EOF): it "
                "raises ConnectionError and closes everything")
    deadline = _deadline(rec, c)
    if deadline is not None:
        return (f"run(timeout={rec.sc.timeout}) was still waiting (in {_waiting_on(rec, c)}) "
                f"at {rec.sched.now:g} s, past its deadline: its wait must end at the deadline")
    return None


def _results(rec: Any, c: Call) -> str | None:
    results = c.outcome[1]
    dials = c.args[1]
    if not isinstance(results, (list, tuple)):
        return f"run() returned {results!r}: a list of DialResult, one per dial"
    mine = {id(d.obj): d for d in rec.dials + rec.spares}
    truth = [mine.get(id(d)) for d in dials]
    names = [getattr(r, "name", None) for r in results]
    if names != [d.name for d in dials]:
        return (f"run() returned results for {names}: one DialResult per dial, in the order "
                f"given ({[d.name for d in dials]})")
    pressed = [p for p in rec.calls if p.kind in ("press", "presses") and p.call < c.ret]
    early = [p for p in pressed if p.ret is not None and p.ret < c.call
             and p.outcome[:1] == ("return",)]
    deadline = _deadline(rec, c)
    first_press = min((p.call for p in pressed), default=None)
    labels = set()
    for r, d in zip(results, truth):
        status, error = getattr(r, "status", None), getattr(r, "error", "missing")
        done = d is not None and d.finished is not None and d.finished < c.ret
        seen = _seen_ready(rec, c, d) if done else None
        if seen is not None and status in ("cancelled", "timeout") and (
                (status == "cancelled" and (first_press is None or seen.end < first_press))
                or (status == "timeout" and deadline is not None
                    and seen.end_time < deadline - EPS)):
            why = "any stop was requested" if status == "cancelled" else "the deadline passed"
            return (f"dial {r.name!r} ended {status!r}, though the loop had seen its connect "
                    f"finish ({seen.what} reported it ready) before {why}: finished dials "
                    "keep their status")
        if early and status != "cancelled":
            return (f"a stop was requested before run() began ({_who(early[0])}'s press), yet "
                    f"dial {r.name!r} ended {status!r}: run returns at once, every dial "
                    "'cancelled'")
        if status in ("connected", "failed"):
            if not done:
                return (f"dial {r.name!r} ended {status!r}, but its connect never finished "
                        "before run() returned")
            if status != d.status:
                return f"dial {r.name!r} ended {status!r}, but its connect {d.status}"
            want = d.errno if status == "failed" else None
            if error != want:
                return (f"dial {r.name!r} ({status}) has error={error!r}: it is the errno from "
                        f"SO_ERROR when failed ({want}), None otherwise")
            continue
        labels.add(status)
        if status == "cancelled":
            if not pressed:
                return (f"dial {r.name!r} ended 'cancelled', but nobody requested a stop "
                        "(notification bytes without the state do not stop the run)")
        elif status == "timeout":
            if deadline is None:
                return f"dial {r.name!r} ended 'timeout', but run() had no deadline"
            if c.ret_time < deadline - EPS:
                return (f"dial {r.name!r} ended 'timeout' at {c.ret_time - c.call_time:g} s, "
                        f"before the deadline of {rec.sc.timeout} s")
        else:
            return f"dial {r.name!r} ended {status!r}: not a status"
        if error is not None:
            return f"dial {r.name!r} ({status}) has error={error!r}: None unless failed"
    if len(labels) > 1:
        return (f"unfinished dials ended both {' and '.join(sorted(labels))}: one stop (or "
                "one deadline) ends them all the same way")
    return None


def _seen_ready(rec: Any, c: Call, d: Any) -> Any:
    """The first wait of run ``c`` that reported dial ``d`` ready, if any."""
    r = getattr(getattr(d.obj, "sock", None), "_io_resource", None)
    if r is None:
        return None
    return next((w for w in rec.world.waits if w.task == c.task and _within(c, w.start)
                 and w.end is not None and r.fd in w.ready
                 and (r.closed is None or w.end <= r.closed)), None)


def _timely(rec: Any, c: Call) -> str | None:
    """The deadline kept; a stop seen without the clock moving."""
    slack = _slack(rec)
    deadline = _deadline(rec, c)
    if deadline is not None and c.ret_time > deadline + slack + EPS \
            and _raised(c) is None:
        return (f"run(timeout={rec.sc.timeout}) returned at {c.ret_time - c.call_time:g} s, "
                "after its deadline: the deadline is fixed when run begins and each wait is "
                "for what is left of it")
    presses = [p for p in rec.calls if p.kind in ("press", "presses") and p.ret is not None
               and p.ret < c.ret and p.outcome[:1] == ("return",)
               and _injected(rec, p)[0] is None]
    if presses:
        p = min(presses, key=lambda p: p.ret)
        since = max(p.ret_time, c.call_time)
        if c.ret_time > since + slack + EPS:
            return (f"{_who(p)}'s {p.label} had returned at {p.ret_time:g} s, but run() went "
                    f"on until {c.ret_time:g} s: a stop must wake the loop at once, not when "
                    "a wait times out")
    return None


def _no_polling(rec: Any, c: Call) -> str | None:
    deadline = _deadline(rec, c)
    for w in rec.world.waits:
        if w.task == c.task and _within(c, w.start) and w.ended == "timeout" and w.on is None \
                and w.seconds is not None and w.seconds < POLL_FLOOR \
                and (deadline is None or w.end_time < deadline - EPS):
            return (f"with nothing ready and no deadline due, the loop's {w.what} timed out "
                    f"after {w.seconds:g} s: it wakes on a timer of its own to look at the "
                    "flag instead of sleeping until something is ready (polling)")
    return None


def _drain_per_wakeup(rec: Any, c: Call) -> str | None:
    if rec.reader is None:
        return None
    starts = sorted(w.start for w in rec.world.waits if w.task == c.task and _within(c, w.start)
                    and w.on is None)
    rounds: dict[int, list[int]] = {}
    for t in rec.world.transfers:
        if t.op == "recv" and t.task == c.task and t.resource is rec.reader and _within(c, t.step):
            after = max((s for s in starts if s < t.step), default=-1)
            rounds.setdefault(after, []).append(t.nbytes)
    for reads in rounds.values():
        got = sum(n for n in reads if n > 0)
        if len(reads) > 1 or got > DRAIN_CHUNK:
            times = "once" if len(reads) == 1 else f"{len(reads)} times"
            return (f"the loop read the control {times} ({got} bytes) after one wakeup: "
                    f"drain() once per wakeup, one recv of at most {DRAIN_CHUNK} bytes "
                    "(a flood is read a chunk per round, so it cannot starve the dials)")
    return None


def _released(rec: Any, c: Call) -> str | None:
    """Everything run owned is unregistered, then closed, and its selector closed."""
    how = "returned" if _raised(c) is None else f"raised {type(_raised(c)).__name__}"
    for reg in rec.world.registrations:
        if reg.task == c.task and _within(c, reg.step) and reg.resource is not None:
            if reg.closed_first:
                return (f"{reg.resource.name} was closed while still registered in the "
                        "selector: unregister it first (a closed descriptor number can be "
                        "reused before the selector forgets it)")
            if reg.unregistered is None:
                return (f"{reg.resource.name} was registered but never unregistered when run() "
                        f"{how}: each socket is unregistered before it is closed")
    owned = [io_r for io_r in (rec.reader, rec.writer) if io_r is not None]
    mine = {id(d.obj) for d in rec.dials + rec.spares}
    owned += [d_r for d in c.args[1] if id(d) in mine
              for d_r in [getattr(d.sock, "_io_resource", None)] if d_r is not None]
    owned += [r for r in rec.world.resources if r.task == c.task and _within(c, r.opened)]
    for r in owned:
        if r.kind == "poll":
            continue
        if r.closed is None or r.closed > c.ret:
            what = f"the {r.name} run() made" if r.kind in ("selector", "epoll") else r.name
            return (f"{what} was still open when run() {how}: on return and on any exception "
                    "every socket it owns is closed, and its selector too")
    return None


# ---- the control's state, explained by some order of the calls -----------------------------------

def _state(rec: Any) -> str | None:
    run = _accepted(rec)
    history: list[Call] = []
    for c in rec.calls:
        if c.ret is None:
            continue
        if c.kind in ("press", "presses", "look", "close") and not (c.kind == "close" and c.task == 0):
            history.append(c)
        elif c.kind == "run" and c is not run and c.args[0] != "bad" and not _invalid_main(rec, c) \
                and not (c.args[0] == "main" and rec.sc.timeout == "True"):
            if isinstance(_raised(c), REFUSALS):
                history.append(Call(c.task, c.label, "refused", (), c.call, c.ret))
    if run is not None:
        waits = [w for w in rec.world.waits if w.task == run.task and _within(run, w.start)]
        first = min((w.start for w in waits), default=run.ret)
        results = run.outcome[1] if run.outcome[:1] == ("return",) else None
        statuses = [getattr(r, "status", None) for r in results] \
            if isinstance(results, (list, tuple)) else None
        history.append(Call(run.task, "run() takes the control", "claim",
                            (statuses,), run.call, first if first is not None else run.call))
        finish, _ = _finish_steps(rec)
        if run.ret is not None and not _release_fault(rec):
            history.append(Call(run.task, "run() finishes with the control", "finish",
                                (statuses,), min(finish or run.call, run.ret), run.ret))
    injected = {id(c) for c in history if _injected(rec, c)[0] is not None}

    def step(state: tuple, c: Call):
        stopped, phase = state
        exc = _raised(c) if c.outcome else None
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
        elif c.kind == "refused":
            if phase != 0:
                yield state
        elif c.kind == "close":
            yield (stopped, 2)

    try:
        order = linearize(history, (False, 0), step, lambda s, c: True)
    except Undecided:
        return None
    if order is not None:
        return None
    shown = "; ".join(f"{_who(c)} {c.label} → " + (
        repr(c.outcome[1]) if c.outcome[:1] == ("return",) and c.kind == "look" else
        "returned" if c.outcome[:1] == ("return",) else
        type(c.outcome[1]).__name__ if c.outcome else "done") for c in history)
    return ("no order of these calls on one Control explains what they returned (a press "
            "makes stop_requested true for good; a control serves one run; RuntimeError only "
            f"once the run is over): {shown}")
