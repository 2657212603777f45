"""BREAKS: "get_batch(max_items, timeout): ... returns [] only when timeout seconds pass with
nothing available" -- on every supported Python (workbook: "Python >= 3.10").

HOW: the bounded wait is ``asyncio.wait_for(event.wait(), remaining)`` guarded by
``except TimeoutError:`` (the builtin).  From 3.11 on ``asyncio.TimeoutError`` *is* the
builtin ``TimeoutError``, so this works on the learner's 3.11 machine.  On 3.10,
``asyncio.wait_for`` raises ``asyncio.exceptions.TimeoutError``, a separate class that does
not derive from the builtin one: ``await s.get_batch(timeout=0.05)`` on an empty sink raises
``asyncio.TimeoutError`` instead of returning ``[]``.  The demo runs it for real on 3.10 and,
on 3.11+, simulates 3.10 by giving the module an asyncio whose wait_for raises a distinct
TimeoutError class exactly like 3.10's.
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
            except TimeoutError:
                pass  # deadline reached: the check above returns [] on the next turn
