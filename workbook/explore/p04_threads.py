"""P04 exploration: the threads of a scenario, as the same code for the controlled run and
for the model -- the setup (which may make the loop and add callbacks before anyone runs it),
the loop thread (run_sync(main, timeout), then its after-steps) and the other threads (they
call add_callback, or IOLoop.current())."""
from __future__ import annotations

from typing import Any, Callable

from workbook.explore.p04_program import (Ctx, Passing, _args_text, _passes, number,
                                          show_number)

def setup_body(ctx: Ctx, made_by: str, pre: list[list[Any]]) -> None:
    """The setup (alone, before the others): makes the loop if the scenario says so, and
    adds callbacks to it from its own thread before anyone runs it."""
    if made_by == "setup":
        make_loop(ctx)
        if ctx.loop is not None:
            for op in pre:
                cross_op(ctx, op)


def make_loop(ctx: Ctx) -> None:
    ctx.rec("IOLoop()")
    try:
        ctx.loop = ctx.api.IOLoop()
    except Passing:
        raise
    except BaseException as exc:  # noqa: BLE001 - an injected fault, say: recorded
        if _passes(exc):
            raise
        ctx.rec(f"IOLoop() raises {ctx.show_exc(exc)}")
        return
    ctx.made.append(ctx.loop)
    ctx.rec("IOLoop() made the loop")


def loop_body(ctx: Ctx, sc: Any, made: Callable[[], None] = lambda: None) -> None:
    """The loop thread: (make the loop,) run_sync(main, timeout), then the after-steps;
    ``made()`` once the loop exists (or failed to)."""
    if sc.made_by == "loop":
        make_loop(ctx)
    made()
    if ctx.loop is None:
        return
    main = (ctx.coroutine if sc.main_kind == "coro" else ctx.plain)("main", sc.main)
    run_sync(ctx, main, sc.timeout)
    for k, op in enumerate(sc.after):
        ctx.phase = k
        after_op(ctx, op)


def run_sync(ctx: Ctx, main: Callable[[], Any], timeout: Any) -> None:
    ctx.rec(f"run_sync(main, timeout={show_number(timeout)})")
    try:
        got = ctx.loop.run_sync(main, number(timeout))
    except Passing:
        raise
    except BaseException as exc:  # noqa: BLE001 - every outcome is judged
        if _passes(exc):
            raise
        ctx.rec(f"run_sync raises {ctx.show_exc(exc)}")
        return
    ctx.rec(f"run_sync returns {ctx.show(got)}")


def after_op(ctx: Ctx, op: list[Any]) -> None:
    """What the loop thread does after run_sync: ["close"], ["current"], ["cb", n, args]
    (a callback that must never run once the loop is closed), ["again", value, delay]
    (run_sync of a plain function returning value, or of a coroutine that gets it after
    ``delay`` s), ["make2"] and ["close2"] (a second loop of the loop thread)."""
    kind = op[0]
    if kind == "close":
        ctx.rec("close()")
        again = id(ctx.loop) in ctx.closed
        ctx.closed.add(id(ctx.loop))
        try:
            ctx.loop.close()
        except BaseException as exc:  # noqa: BLE001 - an injected fault, say: recorded
            if _passes(exc):
                raise
            if not again:  # the contract says nothing of a second close: it may raise
                ctx.rec(f"close raises {ctx.show_exc(exc)}")
    elif kind == "current":
        ctx.perform(["current"])
    elif kind == "cb":
        ctx.perform(["cb", op[1], op[2], None])
    elif kind == "again":
        if len(op) > 2 and op[2]:  # a coroutine that waits op[2] seconds for its value
            main2 = ctx.coroutine("main2", [["later", 900, op[2], ["set", 9, op[1]]],
                                            ["yield", ["F", 9], True]])
        else:
            def main2() -> Any:
                ctx.rec("main2 runs")
                return ctx.value(op[1], "again")
        run_sync(ctx, main2, None)
    elif kind == "make2":
        ctx.rec("IOLoop() again")
        try:
            ctx.loop2 = ctx.api.IOLoop()
        except BaseException as exc:  # noqa: BLE001 - an injected fault, say: recorded
            if _passes(exc):
                raise
            ctx.rec(f"IOLoop() raises {ctx.show_exc(exc)}")
            return
        ctx.own.setdefault(ctx.who(), []).append(ctx.loop2)
        ctx.made.append(ctx.loop2)
        ctx.rec("IOLoop() made its loop #1")
    elif kind == "close2":
        if ctx.loop2 is not None:
            ctx.closed.add(id(ctx.loop2))
            ctx._call("close() of its loop #1", ctx.loop2.close)
    else:
        raise ValueError(f"unknown after-step {op!r}")


def cross_op(ctx: Ctx, op: list[Any]) -> None:
    """One step of a thread other than the loop's: ["add", n, args, inner] or ["current"]."""
    if op[0] == "current":
        ctx.perform(["current"])
        return
    _, n, args, inner = op
    a, kw = ctx.args(args, label=f"{args[1]}@x{n}" if args else None)
    ctx.rec(f"add_callback(x{n}{_args_text(args)})")
    try:
        ctx.loop.add_callback(ctx.callback(f"x{n}", inner), *a, **kw)
    except BaseException as exc:  # noqa: BLE001 - judged: it must not raise
        if _passes(exc):
            raise
        ctx.rec(f"add_callback raises {ctx.show_exc(exc)}")
        return
    ctx.rec("add_callback returns")


def cross_close(ctx: Ctx) -> None:
    """A thread that made loops of its own (IOLoop.current() there) closes them at its end."""
    for loop in ctx.own.get(ctx.who(), []):
        ctx.closed.add(id(loop))
        ctx._call("closes its own loop", loop.close)
