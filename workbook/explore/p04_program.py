"""P04 exploration: the programs a scenario runs, interpreted against an *api*.

A program is plain data (JSON-able lists, so that a replay token carries it): the steps of
``main`` (a generator coroutine or a plain function run by ``run_sync``), the bodies of the
coroutines it may call, and the callbacks it hands to the loop, each of which may do one more
thing when it runs (re-entrant calls from callbacks).  The same interpreter runs a program
twice: on the learner's module, controlled (``p04.run``), and on the sequential model of the
contract (``p04_model``); both record the same kind of events, which are then compared.

Actions (loop thread; ``inner`` is one more action, or None):

    ["cb", n, args, inner]       add_callback(cb<n>, *args)
    ["later", n, delay, inner]   t<n> = call_later(delay, t<n>)
    ["remove", n]                remove_timeout(t<n>)        (when t<n> exists)
    ["set", k, value]            F<k>.set_result(value)
    ["fail", k, exc]             F<k>.set_exception(exc)
    ["done_cb", k, n, inner]     F<k>.add_done_callback(d<n>)
    ["add_future", k, n, inner]  add_future(F<k>, a<n>)
    ["look", k]                  F<k>.done(), result(), exception()
    ["raise", exc]               raise exc
    ["stop"]                     stop()
    ["lag", seconds]             the clock moves on while this runs (a long callback)
    ["current"]                  IOLoop.current() is which loop?
    ["spawn", j]                 c<j>() (a coroutine of the program's ``subs``)

In a coroutine body, also ``["yield", target, catch]`` (target: ["F", k], ["moment"],
["none"], ["list", [k...]], ["dict", [k...]], ["bad", what], ["done", value],
["failed", exc], ["c", j]; ``catch``: whether the body catches what the yield raises) and
``["return", value, how]`` (how: "return" or "Return").

Arguments (``args``): [] , ["v", value] (one positional), ["kw", value] (``key=value``).
Values: "0", "None", "False", "''", "obj" (a plain object), "odd" (equal to everything).
Exceptions: "E" (an Exception), "KI" (KeyboardInterrupt), "SE" (SystemExit), "BE" (a
BaseException that is neither), "Return" (the module's ``Return``).
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

from workbook.explore.values import Item, OddEq

#: Labels of values and exceptions made by a program (``obj3``, ``E2``).
VALUES = ("0", "None", "False", "''", "obj", "odd")
EXCS = ("E", "KI", "SE", "BE", "Return")


class ProgramError(Exception):
    """The ordinary exception a program raises."""


class Cancelled(BaseException):
    """A BaseException that is neither KeyboardInterrupt nor SystemExit."""


class Passing(BaseException):
    """The explorer's own exceptions: they go through every catch of a program and of the
    model (a BaseException, so that no ``except Exception`` swallows one)."""


class Relax(Passing):
    """Raised by the model: a BaseException is on its way out of the loop, where the contract
    leaves the rest of the run's events open (only its invariants are judged).  A
    BaseException itself, so that no ``except Exception`` of the model swallows it."""


def number(spec: Any) -> float | None:
    """A delay or timeout spec as a number ("inf", "-inf", "nan" as JSON can't hold them)."""
    if spec is None:
        return None
    if isinstance(spec, str):
        return float(spec)
    return spec


def show_number(spec: Any) -> str:
    return "None" if spec is None else (spec if isinstance(spec, str) else f"{spec:g}")


class Ctx:
    """One run of one program against one api (the learner's module or the model)."""

    def __init__(self, api: Any, rec: Callable[[str], None], lag: Callable[[float], None],
                 subs: list[list[list[Any]]], who: Callable[[], str]) -> None:
        self.api = api
        self.rec = rec  # records an event of the calling thread
        self.lag = lag  # moves the clock on while the calling thread runs
        self.subs = subs
        self.who = who  # the calling thread's name ("setup", "loop", "T1", ...)
        self.loop: Any = None
        self.own: dict[str, list[Any]] = {}  # the other loops each thread has seen
        self.futures: dict[str, Any] = {}
        self.handles: dict[int, Any] = {}
        self.counts: dict[str, int] = {}
        self.relax: BaseException | None = None  # the BaseException on its way out, if any
        self.phase = -1  # the loop thread's after-step under way (-1: not yet)
        self.t0: float | None = None  # the loop's first time() reading (["clock"])
        self.loop2: Any = None  # a second loop the loop thread makes (["make2"])
        self.ran: list[Any] = []  # every callback that ran (see ``released``)
        self.made: list[Any] = []  # every loop the program made (IOLoop(), current())
        self.closed: set[int] = set()  # ids of those it called close() on

    # ---- values, exceptions and their labels ----------------------------------------------

    def _next(self, kind: str) -> int:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return self.counts[kind]

    def value(self, spec: str, label: str | None = None) -> Any:
        """A fresh value; ``label`` names it where the order of creation is not fixed (an
        argument made by another thread), else a counter of the loop thread does."""
        if spec == "F0":
            return self.future(0)
        if spec in ("obj", "odd"):
            name = label or f"{spec}{self._next('value')}"
            return (Item if spec == "obj" else OddEq)(name)
        return {"0": 0, "None": None, "False": False, "''": ""}[spec]

    def exc(self, spec: str) -> BaseException:
        n = self._next("exc")
        label = f"{spec}{n}"
        if spec == "Return":
            made: BaseException = self.api.Return(label)
        else:
            cls = {"E": ProgramError, "KI": KeyboardInterrupt, "SE": SystemExit,
                   "BE": Cancelled}[spec]
            made = cls(label)
        made._p04_label = label  # type: ignore[attr-defined]
        return made

    def show(self, value: Any) -> str:
        if isinstance(value, BaseException):
            return self.show_exc(value)
        if isinstance(value, list):
            return "[" + ", ".join(self.show(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k!r}: {self.show(v)}" for k, v in value.items()) + "}"
        if isinstance(value, Item):
            return value.label
        if isinstance(value, self.api.Future):
            return next((name for name, f in self.futures.items() if f is value), "a Future")
        return repr(value)

    def show_exc(self, exc: BaseException) -> str:
        label = getattr(exc, "_p04_label", None)
        name = type(exc).__name__
        for cls in (self.api.InvalidStateError, self.api.BadYieldError):
            if isinstance(exc, cls):
                name = cls.__name__
                break
        return f"{name} {label}" if label else name

    def loop_name(self, loop: Any) -> str:
        if loop is self.loop:
            return "the loop"
        mine = self.own.setdefault(self.who(), [])
        for i, seen in enumerate(mine, 1):
            if seen is loop:
                return f"its loop #{i}"
        mine.append(loop)
        self.made.append(loop)
        return f"a new loop (its #{len(mine)})"

    def future(self, k: Any) -> Any:
        name = f"F{k}"
        if name not in self.futures:
            self.futures[name] = self.api.Future()
        return self.futures[name]

    # ---- callbacks ---------------------------------------------------------------------------

    def callback(self, name: str, inner: list | None) -> Callable[..., None]:
        def call(*args: Any, **kwargs: Any) -> None:
            shown = [self.show(a) for a in args] + [f"{k}={self.show(v)}"
                                                   for k, v in kwargs.items()]
            self.rec(f"{name}({', '.join(shown)}) runs" if shown else f"{name} runs")
            self.ran.append(weakref.ref(call))
            if inner is not None:
                self.perform(inner)
        call.__name__ = call.__qualname__ = name
        return call

    def args(self, spec: list, label: str | None = None) -> tuple[tuple, dict]:
        if not spec:
            return (), {}
        if spec[0] == "v":
            return (self.value(spec[1], label),), {}
        return (), {"key": self.value(spec[1], label)}

    # ---- actions -------------------------------------------------------------------------------

    def perform(self, action: list) -> None:
        """Do one action on the loop thread; an Exception the action's call raises is
        recorded (the call's outcome); ``["raise", exc]`` raises."""
        kind = action[0]
        loop = self.loop
        if kind == "raise":
            exc = self.exc(action[1])
            self.rec(f"raises {self.show_exc(exc)}")
            if not isinstance(exc, Exception):
                self.relax = exc
            raise exc
        if kind == "lag":
            self.lag(action[1])
            return
        if kind == "stop":
            self._call("stop()", loop.stop)
            return
        if kind == "current":
            try:
                current = self.api.IOLoop.current()
            except BaseException as exc:  # noqa: BLE001 - a fault in making a new loop, say
                if _passes(exc):
                    raise
                self.rec(f"IOLoop.current() raises {self.show_exc(exc)}")
                return
            self.rec("IOLoop.current() is " + self.loop_name(current))
            return
        if kind == "cb":
            _, n, args, inner = action
            a, kw = self.args(args)
            self._call(f"add_callback(cb{n}{_args_text(args)})", loop.add_callback,
                       self.callback(f"cb{n}", inner), *a, **kw)
            return
        if kind == "later":
            _, n, delay, inner, *rest = action
            args = rest[0] if rest else []
            a, kw = self.args(args)
            handle = self._call(f"call_later({show_number(delay)}, t{n}{_args_text(args)})",
                                loop.call_later, number(delay), self.callback(f"t{n}", inner),
                                *a, **kw)
            if handle is not _FAILED:
                self.handles[n] = handle
            return
        if kind == "remove":
            if action[1] in self.handles:
                self._call(f"remove_timeout(t{action[1]})", loop.remove_timeout,
                           self.handles[action[1]])
            return
        if kind == "set":
            value = self.value(action[2])
            self._call(f"F{action[1]}.set_result({self.show(value)})",
                       self.future(action[1]).set_result, value)
            return
        if kind == "fail":
            exc = self.exc(action[2])
            self._call(f"F{action[1]}.set_exception({self.show_exc(exc)})",
                       self.future(action[1]).set_exception, exc)
            return
        if kind == "done_cb":
            _, k, n, inner = action
            self._call(f"F{k}.add_done_callback(d{n})", self.future(k).add_done_callback,
                       self.callback(f"d{n}", inner))
            return
        if kind == "add_future":
            _, k, n, inner = action
            self._call(f"add_future(F{k}, a{n})", loop.add_future, self.future(k),
                       self.callback(f"a{n}", inner))
            return
        if kind == "look":
            self.rec(self.look(action[1]))
            return
        if kind == "spawn":
            self.spawn(action[1])
            return
        if kind == "clock":
            now = loop.time()
            if self.t0 is None:
                self.t0 = now
            # To the microsecond (``sched.INSTANT``): each reading moves the clock a tick.
            self.rec(f"time() has moved {round(now - self.t0, 6):g} s")
            return
        raise ValueError(f"unknown action {action!r}")

    def _call(self, text: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.rec(text)
        try:
            return fn(*args, **kwargs)
        except Passing:
            raise
        except Exception as exc:  # noqa: BLE001 - an outcome of the call, recorded
            self.rec(f"{text.split('(')[0]} raises {self.show_exc(exc)}")
            return _FAILED

    def look(self, k: Any) -> str:
        f = self.future(k)
        if not f.done():
            parts = [f"F{k} is pending"]
        else:
            parts = [f"F{k} is done"]
        for what in ("result", "exception"):
            try:
                got = getattr(f, what)()
                parts.append(f"{what}() = {self.show(got)}")
            except Passing:
                raise
            except BaseException as exc:  # noqa: BLE001
                if _passes(exc):
                    raise
                parts.append(f"{what}() raises {self.show_exc(exc)}")
        return "; ".join(parts)

    def spawn(self, j: int) -> Any:
        name = f"c{j}"
        if name not in self.futures:
            self.rec(f"calls {name}()")
            self.futures[name] = self.coroutine(name, self.subs[j])()
            self.rec(f"{name}() returned a " + ("done" if self.futures[name].done()
                                                else "pending") + " Future")
        return self.futures[name]

    # ---- bodies ---------------------------------------------------------------------------------

    def coroutine(self, name: str, steps: list[list[Any]]) -> Callable[[], Any]:
        """``steps`` as a coroutine: a generator function, or (without a yield step) a
        plain function, which ``coroutine`` also takes."""
        if not any(step[0] in ("yield", "burst") for step in steps):
            return self.api.coroutine(self.plain(name, steps))

        def body():  # a generator function: the yield below makes it one
            self.rec(f"{name} starts")
            for step in steps:
                if step[0] == "yield":
                    target, catch = step[1], step[2]
                    obj = self.target(target)
                    self.rec(f"{name} yields {self.target_text(target)}")
                    try:
                        got = yield obj
                    except (GeneratorExit, Passing):
                        raise
                    except BaseException as exc:  # noqa: BLE001
                        if _passes(exc) or not catch:
                            if not catch:
                                self.rec(f"{name} lets {self.show_exc(exc)} out")
                                if not isinstance(exc, Exception):
                                    self.relax = exc
                            raise
                        self.rec(f"{name} catches {self.show_exc(exc)}")
                        continue
                    self.rec(f"{name} resumes with {self.show(got)}")
                elif step[0] == "return":
                    return self.returning(name, step)
                elif step[0] == "burst":  # many done Futures in a row: no recursion
                    self.rec(f"{name} yields {step[1]} done Futures in a row")
                    for _ in range(step[1]):
                        done = self.api.Future()
                        done.set_result(None)
                        yield done
                    self.rec(f"{name} is past them")
                else:
                    self.perform(step)
            self.rec(f"{name} ends")
            return None

        return self.api.coroutine(body)

    def plain(self, name: str, steps: list[list[Any]]) -> Callable[[], Any]:
        def body():
            self.rec(f"{name} starts")
            for step in steps:
                if step[0] == "return":
                    return self.returning(name, step)
                if step[0] not in ("yield", "burst"):
                    self.perform(step)
            self.rec(f"{name} ends")
            return None

        return body

    def returning(self, name: str, step: list[Any]) -> Any:
        """``["return", value, how]``: the value, returned or raised in a ``Return``."""
        value = self.value(step[1])
        self.rec(f"{name} returns {self.show(value)}")
        if step[2] == "Return":
            raise self.api.Return(value)
        return value

    def target(self, target: list) -> Any:
        kind = target[0]
        if kind == "F":
            return self.future(target[1])
        if kind == "moment":
            return self.api.moment
        if kind == "none":
            return None
        if kind == "list":
            return [self.future(k) for k in target[1]]
        if kind == "dict":
            return {f"k{k}": self.future(k) for k in target[1]}
        if kind == "bad":
            return {"42": 42, "str": "F", "listbad": [42], "gen": iter(())}[target[1]]
        if kind == "done":
            f = self.api.Future()
            f.set_result(self.value(target[1]))
            return f
        if kind == "failed":
            f = self.api.Future()
            f.set_exception(self.exc(target[1]))
            return f
        if kind == "c":
            return self.spawn(target[1])
        raise ValueError(f"unknown yield target {target!r}")

    @staticmethod
    def target_text(target: list) -> str:
        kind = target[0]
        if kind == "F":
            return f"F{target[1]}"
        if kind in ("list", "dict"):
            names = ", ".join(f"F{k}" for k in target[1])
            return f"[{names}]" if kind == "list" else "{" + names + "}"
        if kind == "bad":
            return {"42": "42", "str": "'F'", "listbad": "[42]", "gen": "an iterator"}[target[1]]
        if kind == "done":
            return f"a done Future ({target[1]})"
        if kind == "failed":
            return f"a failed Future ({target[1]})"
        if kind == "c":
            return f"c{target[1]}'s Future"
        return {"moment": "moment", "none": "None"}[kind]


_FAILED = object()


def _passes(exc: BaseException) -> bool:
    """The explorer's own exceptions (a run abandoned, a model's verdict) go through every
    catch of a program."""
    return isinstance(exc, Passing) or type(exc).__name__ == "Abandon"


def _args_text(spec: list) -> str:
    if not spec:
        return ""
    return f", {spec[1]}" if spec[0] == "v" else f", key={spec[1]}"
