"""P02 exploration, the judgement of each ``run()`` call of one run: invalid input refused
with nothing closed; a control serves one run; results explained by the dials' own connects,
the presses and the deadline (a dial the loop had seen finish keeps its status); a stop
requested before it began cancels every dial; an injected error comes out of it; the
deadline kept; a cancel seen without the clock moving; no wait on a timer of its own; at
most one drain per wakeup; every socket it owns unregistered, then closed, its selector
closed; still waiting only when nothing it waits for has happened."""
from __future__ import annotations

from typing import Any

from workbook.explore import p02_facts as f
from workbook.explore.oracle import Call


def runs(rec: Any) -> str | None:
    accepted = f.accepted(rec)
    for c in rec.calls:
        if c.kind != "run":
            continue
        if c.args[0] == "bad" or f.invalid_main(rec, c):
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
    exc = f.raised(c)
    if c.ret is None:
        return f"run() with {what} never returned: invalid input is refused at once"
    if exc is None:
        return (f"run() accepted {what}: invalid input raises TypeError or ValueError "
                "before run owns anything")
    injected, _ = f.injected(rec, c)
    if injected is not None and f.carries(exc, injected):
        return None
    if not isinstance(exc, f.REFUSALS):
        return f"run() with {what} raised {f.err(exc)}: invalid input raises TypeError or ValueError"
    closed = f.closed_by(rec, c)
    if closed:
        return (f"run() refused {what} but closed {', '.join(closed)}: on invalid input it "
                "closes nothing (ownership stays with the caller)")
    return None


def _second(rec: Any, c: Call, accepted: Call | None) -> str | None:
    """A valid run that did not take the control: it must have found it taken (or closed),
    refused it with ValueError at once, and closed nothing."""
    exc = f.raised(c)
    if c.ret is None:
        return (f"{f.who(c)}'s {c.label} never returned: a control another run() has taken "
                "is refused at once")
    if not isinstance(exc, f.REFUSALS):
        return (f"{f.who(c)}'s {c.label} ran with a control another run() had taken: a "
                "control serves exactly one run (ValueError)")
    if accepted is not None and accepted.call < c.ret:
        return _refused(rec, c, "a control another run() had taken")
    closed = f.close_step(rec)
    if closed is not None and closed < c.ret:
        return _refused(rec, c, "a closed control")
    if c.args[0] == "main" and rec.sc.timeout == "True":
        return _refused(rec, c, "timeout=True")
    if f.writer_closed_before(rec, c):
        return _refused(rec, c, "a control whose writer end was closed")
    return f"run() refused valid arguments: it raised {f.err(exc)}"


def _accepted_run(rec: Any, c: Call) -> str | None:
    if c.ret is None:
        return _still_waiting(rec, c)
    exc = f.raised(c)
    injected, kind = f.injected(rec, c)
    if exc is not None:
        if injected is not None and f.carries(exc, injected):
            pass
        elif isinstance(exc, ConnectionError) and rec.eof is not None and rec.eof < c.ret:
            pass
        elif injected is not None:
            return (f"run() raised {f.err(exc)} after {type(injected).__name__} was raised "
                    "inside it: the error of the loop must come out of run (after the cleanup)")
        else:
            return f"run() raised {f.err(exc)}"
    elif injected is not None and (kind not in f.RELEASE_KINDS
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
    if injected is None or kind not in f.RELEASE_KINDS:
        return _released(rec, c)
    return None


def _still_waiting(rec: Any, c: Call) -> str | None:
    presses = [p for p in rec.calls if p.kind in ("press", "presses") and p.ret is not None
               and p.outcome[:1] == ("return",) and f.injected(rec, p)[0] is None]
    if presses:
        p = min(presses, key=lambda p: p.ret)
        why = ("the loop missed the stop" if rec.final_stop is not False else
               "stop_requested is still False: the press returned without recording the state")
        return (f"run() was still waiting (in {f.waiting_on(rec, c)}) although {f.who(p)}'s "
                f"{p.label} had returned at {p.ret_time:g} s: {why} -- a thread asleep that "
                "could go on")
    dials = c.args[1]
    mine = [d for d in rec.dials + rec.spares if d.obj in dials]
    if all(d.finished is not None for d in mine):
        return (f"run() was still waiting (in {f.waiting_on(rec, c)}) although every dial had "
                "finished: it returns when all dials are done")
    if rec.eof is not None:
        return ("run() was still waiting after the control's writer was closed (EOF): it "
                "raises ConnectionError and closes everything")
    deadline = f.deadline(rec, c)
    if deadline is not None:
        return (f"run(timeout={rec.sc.timeout}) was still waiting (in {f.waiting_on(rec, c)}) "
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
    deadline = f.deadline(rec, c)
    first_press = min((p.call for p in pressed), default=None)
    labels = set()
    for r, d in zip(results, truth):
        status, error = getattr(r, "status", None), getattr(r, "error", "missing")
        done = d is not None and d.finished is not None and d.finished < c.ret
        seen = _seen_ready(rec, c, d) if done else None
        if seen is not None and status in ("cancelled", "timeout") and (
                (status == "cancelled" and (first_press is None or seen.end < first_press))
                or (status == "timeout" and deadline is not None
                    and seen.end_time < deadline - f.EPS)):
            why = "any stop was requested" if status == "cancelled" else "the deadline passed"
            return (f"dial {r.name!r} ended {status!r}, though the loop had seen its connect "
                    f"finish ({seen.what} reported it ready) before {why}: finished dials "
                    "keep their status")
        if early and status != "cancelled":
            return (f"a stop was requested before run() began ({f.who(early[0])}'s press), yet "
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
            if c.ret_time < deadline - f.EPS:
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
    return next((w for w in rec.world.waits if w.task == c.task and f.within(c, w.start)
                 and w.end is not None and r.fd in w.ready
                 and (r.closed is None or w.end <= r.closed)), None)


def _timely(rec: Any, c: Call) -> str | None:
    """The deadline kept; a stop seen without the clock moving."""
    slack = f.slack(rec)
    deadline = f.deadline(rec, c)
    if deadline is not None and c.ret_time > deadline + slack + f.EPS \
            and f.raised(c) is None:
        return (f"run(timeout={rec.sc.timeout}) returned at {c.ret_time - c.call_time:g} s, "
                "after its deadline: the deadline is fixed when run begins and each wait is "
                "for what is left of it")
    presses = [p for p in rec.calls if p.kind in ("press", "presses") and p.ret is not None
               and p.ret < c.ret and p.outcome[:1] == ("return",)
               and f.injected(rec, p)[0] is None]
    if presses:
        p = min(presses, key=lambda p: p.ret)
        since = max(p.ret_time, c.call_time)
        if c.ret_time > since + slack + f.EPS:
            return (f"{f.who(p)}'s {p.label} had returned at {p.ret_time:g} s, but run() went "
                    f"on until {c.ret_time:g} s: a stop must wake the loop at once, not when "
                    "a wait times out")
    return None


def _no_polling(rec: Any, c: Call) -> str | None:
    deadline = f.deadline(rec, c)
    for w in rec.world.waits:
        if w.task == c.task and f.within(c, w.start) and w.ended == "timeout" and w.on is None \
                and w.seconds is not None and w.seconds < f.POLL_FLOOR \
                and (deadline is None or w.end_time < deadline - f.EPS):
            return (f"with nothing ready and no deadline due, the loop's {w.what} timed out "
                    f"after {w.seconds:g} s: it wakes on a timer of its own to look at the "
                    "flag instead of sleeping until something is ready (polling)")
    return None


def _drain_per_wakeup(rec: Any, c: Call) -> str | None:
    if rec.reader is None:
        return None
    starts = sorted(w.start for w in rec.world.waits if w.task == c.task and f.within(c, w.start)
                    and w.on is None)
    rounds: dict[int, list[int]] = {}
    for t in rec.world.transfers:
        if t.op == "recv" and t.task == c.task and t.resource is rec.reader and f.within(c, t.step):
            after = max((s for s in starts if s < t.step), default=-1)
            rounds.setdefault(after, []).append(t.nbytes)
    for reads in rounds.values():
        got = sum(n for n in reads if n > 0)
        if len(reads) > 1 or got > f.DRAIN_CHUNK:
            times = "once" if len(reads) == 1 else f"{len(reads)} times"
            return (f"the loop read the control {times} ({got} bytes) after one wakeup: "
                    f"drain() once per wakeup, one recv of at most {f.DRAIN_CHUNK} bytes "
                    "(a flood is read a chunk per round, so it cannot starve the dials)")
    return None


def _released(rec: Any, c: Call) -> str | None:
    """Everything run owned is unregistered, then closed, and its selector closed."""
    how = "returned" if f.raised(c) is None else f"raised {type(f.raised(c)).__name__}"
    for reg in rec.world.registrations:
        if reg.task == c.task and f.within(c, reg.step) and reg.resource is not None:
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
    owned += [r for r in rec.world.resources if r.task == c.task and f.within(c, r.opened)]
    for r in owned:
        if r.kind == "poll":
            continue
        if r.closed is None or r.closed > c.ret:
            what = f"the {r.name} run() made" if r.kind in ("selector", "epoll") else r.name
            return (f"{what} was still open when run() {how}: on return and on any exception "
                    "every socket it owns is closed, and its selector too")
    return None
