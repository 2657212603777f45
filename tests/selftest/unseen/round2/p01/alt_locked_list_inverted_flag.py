"""CORRECT: a different data/locking structure from the reference.

* The items live in a plain ``list`` guarded by the sink's one ``threading.Lock`` (no
  reliance on deque's atomic append/popleft): put appends under the lock and, in the same
  short critical section, right after the append, does the flag check-and-set; a drain
  slices the batch off under the same lock.  The lock is still only held for a few list
  operations, never across a call-out, an await or the hook.
* The flag is stored inverted, as "a bell is wanted" (True = no wakeup in flight).
* The loop and the Event are published as one tuple in a single store.
* The bounded wait is ``asyncio.wait_for`` + ``asyncio.TimeoutError`` (3.10-safe).
Every sentence of the P01 spec still holds: append before the flag, one call_soon_threadsafe
per cycle made outside the lock, drain / hook / arm / drain / wait with no await between the
arm and the second drain, one deadline computed on entry.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Callable


class OutputSink:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list = []          # guarded by _lock
        self._bell_wanted = True        # guarded by _lock; == not "wakeup in flight"
        self._binding: tuple | None = None   # (loop, event); one store
        self.wakeups_scheduled = 0
        self.after_empty_drain: Callable[[], None] | None = None

    def bind_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if loop is None:
            loop = asyncio.get_running_loop()
        binding = (loop, asyncio.Event())
        with self._lock:
            self._binding = binding

    def put(self, item: object) -> None:
        with self._lock:
            self._items.append(item)            # first the item ...
            binding = self._binding
            if binding is None or not self._bell_wanted:
                return                          # ... then, maybe, the bell
            self._bell_wanted = False
            self.wakeups_scheduled += 1
        loop, event = binding
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:
            pass

    def _take(self, max_items: int) -> list:
        with self._lock:
            batch = self._items[:max_items]
            del self._items[:max_items]
        return batch

    async def get_batch(self, max_items: int = 1024, timeout: float | None = None) -> list:
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1 (got {max_items!r})")
        loop = asyncio.get_running_loop()
        event = self._binding[1]
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            batch = self._take(max_items)
            if batch:
                return batch
            hook = self.after_empty_drain
            if hook is not None:
                hook()
            event.clear()
            with self._lock:
                self._bell_wanted = True
            batch = self._take(max_items)
            if batch:
                return batch
            if deadline is None:
                await event.wait()
                continue
            left = deadline - loop.time()
            if left <= 0:
                return []
            try:
                await asyncio.wait_for(event.wait(), left)
            except asyncio.TimeoutError:
                pass
