"""BREAKS: put() is "callable from any thread, at any time, even while bind_loop runs in
another thread; never blocks on the consumer" (skeleton docstring), and the spec's
"bind_loop(loop=None): ... creates the asyncio.Event here" together with "put(item): callable
from any thread".

HOW: bind_loop assigns ``self._loop`` first and only then creates and assigns ``self._event``;
put() reads ``self._loop`` (not None) and later ``self._event`` without taking both under the
lock.  A put from a producer thread that runs between the two assignments in bind_loop
raises ``AttributeError: 'NoneType' object has no attribute 'set'`` (and leaves the flag
"in flight" with no wakeup scheduled).  Forced in the demo by making ``asyncio.Event()``
(called by bind_loop) run a put in another thread.
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
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._event = asyncio.Event()

    def put(self, item: object) -> None:
        self._items.append(item)
        if self._loop is None:  # not bound yet: the consumer will find it on its first call
            return
        with self._lock:
            if self._wakeup_in_flight:
                return
            self._wakeup_in_flight = True
            self.wakeups_scheduled += 1
        try:
            self._loop.call_soon_threadsafe(self._event.set)
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
