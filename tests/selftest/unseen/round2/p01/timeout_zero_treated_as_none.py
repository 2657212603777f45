"""BREAKS: "get_batch(max_items, timeout) ... returns [] only when timeout seconds pass with
nothing available (None = wait forever; <= 0 = one non-blocking look)."

HOW: the deadline is computed as ``loop.time() + timeout if timeout else None``.  ``0`` and
``0.0`` are falsy, so ``get_batch(timeout=0)`` on an empty sink is treated like
``timeout=None`` and waits forever instead of returning ``[]`` at once after one look.
(Negative timeouts still work, which hides the bug from a quick test with ``-1``.)
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
        self._wakeup_in_flight = False
        self.wakeups_scheduled = 0
        self.after_empty_drain: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        loop = loop if loop is not None else asyncio.get_running_loop()
        event = asyncio.Event()
        with self._lock:
            self._loop, self._event = loop, event

    def put(self, item: object) -> None:
        self._items.append(item)
        with self._lock:
            loop, event = self._loop, self._event
            if self._wakeup_in_flight or loop is None or event is None:
                return
            self._wakeup_in_flight = True
            self.wakeups_scheduled += 1
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:
            pass

    def _drain(self, max_items: int) -> list:
        out = []
        while len(out) < max_items:
            try:
                out.append(self._items.popleft())
            except IndexError:
                break
        return out

    async def get_batch(self, max_items: int = 1024, timeout: float | None = None) -> list:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, not {max_items}")
        loop = asyncio.get_running_loop()
        # no timeout given -> no deadline
        deadline = loop.time() + timeout if timeout else None
        while True:
            batch = self._drain(max_items)
            if batch:
                return batch
            if self.after_empty_drain is not None:
                self.after_empty_drain()
            self._event.clear()
            with self._lock:
                self._wakeup_in_flight = False
            batch = self._drain(max_items)
            if batch:
                return batch
            if deadline is None:
                await self._event.wait()
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            try:
                await asyncio.wait_for(self._event.wait(), remaining)
            except asyncio.TimeoutError:
                pass
