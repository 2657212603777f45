"""The event loop of a controlled P01 run: a real ``asyncio.SelectorEventLoop`` whose clock
and selector belong to the explorer's scheduler.

Nothing of asyncio is imitated.  The loop is the standard library's selector loop -- its
ready queue, timers, ``call_soon_threadsafe``, self-pipe, tasks and futures all run as
they do in production -- with two parts swapped, the way a test swaps a clock:

- ``time()`` reads the scheduler's virtual clock (the same one ``time.monotonic()`` reads in
  the learner's module), so a timer fires when virtual time reaches it;
- the selector is a real one (``selectors.DefaultSelector``: the self-pipe and any fd the
  learner registers are real), except that where ``select(timeout)`` would put the thread to
  sleep with nothing ready, the loop thread parks in the scheduler instead, with the
  timeout as its deadline.  Whatever writes the loop's self-pipe through
  ``call_soon_threadsafe`` makes it ready again at once; ``wake_if_ready`` also looks at the
  real fds when nothing else can run (a byte written to a pipe some other way).

``Loop.call_soon_threadsafe`` also reports every call to the run (``Watcher``): who called it
from which line, whether through the object given to ``bind_loop``, and it may let the
calling thread stall there for a while (virtual time) before or after the self-pipe write,
as a descheduled producer would, or have the callback delivered late, as a slow wrapper
would.  Each select() that returns is a point where another
thread may run first, and one that returns late lets virtual time jump (a long loop turn).
"""
from __future__ import annotations

import asyncio
import selectors
from typing import Any, Callable, Protocol

from workbook.explore.prims import tick
from workbook.explore.sched import BASE, TASKS, Scheduler


class Watcher(Protocol):
    """What the loop tells the run (``p01.Run`` implements it)."""

    def before_call(self, loop: "Loop", callback: Callable[..., Any], args: tuple,
                    wrapped: bool) -> tuple[Callable[..., Any], tuple] | None: ...

    def after_call(self, raised: BaseException | None) -> None: ...

    def selecting(self, timeout: float | None) -> float | None: ...

    def selected(self, reason: Any) -> None: ...


class Selector(selectors.BaseSelector):
    """A real selector whose sleeps are the scheduler's (see the module docstring)."""

    def __init__(self, sched: Scheduler) -> None:
        self._real = selectors.DefaultSelector()
        self.sched = sched
        self.watcher: Watcher | None = None
        self.asleep = False  # the loop thread is parked in select() right now
        self.ending = False  # the run is over: never park again (the cleanup runs the loop)

    # the bookkeeping is the real selector's
    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None) -> list:
        ready = self._real.select(0)
        s = self.sched
        task = TASKS.get(_ident())
        if self.ending or task is None or task.sched is not s:
            return ready  # outside the run (its cleanup): a look, never a sleep
        if ready or (timeout is not None and timeout <= 0):
            s.point()
            if self.watcher is not None:
                self.watcher.selected(None)
            return ready
        deadline = None if timeout is None else s.now + timeout
        if self.watcher is not None:
            deadline = self.watcher.selecting(deadline)
        self.asleep = True
        try:
            reason = s.block(task, self, deadline, what="the event loop's select()")
        finally:
            self.asleep = False
        if self.watcher is not None:
            self.watcher.selected(reason)
        return self._real.select(0)

    def wake_if_ready(self) -> bool:
        """Make the parked loop thread ready if one of its real fds is (True if so)."""
        if self.asleep and self._real.select(0):
            return bool(self.sched.wake(self))
        return False


def _ident() -> int:
    import _thread
    return _thread.get_ident()


class Loop(asyncio.SelectorEventLoop):  # type: ignore[misc,valid-type]
    """The standard selector event loop on the scheduler's clock and selector."""

    def __init__(self, sched: Scheduler) -> None:
        self.selector = Selector(sched)
        self._sched = sched
        self._through_wrapper = 0  # > 0 while a Wrapper forwards a call
        super().__init__(self.selector)
        self.set_exception_handler(_quiet)

    def time(self) -> float:
        return BASE + tick(self._sched)  # no point here

    def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> Any:
        watcher = self.selector.watcher
        mine = TASKS.get(_ident()) is not None and watcher is not None
        if mine:  # the watcher may have the call delivered otherwise (later, say)
            instead = watcher.before_call(self, callback, args, self._through_wrapper > 0)
            if instead is not None:
                callback, args = instead
        try:
            handle = super().call_soon_threadsafe(callback, *args, context=context)
        except BaseException as exc:
            if mine:
                watcher.after_call(exc)
            raise
        if self.selector.asleep:  # the self-pipe byte just written wakes the sleeper
            self._sched.wake(self.selector)
        if mine:
            watcher.after_call(None)
        return handle


class Wrapper:
    """What a test may hand to ``bind_loop`` instead of the loop: it forwards
    ``call_soon_threadsafe`` (and everything else) to the loop."""

    def __init__(self, loop: Loop) -> None:
        self._wrapped = loop

    def call_soon_threadsafe(self, callback: Any, *args: Any, **kwargs: Any) -> Any:
        loop = self._wrapped
        loop._through_wrapper += 1
        try:
            return loop.call_soon_threadsafe(callback, *args, **kwargs)
        finally:
            loop._through_wrapper -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)

    def __repr__(self) -> str:
        return "<a wrapper of the loop>"


def _quiet(loop: Any, context: dict) -> None:
    """A run's leftovers (a task still pending when the run was given up) say nothing."""


def shut(loop: Loop) -> None:
    """After a run (from the thread that ran it, or the controller): cancel what is still
    pending, let it unwind for a few turns that never sleep, and close the loop."""
    loop.selector.ending = True
    if loop.is_closed():
        return
    if not loop.is_running():
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            for _ in range(4 if pending else 1):
                loop.call_soon(loop.stop)
                loop.run_forever()
        except BaseException:  # noqa: BLE001 - a learner's finally: nothing to judge now
            pass
    try:
        loop.close()
    except BaseException:  # noqa: BLE001 - still running in an abandoned thread
        pass


class Resumed:
    """Awaits ``inner`` exactly as ``await inner`` does, and calls ``on_resume`` each time the
    loop resumes it after it suspended (the consumer woke, whatever woke it).
    ``gi_yieldfrom`` lets ``awaiting_line`` walk on to the learner's frames."""

    def __init__(self, inner: Any, on_resume: Callable[[], None]) -> None:
        self.gi_yieldfrom = inner
        self._it = inner.__await__()
        self._on_resume = on_resume
        self._started = False

    def __await__(self) -> "Resumed":
        return self

    def __iter__(self) -> "Resumed":
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        if self._started:
            self._on_resume()
        self._started = True
        return self._it.send(value)

    def throw(self, *exc: Any) -> Any:
        self._on_resume()
        return self._it.throw(*exc)

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


def awaiting_line(task: Any, files: frozenset[str]) -> tuple[int | None, str]:
    """The learner's line a suspended asyncio task is waiting at (innermost), if any."""
    import linecache

    coro = task.get_coro() if task is not None else None
    found: tuple[int | None, str] = (None, "")
    seen = 0
    while coro is not None and seen < 20:
        seen += 1
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None and frame.f_code.co_filename in files:
            found = (frame.f_lineno, linecache.getline(frame.f_code.co_filename,
                                                       frame.f_lineno).strip())
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return found


__all__ = ["Loop", "Resumed", "Selector", "Wrapper", "Watcher", "shut", "awaiting_line"]
