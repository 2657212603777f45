"""P02 exploration: scenarios (plain data, so that a replay token carries one), the
Hypothesis strategy that draws them, the systematic shapes chance rarely draws, every pair
of calls for the bounded schedules, and the smaller scenarios a counterexample shrinks to.

A scenario is a setup run alone -- a ``Control()``, its dials (the learner's ``dial()`` to
loopback endpoints that accept, refuse or never answer, edge addresses, or the explorer's
*late* dials, which a thread finishes later), presses made before ``run`` begins, perhaps a
call of ``run`` with one invalid argument -- and then threads: T1 the loop (``run`` and what
it may do after), the others pressing Cancel, reading ``stop_requested``, finishing late
dials, sending stray bytes, closing the writer (EOF), calling ``run`` a second time.  On top:
a fault in the n-th call of one kind by one thread, an interrupt inside a wait, a press from
a signal handler before the k-th line one thread runs, time passing while a thread runs, the
wall clock jumping.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, replace
from typing import Any

from hypothesis import strategies as st

from workbook.explore.strategies import between, pick

#: Dial kinds: the learner's ``dial()`` to a loopback port that accepts ("up"), refuses
#: ("down") or never answers ("stuck"), the explorer's "late" dial (pending until a thread
#: connects or refuses it), and addresses ``dial()`` must refuse, leaving nothing open.
DIALS = ("late", "up", "down", "stuck")
BAD_ADDRESSES = {"port 70000": ("127.0.0.1", 70000), "port -1": ("127.0.0.1", -1),
                 "None": None, "('127.0.0.1',)": ("127.0.0.1",)}
#: Timeouts of ``run``, by spec: valid (zero, short, none, huge, an int beyond any float),
#: invalid (run refuses them and closes nothing), and ``True`` (the spec reads both ways:
#: refused or one second, either is fine).
TIMEOUTS: tuple[Any, ...] = (None, 0.5, 0, 1.0, "-0.0", 1, "inf", "1e12", "10**400")
BAD_TIMEOUTS = ("-1", "nan", "-inf", "'1'", "True")
#: Invalid arguments the setup tries first (``run`` must raise TypeError/ValueError and close
#: nothing, so that the valid run after it works).
BAD_ARGS = ("timeout -1", "timeout nan", "timeout -inf", "timeout '1'", "dials iterator",
            "dials str", "a None dial", "a duplicate name", "a shared socket",
            "a closed socket", "a blocking socket", "a second object on one descriptor",
            "control None", "control closed")
#: Operations of the threads other than the loop: [kind, argument, delay before it].
OPS = ("press", "look", "connect", "refuse", "press", "stray", "eof", "run", "presses",
       "after press", "after close", "after look", "after run", "connect", "flood")
LOOP_AFTER = (None, "after press", "after close", "after look")
STRAYS = (1, 5000, 9000)
#: Presses of a "presses" operation: more than a socket pair's buffer takes (~270).
PRESSES = 600
#: A flood: stray bytes (no stop), sent in chunks bigger than a wakeup may drain, with a
#: point between sends where another thread may run, for this many virtual seconds or until
#: every run has returned (and never more than this many sends).
FLOOD = (2.0, 65536, 3000)
DELAYS = (0, 0.5, 1.0)
#: What a fault raises: the OSError the call's kind fails with under pressure, an interrupt,
#: a BaseException that is not an Exception.
FAULT_EXCS = ("OSError", "KeyboardInterrupt", "Cancelled")
#: Calls a planned fault can land in (``io.KINDS``), and how far each is counted.
FAULT_KINDS = {"selector": 2, "register": 4, "wait": 4, "recv": 3, "socket": 3, "send": 2,
               "unregister": 4, "close": 6, "connect": 2}
PREEMPT = (0.0, 0.1, 0.3, 0.6)


@dataclass
class Scenario:
    dials: list[str]
    timeout: Any = None
    threads: list[list[list[Any]]] = field(default_factory=list)  # T1 is the loop
    early: int = 0  # presses by the setup before run begins
    bad: str | None = None  # one of BAD_ARGS, tried by the setup first
    fault: list[Any] | None = None  # [task, kind, n, exc]
    interrupt: str | None = None  # raised inside a wait of a thread (not the setup)
    signal: list[int] | None = None  # [task, k]: a press from a handler before its k-th line
    # [task, k, woken]: that task stops before its k-th line (counted from its first wakeup
    # if woken) until no other thread can go on; the operations marked "at pause" run then
    # (another call landing between two lines)
    pause: list[int] | None = None
    lag: list[Any] | None = None  # [task, n, seconds]: time passes at its n-th point
    slow: float = 0.0  # virtual seconds each step of the loop (T1) costs: a loaded machine
    jump: float = 0.0
    preempt: float = 0.0
    seed: int = 0
    version: int = 1
    script: list[int] | None = None
    bound: int = 0
    ops: bool = False  # threads may stop inside a line, after each read of shared state

    def describe(self) -> str:
        parts = [f"dials {', '.join(self.dials) or 'none'}",
                 f"timeout {self.timeout if self.timeout is not None else 'None'}"]
        if self.early:
            parts.append(f"{self.early} press(es) before run begins")
        if self.bad:
            parts.append(f"first a run() with {self.bad} (refused)")
        for n, ops in enumerate(self.threads, 1):
            parts.append(f"T{n}: " + "; ".join(op_label(op) for op in ops))
        extra = []
        if self.fault:
            task, kind, n, exc = self.fault
            extra.append(f"{exc} in the {_nth(n)} {kind} call of "
                         + ("the setup" if task == 0 else f"T{task}"))
        if self.interrupt:
            extra.append(f"one {self.interrupt} raised inside a wait")
        if self.signal:
            extra.append(f"a signal handler presses before the {_nth(self.signal[1])} line "
                         f"T{self.signal[0]} runs")
        if self.pause:
            extra.append(f"T{self.pause[0]} stops before the {_nth(self.pause[1])} line it runs"
                         + (" after its first wakeup" if self.pause[2:] == [1] else "")
                         + " while the others run")
        if self.lag:
            extra.append(f"{self.lag[2]:g} s pass at the {_nth(self.lag[1])} step of "
                         f"T{self.lag[0]}")
        if self.slow:
            extra.append(f"each step of T1 takes {self.slow:g} s")
        if self.jump:
            extra.append(f"the wall clock jumps {self.jump:+g} s once time moves")
        if self.preempt:
            extra.append(f"preemption {self.preempt:g}")
        if self.ops:
            extra.append("threads stopped inside lines too (after each read of shared state)")
        if self.script is not None:
            extra.append(f"a systematic schedule, {self.bound} preemption(s) allowed")
        return "; ".join(parts) + (" (" + ", ".join(extra) + ")" if extra else "")


def _nth(n: int) -> str:
    return f"{n}{'st' if n % 10 == 1 and n != 11 else 'nd' if n % 10 == 2 and n != 12 else 'rd' if n % 10 == 3 and n != 13 else 'th'}"


def timeout_value(spec: Any) -> Any:
    return {"-0.0": -0.0, "inf": float("inf"), "1e12": 1e12, "10**400": 10**400, "-1": -1,
            "nan": float("nan"), "-inf": float("-inf"), "'1'": "1", "True": True}.get(spec, spec) \
        if isinstance(spec, str) else spec


def op_label(op: list[Any]) -> str:
    kind, arg, delay = op
    wait = f"after {delay:g} s, " if delay else ""
    text = {"press": "request_stop()", "look": "stop_requested", "eof": "close the writer (EOF)",
            "run": "run()", "drain": "drain()",
            "presses": f"{PRESSES} × request_stop()", "close": "control.close()",
            "flood": f"a flood of stray bytes for {FLOOD[0]:g} s"}.get(kind)
    if kind in ("connect", "refuse"):
        text = f"{'finish' if kind == 'connect' else 'refuse'} a late dial (#{arg + 1})"
    elif kind == "stray":
        text = f"{arg} stray byte{'s' if arg != 1 else ''} on the writer (no stop)"
    elif kind.startswith("after "):
        text = f"once run() is over, {op_label([kind[6:], arg, 0])}"
    elif kind.startswith("at pause "):
        text = f"while T1 is stopped, {op_label([kind[9:], arg, 0])}"
    return wait + (text or kind)


# ---- drawn scenarios -----------------------------------------------------------------------

def _op(kind: str, k: int, n: int, delay: float) -> list[Any]:
    if kind in ("connect", "refuse"):
        return [kind, k, delay]
    if kind == "stray":
        return [kind, n, delay]
    return [kind, None, delay]


@st.composite
def scenarios(draw: Any, extensions: bool = True) -> Scenario:
    dials = [draw(pick(DIALS)) for _ in range(draw(between(0, 3)))]
    if draw(between(0, 9)) == 0:
        dials.insert(0, draw(pick(sorted(BAD_ADDRESSES))))
    timeout = draw(pick(TIMEOUTS + BAD_TIMEOUTS[:1]))
    loop = [["run", None, draw(pick(DELAYS))]]
    after = draw(pick(LOOP_AFTER))
    if after:
        loop.append([after, None, 0])
    threads = [loop]
    for _ in range(draw(between(1, 2))):
        threads.append([_op(draw(pick(OPS)), draw(between(0, 2)),
                            draw(pick(STRAYS)), draw(pick(DELAYS)))
                        for _ in range(draw(between(1, 3)))])
    fault = None
    if draw(between(0, 3)) == 0:
        kind = draw(pick(sorted(FAULT_KINDS)))
        fault = [draw(pick((0, 1, 1, 2))), kind,
                 draw(between(1, FAULT_KINDS[kind])), draw(pick(FAULT_EXCS))]
    signal = None
    if draw(between(0, 5)) == 0:
        signal = [draw(between(1, len(threads))), draw(between(1, 40))]
    pause = None
    if draw(between(0, 4)) == 0:
        pause = [1, draw(between(1, 70)), draw(between(0, 1))]
        threads.append([[f"at pause {draw(pick(OPS[:8]))}",
                         draw(between(0, 2)), 0]])
    lag = None
    if draw(between(0, 4)) == 0:
        lag = [draw(between(1, len(threads))), draw(between(1, 30)),
               draw(pick((0.25, 0.5, 2.0)))]
    return Scenario(
        dials=dials, timeout=timeout, threads=threads, early=draw(pick((0, 0, 0, 1))),
        slow=draw(pick((0.0, 0.0, 0.0, 0.001))),
        bad=draw(pick((None,) * 6 + BAD_ARGS)), fault=fault,
        interrupt=draw(pick((None, None, "KeyboardInterrupt", "Cancelled"))),
        signal=signal, pause=pause, lag=lag, jump=draw(pick((0.0, 0.0, -100.0, 100.0))),
        preempt=draw(pick(PREEMPT)), seed=draw(between(0, 2**16)))


# ---- systematic shapes ---------------------------------------------------------------------

RUN = ["run", None, 0]
PRESS = ["press", None, 0]


def _base(**fields: Any) -> Scenario:
    """Three dials (one finishes half-way, one refuses, one never answers) and a press."""
    data = dict(dials=["up", "late", "stuck"], timeout=None,
                threads=[[list(RUN)], [["connect", 1, 0.5], ["press", None, 1.0]]])
    data.update(fields)
    return Scenario(**data)


def systematic(extensions: bool = True) -> list[Scenario]:
    """Shapes chance rarely draws: each starting state with a press, a deadline, stray bytes
    and EOF at chosen instants; each invalid argument; a fault in every counted call of every
    kind, in the setup and in the loop; a signal handler pressing before each of the first
    lines the loop or a presser runs; time passing at each early point; the wall clock
    jumping during a timed run; a loaded loop under a flood; drains beside presses, floods
    and EOF; and last (the most runs) every operation between any two lines of the loop."""
    out: list[Scenario] = []
    starts = (["late"], ["up", "down"], ["stuck", "late"], [], ["late", "late"])
    for dials in starts:
        for timeout in (None, 0, 0.5):
            out.append(Scenario(list(dials), timeout, [[list(RUN)], [["press", None, 0.5]]]))
            out.append(Scenario(list(dials), timeout, [[list(RUN), ["after press", None, 0]],
                                                       [["stray", 1, 0], ["press", None, 1.0]]]))
        out.append(Scenario(list(dials), 1.0, [[list(RUN)], [["stray", 9000, 0.5]]]))
        out.append(Scenario(list(dials), None, [[list(RUN)], [["eof", None, 0.5]]]))
        out.append(Scenario(list(dials), None, [[list(RUN), ["after close", None, 0]]], early=1))
    out.append(Scenario(["late"], None, [[list(RUN)], [["connect", 0, 0.5], ["refuse", 0, 0]]]))
    for addr in BAD_ADDRESSES:
        out.append(Scenario([addr, "up"], None, [[list(RUN)]]))
    for timeout in TIMEOUTS + BAD_TIMEOUTS:
        out.append(Scenario(["late", "up"], timeout, [[list(RUN)], [["press", None, 2.0]]]))
    for bad in BAD_ARGS:
        out.append(Scenario(["late", "up"], None, [[list(RUN)], [["press", None, 0.5]]],
                            bad=bad))
    for kind, most in FAULT_KINDS.items():
        for n in range(1, most + 1):
            for task in (0, 1):
                for exc in ("OSError", "KeyboardInterrupt"):
                    out.append(_base(fault=[task, kind, n, exc]))
    for k in range(1, 61):
        out.append(_base(signal=[1, k]))
    for k in range(1, 16):
        out.append(_base(threads=[[list(RUN)], [["press", None, 0], ["press", None, 0.5]]],
                         signal=[2, k]))
    for n in range(1, 25, 2):
        out.append(_base(timeout=1.0, lag=[1, n, 0.5]))
    # a loop on a loaded machine (every step costs time) under a flood of stray bytes, or
    # pressed: the deadline still ends it, a stop is still seen
    for timeout, other in ((0.5, ["flood", None, 0]), (None, ["press", None, 0.5])):
        for seed in range(3):
            out.append(Scenario(["late"], timeout, [[list(RUN)], [list(other)]], slow=0.001,
                                preempt=0.3, seed=seed))
    for jump in (-100.0, 100.0):
        out.append(_base(dials=["late"], timeout=1.0, threads=[[list(RUN)]], jump=jump))
    for interrupt in ("KeyboardInterrupt", "Cancelled"):
        for seed in range(4):
            out.append(_base(interrupt=interrupt, seed=seed))
    for other in (["stray", 9000, 0], ["eof", None, 0], ["press", None, 0], ["presses", None, 0]):
        out.append(Scenario([], None, [[["drain", None, 0.5]] * 3, [other]]))
    out.append(Scenario([], None, [[["drain", None, 0]], [["presses", None, 0]],
                                   [["look", None, 0]]]))
    # a press stopped between any two of its lines while run() ends and closes the control
    # (a press that checked "closed" before and sends after must still act as one or the
    # other: a completed press, or RuntimeError)
    for k in range(1, 9):
        out.append(Scenario(["up"], None, [[list(RUN)], [["press", None, 0]]], pause=[2, k, 0]))
    # every operation between any two lines the loop runs: T1 stops before its k-th line
    # and the operation runs then; in a run that ends by itself (its dial connects at once),
    # and in one a stray byte wakes (the operation then lands in the control's branch)
    for dials, woken, lines in ((["up"], 0, 70), (["late"], 1, 45)):
        for op in ("press", "run", "look", "stray", "eof"):
            for k in range(1, lines + 1):
                others = [[[f"at pause {op}", 1 if op == "stray" else None, 0]]]
                if woken:
                    others.append([["stray", 1, 0.5]])
                out.append(Scenario(list(dials), None, [[list(RUN)]] + others,
                                    pause=[1, k, woken]))
    return out


# ---- every pair of calls (bounded schedules) ------------------------------------------------

PAIR_OPS = {"press": ["press", None, 0], "look": ["look", None, 0],
            "connect": ["connect", 0, 0], "stray": ["stray", 1, 0], "eof": ["eof", None, 0],
            "run": ["run", None, 0], "after press": ["after press", None, 0]}
#: The states a pair starts from: a late dial alone with no deadline, a late and a stuck
#: one with a short deadline (and, for triples, a stop already requested).
PAIR_STARTS = ((["late"], None, 0), (["late", "stuck"], 0.5, 0), (["late"], None, 1))


def pairs(extensions: bool = True) -> list[Scenario]:
    """The loop's run beside every unordered pair of calls, one per thread, from each start;
    run under every schedule with a bounded number of preemptions."""
    names = list(PAIR_OPS)
    return [Scenario(list(dials), timeout, [[list(RUN)], [list(PAIR_OPS[a])],
                                            [list(PAIR_OPS[b])]], early=early, preempt=1.0)
            for dials, timeout, early in PAIR_STARTS[:2]
            for i, a in enumerate(names) for b in names[i:]] + midline()


def midline() -> list[Scenario]:
    """The loop's run beside a second run() of the same control, threads stopped inside
    lines just after a read of shared state (a flag read and set in one statement is still
    two steps); walked by ``bounded.each_first``.  (A press has nothing to read and write
    back: it stores a flag and sends under the lock.)"""
    return [Scenario(["late"], None, [[list(RUN)], [list(RUN)]], preempt=1.0, ops=True)]


def triples(extensions: bool = True) -> list[Scenario]:
    """The loop's run beside every triple of calls (the longer search)."""
    names = list(PAIR_OPS)
    return [Scenario(list(dials), timeout, [[list(RUN)], [list(PAIR_OPS[a])],
                                            [list(PAIR_OPS[b])], [list(PAIR_OPS[c])]],
                     early=early, preempt=1.0)
            for dials, timeout, early in PAIR_STARTS
            for i, a in enumerate(names) for j, b in enumerate(names[i:], i)
            for c in names[j:]]


# ---- shrinking ------------------------------------------------------------------------------

def candidates(sc: Scenario):
    """Smaller or plainer scenarios than ``sc``, most promising first."""
    def variant(**changes: Any) -> Scenario:  # a copy: no list is shared with ``sc``
        # Only the plain data is deep-copied, never the Scenario: copying an instance has
        # copyreg cache ``__slotnames__`` on its class, and a graded run calls any change
        # to the harness's classes tampering.
        data = {f.name: getattr(sc, f.name) for f in fields(sc) if f.init}
        return replace(sc, **copy.deepcopy({**data, **changes}))

    for i in range(1, len(sc.threads)):
        yield variant(threads=sc.threads[:i] + sc.threads[i + 1:],
                      signal=None if sc.signal and sc.signal[0] > i else sc.signal)
    for i, ops in enumerate(sc.threads):
        for j in range(len(ops)):
            if len(ops) > 1:
                yield variant(threads=sc.threads[:i] + [ops[:j] + ops[j + 1:]] + sc.threads[i + 1:])
    for j in range(len(sc.dials)):
        yield variant(dials=sc.dials[:j] + sc.dials[j + 1:])
    for name, plain in (("bad", None), ("fault", None), ("interrupt", None), ("signal", None),
                        ("pause", None), ("slow", 0.0),
                        ("lag", None), ("jump", 0.0), ("preempt", 0.0), ("early", 0)):
        if getattr(sc, name):
            yield variant(**{name: plain})
    if sc.timeout is not None:
        yield variant(timeout=None)
    for i, ops in enumerate(sc.threads):
        for j, op in enumerate(ops):
            if op[2]:
                yield variant(threads=sc.threads[:i] + [ops[:j] + [[op[0], op[1], 0]]
                                                       + ops[j + 1:]] + sc.threads[i + 1:])


def reseed(sc: Scenario, seed: int) -> Scenario:
    return replace(sc, seed=seed)


def from_data(data: dict[str, Any]) -> Scenario:
    return Scenario(**data)
