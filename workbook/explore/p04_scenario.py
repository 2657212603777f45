"""P04 exploration: scenarios (plain data, so a replay token carries one) and how they read.

A scenario is a program (``p04_program``): the loop thread runs ``run_sync(main, timeout)``
and then its ``after`` steps; other threads wait a little and call ``add_callback`` (or
``IOLoop.current()``); optionally the loop is made by the setup thread, which may add
callbacks before anyone runs it; faults may be planned in OS calls; the schedule comes from
``seed`` (or, for a systematic run, from ``script`` within ``bound`` preemptions).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbook.explore.p04_program import show_number


@dataclass
class Scenario:
    main: list[list[Any]]  # main's steps (p04_program's actions, yields, a return)
    main_kind: str = "coro"  # "coro": a generator coroutine; "plain": a plain function
    timeout: Any = None  # run_sync's timeout ("inf", "nan" as strings)
    subs: list[list[list[Any]]] = field(default_factory=list)  # coroutines c0, c1, ...
    threads: list[list[list[Any]]] = field(default_factory=list)  # per thread: [delay, op]
    after: list[list[Any]] = field(default_factory=lambda: [["close"]])
    made_by: str = "loop"  # "loop" or "setup" (then ``pre``: the setup's own adds)
    pre: list[list[Any]] = field(default_factory=list)
    faults: list[list[Any]] = field(default_factory=list)  # [thread, kind, n, exc]
    preempt: float = 0.0
    lines: bool = False
    jump: float = 0.0  # the wall clock (time.time) jumps this far once time moves
    opcodes: bool = False  # other threads may also stop inside a line, after a read (``midline``)
    seed: int = 0
    script: list[int] | None = None
    bound: int = 0
    version: int = 1

    def describe(self) -> str:
        parts = [("the loop is made by the setup thread, then run by the loop thread"
                  if self.made_by == "setup" else "the loop thread makes a loop")
                 + f"; run_sync(main, timeout={show_number(self.timeout)})"]
        kind = "coroutine" if self.main_kind == "coro" else "plain function"
        parts.append(f"main ({kind}): " + ("; ".join(step_text(s) for s in self.main)
                                            or "nothing"))
        for j, body in enumerate(self.subs):
            parts.append(f"c{j} (coroutine): " + ("; ".join(step_text(s) for s in body)
                                                  or "nothing"))
        if self.pre:
            parts.append("the setup thread first: " + "; ".join(cross_text(op)
                                                                 for op in self.pre))
        for n, ops in enumerate(self.threads, 1):
            parts.append(f"T{n}: " + "; ".join(
                (f"after {d:g} s, " if d else "") + cross_text(op) for d, op in ops))
        if self.after:
            parts.append("then the loop thread: " + "; ".join(after_text(op)
                                                              for op in self.after))
        extra = []
        for who, kind, n, exc in self.faults:
            extra.append(f"{exc} raised in {who}'s {_nth(n)} {kind}")
        if self.preempt:
            extra.append(f"preemption {self.preempt:g}")
        if self.lines:
            extra.append("line-level preemption")
        if self.opcodes:
            extra.append("the other threads also stopped inside lines, after each read of "
                         "shared state")
        if self.jump:
            extra.append(f"the wall clock jumps {self.jump:+g} s once time moves")
        if self.script is not None:
            extra.append(f"a systematic schedule, {self.bound} preemption(s) allowed")
        return "; ".join(parts) + (" (" + ", ".join(extra) + ")" if extra else "")


def _nth(n: int) -> str:
    return {1: "first", 2: "second", 3: "third"}.get(n, f"{n}th")


def _args(spec: list) -> str:
    if not spec:
        return ""
    return f", {spec[1]}" if spec[0] == "v" else f", key={spec[1]}"


def _then(inner: Any) -> str:
    return f" (which {step_text(inner)})" if inner else ""


def step_text(step: list[Any]) -> str:
    """One action or body step as a short phrase."""
    kind = step[0]
    if kind == "cb":
        return f"add_callback(cb{step[1]}{_args(step[2])}){_then(step[3])}"
    if kind == "later":
        args = _args(step[4]) if len(step) > 4 else ""
        return f"call_later({show_number(step[2])}, t{step[1]}{args}){_then(step[3])}"
    if kind == "clock":
        return "reads time()"
    if kind == "burst":
        return f"yields {step[1]} done Futures in a row"
    if kind == "remove":
        return f"remove_timeout(t{step[1]})"
    if kind == "set":
        return f"F{step[1]}.set_result({step[2]})"
    if kind == "fail":
        return f"F{step[1]}.set_exception({step[2]})"
    if kind == "done_cb":
        return f"F{step[1]}.add_done_callback(d{step[2]}){_then(step[3])}"
    if kind == "add_future":
        return f"add_future(F{step[1]}, a{step[2]}){_then(step[3])}"
    if kind == "look":
        return f"looks at F{step[1]}"
    if kind == "raise":
        return f"raises {step[1]}"
    if kind == "stop":
        return "stop()"
    if kind == "lag":
        return f"works {step[1]:g} s"
    if kind == "current":
        return "IOLoop.current()"
    if kind == "spawn":
        return f"calls c{step[1]}()"
    if kind == "yield":
        from workbook.explore.p04_program import Ctx
        return f"yield {Ctx.target_text(step[1])}" + ("" if step[2] else " (uncaught)")
    if kind == "return":
        return ("raise Return" if step[2] == "Return" else "return") + f"({step[1]})"
    return repr(step)


def cross_text(op: list[Any]) -> str:
    if op[0] == "current":
        return "IOLoop.current()"
    return f"add_callback(x{op[1]}{_args(op[2])}){_then(op[3])}"


def after_text(op: list[Any]) -> str:
    if op[0] == "close":
        return "close()"
    if op[0] == "current":
        return "IOLoop.current()"
    if op[0] == "cb":
        return f"add_callback(cb{op[1]}{_args(op[2])})"
    if op[0] == "make2":
        return "IOLoop() (a second loop)"
    if op[0] == "close2":
        return "close() of the second loop"
    if len(op) > 2 and op[2]:
        return f"run_sync(a coroutine that gets {op[1]} after {op[2]:g} s)"
    return f"run_sync(lambda: {op[1]})"
