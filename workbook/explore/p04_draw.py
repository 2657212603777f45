"""P04 exploration: which scenarios are run.

- ``systematic()``: shapes chance rarely draws -- a sleeping loop woken by another thread (at
  once, later, twice at the same instant), a loop made by one thread and run by another,
  every edge value of every delay and timeout, callbacks that raise every kind of exception
  from every place a callback runs, a turn that lasts past a deadline, close() beside an
  add_callback, faults in every OS call of the loop;
- ``pairs()`` and ``triples()``: a loop in each starting state (asleep without a timeout,
  asleep until a timeout, busy taking turns, about to stop, closing) beside one or two other
  threads calling add_callback, under every schedule with one preemption (``bounded``);
- ``strategy()``: Hypothesis draws programs -- main's steps, a sub-coroutine, callbacks that
  do one more thing when they run, other threads -- with edge values for every parameter;
- ``candidates()``: smaller or plainer scenarios, to shrink a counterexample.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import replace
from typing import Any, Iterator

from hypothesis import strategies as st

from workbook.explore.p04_scenario import Scenario

#: Delays of call_later: plain ones, ties, and every edge value (JSON can't hold inf/nan).
DELAYS: tuple[Any, ...] = (0, 0.5, 1.0, 0.5, -1, -0.0, "nan", "inf", "-inf", 1e10, 3e6)
#: run_sync's timeout: none, plain, and every edge value (3e6 s is past select's 24.8 days).
TIMEOUTS: tuple[Any, ...] = (None, 1.0, 0.5, 0, -1, "nan", "inf", 1e10, 3e6)
VALUES = ("0", "obj", "None", "False", "''", "odd")
EXCS = ("E", "E", "KI", "SE", "BE", "Return")
ARGS: tuple[list, ...] = ([], [], ["v", "0"], ["kw", "obj"], ["v", "odd"], ["v", "None"])
BAD = ("42", "str", "listbad", "gen")
PREEMPT = (0.0, 0.0, 0.1, 0.3, 0.6)
#: The OS calls of the loop a fault is planned in (``io.KINDS`` the loop thread makes).
FAULT_KINDS = ("socket", "selector", "register", "wait", "recv")


# ---- systematic shapes ---------------------------------------------------------------------

def _wait_f0(timeout: Any = None, how: str = "return") -> dict[str, Any]:
    return {"main": [["yield", ["F", 0], True], ["return", "obj", how]], "timeout": timeout}


def _setter(n: int, delay: float, what: list | None = None) -> list[Any]:
    return [delay, ["add", n, [], what if what is not None else ["set", 0, "obj"]]]


def systematic(extensions: bool = True) -> list[Scenario]:
    out: list[Scenario] = []
    # a sleeping loop woken by other threads: at once, later, after an idle while, twice
    for delay in (0, 0.5, 1.0):
        for timeout in (None, 2.0):
            out.append(Scenario(**_wait_f0(timeout), threads=[[_setter(1, delay)]]))
    out.append(Scenario(**_wait_f0(2.0), threads=[[_setter(1, 0.5)],
                                                  [[0.5, ["add", 2, ["v", "0"], None]]]]))
    out.append(Scenario(**_wait_f0(), threads=[[[0.5, ["add", 1, [], None]], _setter(2, 0.5)]]))
    # made by one thread, run by another: the maker's own add_callback is another thread's,
    # the runner's is the loop thread's
    out.append(Scenario([["cb", 1, [], None], *_wait_f0(2.0)["main"]], timeout=2.0,
                        made_by="setup", pre=[["add", 1, [], None]],
                        threads=[[_setter(2, 0.5)]]))
    # every delay beside a plain timeout that completes main; every run_sync timeout
    for delay in DELAYS:
        out.append(Scenario([["later", 1, delay, None],
                             ["later", 2, 0.5, ["set", 0, "obj"]],
                             ["yield", ["F", 0], True], ["return", "0", "return"]]))
    for k, timeout in enumerate(TIMEOUTS):
        how = ("return", "Return")[k % 2]  # both ways a generator returns a value
        out.append(Scenario(**_wait_f0(timeout, how), threads=[[_setter(1, 0.5)]]))
        out.append(Scenario(**_wait_f0(timeout, how)))
        out.append(Scenario([["cb", 1, [], None]], main_kind="plain", timeout=timeout))
    # callbacks that raise, from every place a callback runs; the loop must run again
    for exc in ("E", "KI", "SE", "BE"):
        raising = ["raise", exc]
        places = [
            {"main": [["cb", 1, [], raising], ["later", 2, 0, ["set", 0, "0"]],
                      ["yield", ["F", 0], True]]},
            {"main": [["later", 1, 0, raising], ["later", 2, 0.5, ["set", 0, "0"]],
                      ["yield", ["F", 0], True]]},
            # ... and with another of the same turn after it, which must still run
            {"main": [["cb", 1, [], raising], ["cb", 2, [], None],
                      ["later", 3, 0.5, ["set", 0, "0"]], ["yield", ["F", 0], True]]},
            {"main": [["later", 1, 0, raising], ["later", 2, 0, None],
                      ["later", 3, 0.5, ["set", 0, "0"]], ["yield", ["F", 0], True]]},
            {"main": [["done_cb", 0, 1, raising], ["done_cb", 0, 2, None],
                      ["cb", 3, [], ["set", 0, "0"]], ["yield", ["F", 0], True]]},
            {"main": [["yield", ["F", 0], True]], "threads": [[_setter(1, 0, raising),
                                                                _setter(2, 0.5)]]},
            {"main": [["raise", exc]]},
            {"main": [["yield", ["moment"], True], ["raise", exc]]},
            {"main": [["fail", 0, exc], ["yield", ["F", 0], False]]},
        ]
        for place in places:
            out.append(Scenario(**place, after=[["again", "obj"], ["current"], ["close"]]))
    # a turn that lasts past a deadline; a timeout removed by a callback of its own turn
    out.append(Scenario([["later", 1, 0.5, None], ["cb", 2, [], ["lag", 1.0]],
                         ["later", 3, 0.5, ["set", 0, "0"]], ["yield", ["F", 0], True]]))
    out.append(Scenario([["later", 1, 0, None], ["cb", 2, [], ["remove", 1]],
                         ["yield", ["moment"], True], ["yield", ["moment"], True]]))
    # three timeouts set in every order, one of them removed before any is due: the others
    # still fire in deadline order (taking an entry out of a heap's list breaks the heap)
    for order in itertools.permutations((0.25, 0.5, 1.0)):
        for gone in (1, 2, 3):
            out.append(Scenario([["later", n, delay, None] for n, delay in enumerate(order, 1)]
                                + [["remove", gone], ["later", 4, 1.5, ["set", 0, "0"]],
                                   ["yield", ["F", 0], True]]))
    # moment beside a due timeout: the timeout runs on the next turn, not after the spin
    out.append(Scenario([["later", 1, 0, None]] + [["yield", ["moment"], True]] * 3
                        + [["yield", ["none"], True]]))
    # close() beside add_callback from another thread: dropped, never an error
    for delay in (0, 0.5):
        out.append(Scenario([["return", "0", "return"]], threads=[[[delay, ["add", 1, [], None]]]],
                            after=[["close"], ["cb", 2, []], ["current"]], preempt=0.3))
    # every form of arguments, to add_callback and to call_later, from each thread
    forms = [args for args in ARGS if args] + [[]]
    out.append(Scenario([["cb", n, args, None] for n, args in enumerate(forms, 1)]
                        + [["later", n, 0, None, args] for n, args in enumerate(forms, 1)]
                        + [["yield", ["moment"], True], ["yield", ["moment"], True]],
                        threads=[[[0, ["add", n, args, None]] for n, args in enumerate(forms, 1)]]))
    # every Future call on a pending, a done and a failed Future; callbacks added after
    for first in (["set", 0, "obj"], ["fail", 0, "E"]):
        out.append(Scenario([["done_cb", 0, 1, None], ["look", 0], first, ["look", 0],
                             ["done_cb", 0, 2, None], ["set", 0, "0"], ["fail", 0, "E"],
                             ["add_future", 0, 3, None], ["look", 0]], main_kind="plain"))
    out.append(Scenario([["done_cb", 0, 1, ["raise", "E"]], ["done_cb", 0, 2, ["look", 0]],
                         ["add_future", 0, 3, None], ["fail", 0, "E"],
                         ["yield", ["F", 0], True], ["done_cb", 0, 4, None]]))
    # a list or dict of Futures completed in either order, each with a value or a failure
    for shape in ("list", "dict"):
        for order in ((0, 1), (1, 0)):
            for how in (("set", "set"), ("fail", "set"), ("set", "fail"), ("fail", "fail")):
                done = [[h, k, "obj" if h == "set" else "E"] for h, k in zip(how, order)]
                out.append(Scenario([["later", 1, 0, done[0]], ["later", 2, 0.5, done[1]],
                                     ["yield", [shape, [0, 1]], True]]))
    for children in ([0, 0], [], [0, 1, 2]):
        out.append(Scenario([["set", 1, "0"], ["later", 1, 0, ["set", 0, "obj"]],
                             ["later", 2, 0, ["set", 2, "odd"]],
                             ["yield", ["list", children], True],
                             ["yield", ["dict", children], True]]))
    # what a yield may be: each bad value, caught or not; a coroutine's Future; a plain
    # function made a coroutine; its own Future as a plain main's value
    for bad in BAD:
        for catch in (True, False):
            out.append(Scenario([["yield", ["bad", bad], catch], ["return", "0", "return"]]))
    out.append(Scenario([["spawn", 0], ["yield", ["c", 0], True], ["spawn", 1],
                         ["yield", ["c", 1], False]],
                        subs=[[["cb", 1, [], None], ["return", "obj", "Return"]],
                              [["raise", "E"]]]))
    out.append(Scenario([["later", 1, 0.5, ["set", 0, "obj"]], ["return", "F0", "return"]],
                        main_kind="plain"))
    # many done Futures in a row: a loop, not recursion
    out.append(Scenario([["burst", 1200], ["yield", ["moment"], True],
                         ["return", "0", "return"]]))
    # the loop's clock: monotonic, whatever the wall clock does
    for jump in (-100.0, 100.0):
        out.append(Scenario([["clock"], ["later", 1, 0.5, ["set", 0, "0"]],
                             ["yield", ["F", 0], True], ["clock"]], jump=jump))
    # current loops: a second loop made and closed on the loop thread, before and after
    out.append(Scenario([["current"], ["return", "0", "return"]],
                        after=[["make2"], ["current"], ["close2"], ["current"], ["close"],
                               ["current"]]))
    out.append(Scenario([["return", "0", "return"]], made_by="setup",
                        after=[["current"], ["close"], ["current"], ["make2"], ["close2"],
                               ["current"]]))
    # every call made twice, and after it no longer applies: removing a timeout twice and
    # after it ran, stop() twice, close() twice
    out.append(Scenario([["later", 1, 0.5, None], ["remove", 1], ["remove", 1],
                         ["later", 2, 0, None], ["yield", ["moment"], True],
                         ["yield", ["moment"], True], ["remove", 2], ["stop"], ["stop"],
                         ["yield", ["moment"], True]],
                        after=[["again", "0"], ["close"], ["close"], ["current"]]))
    # run_sync again, longer than the first one's timeout
    out.append(Scenario([["return", "0", "return"]], timeout=0.5,
                        after=[["again", "obj", 1.0], ["close"]]))
    # faults in the OS calls the loop makes (not in close: close(2) lets go of the descriptor
    # whatever it reports, and what a loop then does with its other descriptors is open)
    for kind in FAULT_KINDS:
        for exc in ("OSError", "KeyboardInterrupt"):
            out.append(Scenario(**_wait_f0(2.0), threads=[[_setter(1, 0.5)]],
                                faults=[["loop", kind, 1, exc]],
                                after=[["current"], ["close"]]))
    return out


# ---- every pair and triple of calls under every schedule --------------------------------------

#: The loop thread's starting states: asleep without a timeout, asleep until a timeout, busy
#: (taking turns), about to stop, closing.  Each ends once F0 is set by another thread, or
#: without it (the last two): what the other thread sends then may be dropped, never raise.
STATES: dict[str, dict[str, Any]] = {
    "asleep": {"main": [["yield", ["F", 0], True]]},
    "timer": {"main": [["later", 1, 0.5, None], ["yield", ["F", 0], True]]},
    "busy": {"main": [["yield", ["moment"], True], ["yield", ["F", 0], True]]},
    "stopping": {"main": [["cb", 1, [], None], ["return", "0", "return"]],
                 "after": [["again", "0"], ["close"]]},
    # close() half done (its waker closed, the loop not yet marked closed) is a window
    # another thread's add_callback can land in: only a walk of every schedule places it
    "closing": {"main": [["return", "0", "return"]],
                "after": [["close"], ["cb", 2, []], ["current"]]},
}
#: The loop made by another thread, not running yet: the other threads may come first.
UNSTARTED: dict[str, Any] = {"main": [["yield", ["F", 0], True]], "made_by": "setup",
                             "after": [["close"], ["current"]]}
#: What another thread does (the first one also sets F0, so the loop can finish): a plain
#: callback, or the way another thread stops the loop.  (A callback that raises, or
#: IOLoop.current() on that thread, change nothing of the schedule: the drawn scenarios
#: have them.)
CROSS: dict[str, list[Any]] = {
    "add": [0, ["add", 1, [], None]],
    "stop": [0, ["add", 1, [], ["stop"]]],
}


def _thread(n: int, op: list[Any], sets: bool) -> list[list[Any]]:
    ops = [[op[0], ["add", op[1][1] + 10 * n, *op[1][2:]]] if op[1][0] == "add" else op]
    if sets:
        ops.append([0, ["add", 10 * n + 9, [], ["set", 0, "obj"]]])
    return ops


def pairs(extensions: bool = True) -> list[Scenario]:
    """Each starting state beside each call of another thread; the loop's timeout and the
    other thread arriving at the same instant, its add_callback stopped inside a line too."""
    out = [Scenario(**start, threads=[_thread(1, CROSS[b], True)], preempt=1.0)
           for start in [*STATES.values(), UNSTARTED] for b in CROSS]
    out.append(Scenario([["later", 1, 0.5, ["set", 0, "obj"]], ["yield", ["F", 0], True]],
                        threads=[[[0.5, ["add", 11, [], None]]]], preempt=1.0, opcodes=True))
    # two other threads at the same instant, one stopped inside a line while the loop takes
    # the list and the other's add_callback finds it empty again: two wakeups, each counted
    out.append(Scenario([["later", 1, 1.0, ["set", 0, "obj"]], ["yield", ["F", 0], True]],
                        threads=[[[0.5, ["add", 11, [], None]]], [[0.5, ["add", 21, [], None]]]],
                        preempt=1.0, opcodes=True))
    return out


def triples(extensions: bool = True) -> list[Scenario]:
    return [Scenario(**STATES[state], threads=[_thread(1, CROSS[b], True),
                                                _thread(2, CROSS[c], False)], preempt=1.0)
            for state in STATES for b in CROSS for c in CROSS]


# ---- Hypothesis ------------------------------------------------------------------------------

class _Ids:
    def __init__(self) -> None:
        self.n: dict[str, int] = {}

    def __call__(self, kind: str) -> int:
        self.n[kind] = self.n.get(kind, 0) + 1
        return self.n[kind]


def _inner(rng: random.Random, ids: _Ids, depth: int = 0) -> list[Any] | None:
    """What a callback does when it runs, besides recording that it ran."""
    kind = rng.choice(("none", "none", "set", "set", "fail", "cb", "later", "remove", "raise",
                       "stop", "lag", "done_cb", "look", "current"))
    k = rng.randrange(3)
    if kind == "none":
        return None
    if kind == "set":
        return ["set", k, rng.choice(VALUES)]
    if kind == "fail":
        return ["fail", k, rng.choice(EXCS)]
    if kind in ("cb", "later"):
        n = ids(kind)
        more = _inner(rng, ids, depth + 1) if depth < 1 else None
        if kind == "cb":
            return ["cb", n, rng.choice(ARGS), more]
        return ["later", n, rng.choice(DELAYS), more]
    if kind == "remove":
        return ["remove", rng.randint(1, 2)]
    if kind == "raise":
        return ["raise", rng.choice(EXCS)]
    if kind == "lag":
        return ["lag", rng.choice((0.5, 1.0))]
    if kind == "done_cb":
        return ["done_cb", k, ids("done_cb"), None]
    if kind == "look":
        return ["look", k]
    return [kind]


def _target(rng: random.Random, subs: int) -> list[Any]:
    what = rng.choice(("F", "F", "moment", "none", "list", "dict", "bad", "done", "failed", "c"))
    if what == "F":
        return ["F", rng.randrange(3)]
    if what in ("list", "dict"):
        return [what, [rng.randrange(3) for _ in range(rng.randint(0, 3))]]
    if what == "bad":
        return ["bad", rng.choice(BAD)]
    if what == "done":
        return ["done", rng.choice(VALUES)]
    if what == "failed":
        return ["failed", rng.choice(EXCS)]
    if what == "c":
        return ["c", 0] if subs else ["moment"]
    return [what]


def _step(rng: random.Random, ids: _Ids, subs: int) -> list[Any]:
    kind = rng.choice(("cb", "cb", "later", "later", "yield", "yield", "yield", "set", "fail",
                       "done_cb", "add_future", "remove", "look", "spawn", "stop", "lag",
                       "current", "clock"))
    k = rng.randrange(3)
    if kind == "cb":
        return ["cb", ids("cb"), rng.choice(ARGS), _inner(rng, ids)]
    if kind == "later":
        return ["later", ids("later"), rng.choice(DELAYS), _inner(rng, ids), rng.choice(ARGS)]
    if kind == "yield":
        return ["yield", _target(rng, subs), rng.random() < 0.5]
    if kind == "set":
        return ["set", k, rng.choice(VALUES)]
    if kind == "fail":
        return ["fail", k, rng.choice(EXCS)]
    if kind in ("done_cb", "add_future"):
        return [kind, k, ids(kind), _inner(rng, ids)]
    if kind == "remove":
        return ["remove", rng.randint(1, 2)]
    if kind == "look":
        return ["look", k]
    if kind == "spawn":
        return ["spawn", 0] if subs else ["look", k]
    if kind == "lag":
        return ["lag", rng.choice((0.5, 1.0))]
    return [kind]


def _body(rng: random.Random, ids: _Ids, subs: int, most: int) -> list[list[Any]]:
    steps = [_step(rng, ids, subs) for _ in range(rng.randint(1, most))]
    end = rng.choice(("return", "return", "Return", "none", "raise"))
    if end in ("return", "Return"):
        steps.append(["return", rng.choice(VALUES + ("F0",)), end])
    elif end == "raise":
        steps.append(["raise", rng.choice(EXCS)])
    return steps


def _cross(rng: random.Random, ids: _Ids) -> list[list[Any]]:
    ops = []
    for _ in range(rng.randint(1, 3)):
        delay = rng.choice((0, 0, 0.5, 1.0))
        if rng.randrange(6) == 0:
            ops.append([delay, ["current"]])
        else:
            ops.append([delay, ["add", ids("cross"), rng.choice(ARGS), _inner(rng, ids)]])
    return ops


def build(rng: random.Random, extensions: bool = True) -> Scenario:
    """One scenario drawn with ``rng``: main (a coroutine or a plain function) and maybe a
    coroutine it calls, the callbacks they hand out, 0-2 other threads, what the loop thread
    does afterwards, maybe a fault, a schedule."""
    ids = _Ids()
    subs = rng.randint(0, 1)
    sub_bodies = [_body(rng, ids, 0, 2) for _ in range(subs)]
    kind = rng.choice(("coro", "coro", "coro", "plain"))
    main = _body(rng, ids, subs, 4)
    threads = [_cross(rng, ids) for _ in range(rng.randint(0, 2))]
    made_by = rng.choice(("loop", "loop", "loop", "setup"))
    pre = []
    if made_by == "setup" and rng.random() < 0.5:
        pre = [["add", ids("cross"), rng.choice(ARGS), _inner(rng, ids)]]
    after = rng.choice(([["close"]], [["close"]], [["current"], ["close"]],
                        [["again", "obj"], ["close"]], [["again", "0", 1.0], ["close"]],
                        [["close"], ["cb", 99, []], ["current"]],
                        [["make2"], ["current"], ["close2"], ["current"], ["close"]]))
    faults = []
    if rng.randrange(6) == 0:
        faults = [[made_by, rng.choice(FAULT_KINDS), rng.randint(1, 2),
                   rng.choice(("OSError", "KeyboardInterrupt", "Fault"))]]
    if kind == "coro" and rng.randrange(8) == 0:
        main.insert(rng.randrange(len(main)), ["burst", 1200])
    burst = any(step[0] == "burst" for step in main)
    return Scenario(main, kind, rng.choice(TIMEOUTS), sub_bodies, threads, after, made_by, pre,
                    faults, preempt=rng.choice(PREEMPT), lines=not burst and rng.random() < 0.5,
                    jump=rng.choice((0.0, 0.0, -100.0, 100.0)), seed=rng.randrange(2**16))


def strategy(extensions: bool = True) -> st.SearchStrategy[Scenario]:
    """Scenarios drawn by Hypothesis (from the explorer's fixed seed): it hands ``build`` a
    seeded ``random.Random``, which is a hundred times cheaper than drawing each of a
    program's few dozen choices through Hypothesis (we shrink with ``candidates``)."""
    return st.randoms(use_true_random=True).map(lambda rng: build(rng, extensions))


# ---- shrinking -----------------------------------------------------------------------------------

def candidates(sc: Scenario) -> Iterator[Scenario]:
    """Smaller or plainer scenarios than ``sc``, most promising first."""
    for i in range(len(sc.threads)):
        yield replace(sc, threads=sc.threads[:i] + sc.threads[i + 1:])
    for i, ops in enumerate(sc.threads):
        for j in range(len(ops)):
            if len(ops) > 1:
                yield replace(sc, threads=sc.threads[:i] + [ops[:j] + ops[j + 1:]]
                              + sc.threads[i + 1:])
            if ops[j][0]:
                plain = [0, ops[j][1]]
                yield replace(sc, threads=sc.threads[:i] + [ops[:j] + [plain] + ops[j + 1:]]
                              + sc.threads[i + 1:])
    for j in range(len(sc.main)):
        yield replace(sc, main=sc.main[:j] + sc.main[j + 1:])
    for j, step in enumerate(sc.main):
        for plainer in _plainer(step):
            yield replace(sc, main=sc.main[:j] + [plainer] + sc.main[j + 1:])
    if sc.subs and not any(s[0] == "spawn" or (s[0] == "yield" and s[1][0] == "c")
                           for s in sc.main):
        yield replace(sc, subs=[])
    for j in range(len(sc.after)):
        yield replace(sc, after=sc.after[:j] + sc.after[j + 1:])
    if sc.pre:
        yield replace(sc, pre=[])
    if sc.made_by == "setup" and not sc.pre:
        yield replace(sc, made_by="loop")
    if sc.faults:
        yield replace(sc, faults=[])
    if sc.timeout is not None:
        yield replace(sc, timeout=None)
    if sc.lines:
        yield replace(sc, lines=False)
    if sc.preempt:
        yield replace(sc, preempt=0.0)


def _plainer(step: list[Any]) -> Iterator[list[Any]]:
    """The same step without its inner action, or with plain arguments."""
    if step[0] in ("cb", "later", "done_cb", "add_future") and step[-1] is not None:
        yield step[:-1] + [None]
    if step[0] == "cb" and step[2]:
        yield ["cb", step[1], [], step[3]]
