"""CORRECT: closures instead of stored loop/event for the producer side, and a deadline
enforced by a loop timer instead of asyncio.wait_for.

* bind_loop builds a ``ring`` closure over (loop, event) -- the wrapper object's
  call_soon_threadsafe, RuntimeError swallowed -- and publishes it with the Event under the
  lock; put only needs ``ring``.
* The bounded wait is a plain ``await event.wait()`` plus a ``loop.call_at(deadline, ...)``
  timer (on the running loop, not the wrapper) that sets the event at the one deadline
  computed on entry.  The timer is created at most once per call (re-created only if asyncio
  ran it a clock-resolution early), and always cancelled on the way out, including
  cancellation of the waiting task.
Spec sentences still met: append first; flag check-and-set and the counter under a short
lock; the ring outside the lock; drain / hook (no lock) / arm / drain / wait, no await
between arm and the second drain; a spurious wakeup just goes round again; [] only once the
deadline has passed; timeout <= 0 is one look (both drains) and [] at once.
"""
from __future__ import annotations

import asyncio
import collections
import threading
from typing import Callable


class OutputSink:
    def __init__(self) -> None:
        self._items: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._in_flight = False
        self._ring: Callable[[], None] | None = None
        self._event: asyncio.Event | None = None
        self.wakeups_scheduled = 0
        self.after_empty_drain: Callable[[], None] | None = None

    def bind_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        target = loop if loop is not None else asyncio.get_running_loop()
        event = asyncio.Event()

        def ring() -> None:
            try:
                target.call_soon_threadsafe(event.set)
            except RuntimeError:  # loop closed: nobody to wake
                pass

        with self._lock:
            self._event, self._ring = event, ring

    def put(self, item: object) -> None:
        self._items.append(item)
        with self._lock:
            ring = self._ring
            if ring is None or self._in_flight:
                return
            self._in_flight = True
            self.wakeups_scheduled += 1
        ring()

    def _drain(self, n: int) -> list:
        pop, out = self._items.popleft, []
        try:
            while len(out) < n:
                out.append(pop())
        except IndexError:
            pass
        return out

    async def get_batch(self, max_items: int = 1024, timeout: float | None = None) -> list:
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        loop = asyncio.get_running_loop()
        event = self._event
        deadline = None if timeout is None else loop.time() + timeout
        timer = None
        fired = [False]

        def at_deadline() -> None:
            fired[0] = True
            event.set()

        try:
            while True:
                batch = self._drain(max_items)
                if batch:
                    return batch
                if self.after_empty_drain is not None:
                    self.after_empty_drain()
                event.clear()
                with self._lock:
                    self._in_flight = False
                batch = self._drain(max_items)
                if batch:
                    return batch
                if deadline is not None:
                    if loop.time() >= deadline:
                        return []
                    if timer is None or fired[0]:
                        fired[0] = False
                        timer = loop.call_at(deadline, at_deadline)
                await event.wait()
        finally:
            if timer is not None:
                timer.cancel()
