"""BREAKS: "bind_loop(loop=None): with no argument uses asyncio.get_running_loop(); creates the
asyncio.Event here."

HOW: the Event is created once in __init__ (allowed since Python 3.10, where asyncio
primitives no longer take a loop at construction) and bind_loop only records the loop.  But
since 3.10 an asyncio.Event binds itself to the loop of the first wait() that has to sleep.
A sink that served one loop (asyncio.run #1: bind_loop(), get_batch(timeout=0.05) sleeps ->
the Event is now tied to loop #1) and is then bound to another loop (asyncio.run #2:
bind_loop(), get_batch(timeout=0.05)) raises ``RuntimeError: ... is bound to a different
event loop`` instead of returning [] -- bind_loop did not give the new loop a new Event.
(On 3.9 and earlier the same code would have bound the Event to get_event_loop() at
construction instead.)
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
        # Python >= 3.10: asyncio primitives do not need a running loop to be created
        self._event = asyncio.Event()

    def bind_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        loop = loop if loop is not None else asyncio.get_running_loop()
        with self._lock:
            self._loop = loop

    def put(self, item: object) -> None:
        self._items.append(item)
        with self._lock:
            loop = self._loop
            if self._wakeup_in_flight or loop is None:
                return
            self._wakeup_in_flight = True
            self.wakeups_scheduled += 1
        try:
            loop.call_soon_threadsafe(self._event.set)
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
        deadline = None if timeout is None else loop.time() + timeout
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
