"""Values the submission hands to the judge must not lie about what they are.

Every acceptance set compares what the learner's code returns with what it expects:
``got == ["a", "b"]``, ``took == item``, ``sorted(taken) == expected``.  A returned object
whose class answers those comparisons itself (a ``list`` subclass whose ``__eq__`` says
True to anything, an object "equal" to every item) would pass them without storing or
ordering anything.  So the harness looks at each value a public method or function of the
learner module returns (``guard_module``), and fails the check when one lies:

- a subclass of a built-in value type (``list``, ``int``, ``str``, ...) whose own code for
  comparing, counting, iterating, indexing, membership or converting says something its
  built-in storage does not: equal to a stranger, another length, other items, holding
  what it does not, another value (an honest subclass whose ``__eq__`` or ``__iter__``
  agrees with what it holds passes); what a container subclass holds is judged like the
  items of a list;
- any other object whose own comparison says it equals a stranger: an object made on the
  spot that nothing honest can know.

Judged by behaviour and by whose code runs, never by names a submission chooses (a class
may claim any ``__module__``).  The tests' own objects are never probed (they may compare
oddly on purpose).  Containers of exact built-in types and the attributes of the
submission's own objects are looked through, within ``LIMIT`` objects.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import secrets
from types import ModuleType
from typing import Any, Callable

from workbook.stuck.code import is_trusted
from workbook.stuck.detector import DETECTOR
from workbook.testkit.checks import Failure

#: Objects looked at in one returned value at most (a batch of 20 000 items is looked
#: through in a few milliseconds; beyond this the rest is taken on trust).
LIMIT = 25_000
#: How deep into nested containers (and a returned object's fields) a value is looked at.
DEPTH = 3
_EXACT = (list, tuple, dict, set, frozenset, str, bytes, bytearray, int, float, complex,
          bool, type(None))
_SCALARS = frozenset({str, bytes, int, float, complex, bool, type(None)})
_VALUES = (list, tuple, dict, set, frozenset, str, bytes, bytearray, int, float, complex)
#: What a built-in value type does that a test relies on to compare, count or read it.
_BEHAVIOUR = ("__eq__", "__ne__", "__len__", "__iter__", "__getitem__", "__contains__",
              "__bool__", "__index__", "__int__", "__float__")
_COMPARE = ("__eq__", "__ne__")


class Dishonest(Failure):
    """A value the submission returned answers the judge's comparisons itself."""


class _Stranger:
    """An object no honest value equals: made by the harness, compared by identity."""
    __slots__ = ()


def _foreign_code(func: Any) -> bool:
    """Whether ``func`` is Python code that is neither the library's nor the harness's
    (code without a file counts: a submission can ``exec`` its ``__eq__``)."""
    code = getattr(getattr(func, "__func__", func), "__code__", None)
    return code is not None and not is_trusted(code.co_filename)  # None: C, a built-in's


def _own_behaviour(cls: type, names: tuple[str, ...]) -> list[str]:
    """The dunders of ``names`` that ``cls`` answers with code of the submission's."""
    return [name for name in names if _foreign_code(getattr(cls, name, None))]


def _strangers() -> list[Any]:
    """Values made on the spot, of the kinds a test expects (an object, a list, a tuple, a
    dict, a number, a text): nothing honest that exists already can equal one of them."""
    one = _Stranger()
    token = secrets.randbits(96) | 1 << 100
    return [one, [one], (one,), {one: one}, {one}, token, float(token), f"stranger-{token}",
            str(token).encode()]


def _lies(value: Any) -> bool:
    """Whether ``value`` claims equality with a stranger.  (Not an order: an order alone
    passes no equality check, and an honest heap entry may compare its deadline with
    anything that has one, ``getattr(other, "when", 0)``.)"""
    for stranger in _strangers():
        try:  # truth, not identity with True: a sloppy __eq__ may answer None
            if (value == stranger) or not (value != stranger):
                return True
        except Exception:  # noqa: BLE001 - a comparison that raises claims nothing
            pass
    return False


_SEQUENCES = (list, tuple, str, bytes, bytearray)
_CONTAINERS = (list, tuple, dict, set, frozenset)


def _claims(question: Callable[[], Any]) -> bool:
    """Whether asking ``question`` gets a true answer (one that raises claims nothing)."""
    try:
        return bool(question())
    except Exception:  # noqa: BLE001
        return False


def _same(a: Any, b: Any) -> bool:
    """Whether an item handed out is the one held: the very object, or for a text an equal
    plain one (indexing a str makes a new one)."""
    return a is b or type(a) is type(b) and type(a) in _SCALARS and a == b


def _unlike_itself(v: Any, base: type) -> str | None:
    """How a built-in subclass whose behaviour is its own code says something its built-in
    storage does not (None: it agrees with it, as an honest subclass does)."""
    name = ("an " if base.__name__[0] in "aeiou" else "a ") + base.__name__
    if _lies(v):
        return f"{name} that claims to equal an object it has never seen"
    try:
        if base in (int, float, complex):
            value_lies = (bool(v) != base.__bool__(v)
                          or base is int and v.__index__() != int(int.__index__(v))
                          or base is float and float(v) != float.__float__(v))
            return f"{name} that reports another value than the one it holds" \
                if value_lies else None
        size = base.__len__(v)
        if len(v) != size or bool(v) != (size > 0):
            return f"{name} that reports a length other than its own ({size})"
        held = list(itertools.islice(base.__iter__(v), LIMIT))
        if base in _CONTAINERS:
            mine = list(itertools.islice(iter(v), LIMIT))  # its own __iter__ may not end
            if len(mine) != len(held) or not all(map(_same, mine, held)):
                return f"{name} whose iteration hands out other items than it holds"
        if base in _SEQUENCES and not all(
                _same(v[i], base.__getitem__(v, i)) for i in range(len(held))):
            return f"{name} whose indexing hands out other items than it holds"
        if base is dict and not all(_same(v[k], dict.__getitem__(v, k)) for k in held):
            return f"{name} whose lookup hands out other values than it holds"
        # Only its own __contains__ is asked about a stranger: list's asks each held item,
        # and a lying item is judged as an item.
        if _own_behaviour(type(v), ("__contains__",)) and (
                _claims(lambda: _Stranger() in v)
                or base in _CONTAINERS and not all(_claims(lambda x=x: x in v) for x in held)):
            return f"{name} that says it holds what it does not"
    except Exception:  # noqa: BLE001 - behaviour that raises passes no check of a test
        return None
    return None


def lie_in(value: Any) -> str | None:
    """The first lie found in ``value`` (see the module docstring), as a phrase; None."""
    seen: set[int] = set()
    todo = [(value, 0, True)]  # (object, depth, whether to look inside it)
    looked = 0
    while todo and looked < LIMIT:
        v, depth, inside = todo.pop()
        looked += 1
        cls = type(v)
        if cls in _SCALARS:
            continue  # honest, and holds nothing (no id() asked: it is an audit event)
        key = id(v)
        if key in seen or depth > DEPTH:
            continue
        seen.add(key)
        if cls in _EXACT:
            if inside and cls is dict:
                todo += [(x, depth + 1, True) for pair in v.items() for x in pair]
            elif inside and cls in (list, tuple, set, frozenset):
                todo += [(x, depth + 1, True) for x in v]
            continue
        if isinstance(v, _VALUES):
            base = next(b for b in cls.__mro__ if b in _VALUES)
            if _own_behaviour(cls, _BEHAVIOUR):
                lie = _unlike_itself(v, base)
                if lie is not None:
                    return f"an object of class {cls.__name__}, {lie}"
            if inside and base in _CONTAINERS:  # what it holds is judged as a list's items
                held = (x for pair in dict.items(v) for x in pair) if base is dict \
                    else base.__iter__(v)
                todo += [(x, depth + 1, True) for x in itertools.islice(held, LIMIT)]
            continue
        if _own_behaviour(cls, _COMPARE) and _lies(v):
            return (f"an object of class {cls.__name__} that claims to equal an object it "
                    "has never seen")
        if inside and depth <= 1 and any(_foreign_code(f) for f in vars(cls).values()) \
                and hasattr(v, "__dict__") and not isinstance(v, (type, ModuleType)):
            # The submission's own object, returned (or in a returned list): its fields
            # are looked at too (a result record's), not what they lead to (a loop, its
            # sockets, their callbacks).
            todo += [(x, depth + 1, False) for x in vars(v).values()]
    return None


def _judge(result: Any, what: str) -> Any:
    lie = lie_in(result)
    if lie is not None:
        message = (f"{what} returned {lie}: a test compares what your code returns with "
                   "what it expects, so return plain values (lists, numbers, the very items "
                   "given), not objects that answer the comparison themselves")
        DETECTOR.check.lies.append(message)
        raise Dishonest(message)
    return result


def _guarded(func: Callable, what: str) -> Callable:
    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def guarded_coroutine(*args: Any, **kwargs: Any) -> Any:
            return _judge(await func(*args, **kwargs), what)
        return guarded_coroutine

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        result = func(*args, **kwargs)
        if asyncio.iscoroutine(result) or inspect.isgenerator(result):
            return result  # judged where it is awaited, if its function is guarded
        return _judge(result, what)
    return guarded


def guard_module(module: ModuleType) -> None:
    """Judge what the public functions and methods of ``module``'s own classes return.
    Called again before each test: a method the submission put back meanwhile is guarded
    again (a guarded one is harness code, so it is never wrapped twice)."""
    for name, value in list(vars(module).items()):
        if name.startswith("_"):
            continue
        if inspect.isfunction(value) and _foreign_code(value):
            setattr(module, name, _guarded(value, f"{name}()"))
        elif inspect.isclass(value) and any(_foreign_code(f) for f in vars(value).values()):
            _guard_class(value)


def _guard_class(cls: type) -> None:
    for name, member in list(vars(cls).items()):
        if name.startswith("_"):  # (len() makes whatever __len__ returns a plain int)
            continue
        what = f"{cls.__name__}.{name}"
        if isinstance(member, property) and _foreign_code(member.fget):
            setattr(cls, name, property(_guarded(member.fget, what), member.fset,
                                        member.fdel, member.__doc__))
        elif isinstance(member, (staticmethod, classmethod)) and _foreign_code(member):
            setattr(cls, name, type(member)(_guarded(member.__func__, f"{what}()")))
        elif inspect.isfunction(member) and _foreign_code(member):
            setattr(cls, name, _guarded(member, f"{what}()"))
