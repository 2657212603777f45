"""BREAKS: "Append first, then (under a short threading.Lock) if no wakeup is in flight: mark
one in flight and count it in wakeups_scheduled" and "At most one call_soon_threadsafe per
cycle; wakeups_scheduled counts cycles."

HOW: put() tests and sets ``_wakeup_in_flight`` without the lock (the learner reasoned "a
bool read and a bool store are atomic under the GIL"); the lock only protects the counter.
Two producer threads A and B, consumer armed (flag down): A reads the flag (False) and is
preempted before storing True; B reads False too, sets it, counts and calls
call_soon_threadsafe; A resumes, sets it, counts and calls call_soon_threadsafe again.
Result: 2 wakeups scheduled (and 2 self-pipe writes) in one wakeup cycle.  The demo holds A
on the line that stores True until B's put has returned.
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
        self._binding: tuple | None = None  # (loop, event), published in one store

    def bind_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        loop = loop if loop is not None else asyncio.get_running_loop()
        self._binding = (loop, asyncio.Event())

    def put(self, item: object) -> None:
        self._items.append(item)
        binding = self._binding
        if binding is None or self._wakeup_in_flight:
            return  # not bound yet, or a wakeup is already on its way
        self._wakeup_in_flight = True
        with self._lock:
            self.wakeups_scheduled += 1
        loop, event = binding
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
        event = self._binding[1]
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            batch = self._drain(max_items)
            if batch:
                return batch
            if self.after_empty_drain is not None:
                self.after_empty_drain()
            event.clear()
            self._wakeup_in_flight = False
            batch = self._drain(max_items)
            if batch:
                return batch
            if deadline is None:
                await event.wait()
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except asyncio.TimeoutError:
                pass
