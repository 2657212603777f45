"""P04 exploration: what a controlled copy of the learner's module sees instead of the real
threads, clock, descriptors and log.

- Thread identity per *task*, not per real thread: the explorer's worker threads are reused
  from run to run, so ``threading.get_ident()``, ``threading.current_thread()`` and
  ``threading.local`` answer for the controlled task (a fresh identity each run).  Without
  this a loop made by one run would still be "current" in the next run's thread.
- ``prims`` (locks, conditions, the virtual clock) and ``io`` (selectors, select, sockets,
  pipes, eventfds) as the other explorers use them.
- ``Logged``: the log records emitted on a controlled thread, each as an event of the run.
"""
from __future__ import annotations

import _thread
import itertools
import logging
import threading
from typing import Any

from workbook.explore import io, prims
from workbook.explore.sched import TASKS

_idents = itertools.count(7_000_001)


def _task() -> Any:
    return TASKS.get(_thread.get_ident())


class _TaskThread:
    """What ``threading.current_thread()`` returns in a controlled task."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ident = next(_idents)
        self.native_id = self.ident
        self.daemon = True

    def is_alive(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<controlled thread {self.name}>"


def _thread_of(task: Any) -> _TaskThread:
    found = getattr(task, "_p04_thread", None)
    if found is None:
        found = task._p04_thread = _TaskThread(task.name)
    return found


def get_ident() -> int:
    task = _task()
    return _thread.get_ident() if task is None else _thread_of(task).ident


def current_thread() -> Any:
    task = _task()
    return threading.current_thread() if task is None else _thread_of(task)


class local:  # noqa: N801 - the name of the class it stands in for
    """``threading.local`` with one namespace per controlled task (and one for the rest)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            object.__getattribute__(self, "_p04_spaces")
        except AttributeError:  # the first call (a subclass's __init__ runs once per task)
            object.__setattr__(self, "_p04_spaces", {})
            object.__setattr__(self, "_p04_init", (args, kwargs))

    def _space(self) -> dict:
        spaces = object.__getattribute__(self, "_p04_spaces")
        task = _task()
        key = _thread_of(task).ident if task is not None else None  # never reused
        space = spaces.get(key)
        if space is None:
            space = spaces[key] = {}
            if type(self).__init__ is not local.__init__:  # a subclass: run its __init__ anew
                args, kwargs = object.__getattribute__(self, "_p04_init")
                type(self).__init__(self, *args, **kwargs)
        return space

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_p04_") or name in ("_space", "__class__", "__dict__"):
            if name == "__dict__":
                return object.__getattribute__(self, "_space")()
            return object.__getattribute__(self, name)
        space = object.__getattribute__(self, "_space")()
        if name in space:
            return space[name]
        return object.__getattribute__(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__getattribute__(self, "_space")()[name] = value

    def __delattr__(self, name: str) -> None:
        space = object.__getattribute__(self, "_space")()
        if name not in space:
            raise AttributeError(name)
        del space[name]


_EXTRA_THREADING = {"get_ident": get_ident, "current_thread": current_thread,
                    "currentThread": current_thread, "local": local}
_EXTRA_THREAD = {"get_ident": get_ident, "_local": local}
fake_threading = prims._Facade(threading, {**prims._THREADING, **_EXTRA_THREADING})
fake_thread = prims._Facade(_thread, {**prims._THREAD, **_EXTRA_THREAD})

_REPLACE: dict[int, Any] = {id(threading): fake_threading, id(_thread): fake_thread,
                            id(prims.fake_threading): fake_threading,
                            id(prims.fake_thread): fake_thread}
for _real, _table in ((threading, _EXTRA_THREADING), (_thread, _EXTRA_THREAD)):
    for _attr, _fake in _table.items():
        _REPLACE[id(getattr(_real, _attr))] = _fake


def patch(namespace: dict[str, Any]) -> list[str]:
    """Everything P04 controls, in a learner module's namespace: threads' identity,
    threading/time (``prims``) and descriptors (``io``)."""
    swapped = []
    for key, value in list(namespace.items()):
        fake = _REPLACE.get(id(value))
        if fake is not None and not key.startswith("__"):
            namespace[key] = fake
            swapped.append(key)
    swapped += prims.patch(namespace) + io.patch(namespace)
    for key, value in list(namespace.items()):  # prims put its own facades in: widen them
        fake = _REPLACE.get(id(value))
        if fake is not None and not key.startswith("__"):
            namespace[key] = fake
    # A threading.local made when the module was imported (before this patch) is the real
    # one, per real thread: in the module or in one of its classes, it becomes per task.
    module = namespace.get("__name__")
    for key, value in list(namespace.items()):
        if type(value) is threading.local:
            namespace[key] = local()
            swapped.append(key)
        elif isinstance(value, type) and value.__module__ == module:
            for attr, inner in list(vars(value).items()):
                if type(inner) is threading.local:
                    setattr(value, attr, local())
                    swapped.append(f"{key}.{attr}")
    return swapped


class Logged(logging.Handler):
    """Log records emitted on controlled threads, handed to ``on_record(record)``."""

    def __init__(self, on_record: Any) -> None:
        super().__init__(logging.DEBUG)
        self.on_record = on_record

    def emit(self, record: logging.LogRecord) -> None:
        if _task() is not None:
            self.on_record(record)

    def __enter__(self) -> "Logged":
        """Be the root logger's only handler meanwhile: thousands of runs log on purpose,
        and none of it belongs in the check's captured output."""
        root = logging.getLogger()
        self._saved = root.handlers[:]
        root.handlers[:] = [self]
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().handlers[:] = self._saved
