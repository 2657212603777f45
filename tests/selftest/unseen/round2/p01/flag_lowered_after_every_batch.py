"""BREAKS: "A wakeup cycle runs from the put that flips "in flight" False->True to the
consumer's next arm. At most one call_soon_threadsafe per cycle; wakeups_scheduled counts
cycles." (worked example: put a, b, c; get_batch(max_items=2) -> ['a','b']; again -> ['c'];
put("d") -> wakeups_scheduled still 1).

HOW: the learner lowers the "in flight" flag whenever get_batch hands out a batch ("the
consumer has emptied the queue, so the next item needs a new bell"), not only when it arms
before sleeping.  The consumer is awake and will drain again before it sleeps, yet the next
put rings: in the worked example put("d") makes wakeups_scheduled 2, and a busy consumer
pulling batch after batch pays one call_soon_threadsafe per batch.
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

    def _take(self, max_items: int) -> list:
        batch = self._drain(max_items)
        if batch:
            # delivered: the wakeup that was in flight has done its job
            with self._lock:
                self._wakeup_in_flight = False
        return batch

    async def get_batch(self, max_items: int = 1024, timeout: float | None = None) -> list:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, not {max_items}")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            batch = self._take(max_items)
            if batch:
                return batch
            if self.after_empty_drain is not None:
                self.after_empty_drain()
            self._event.clear()
            with self._lock:
                self._wakeup_in_flight = False
            batch = self._take(max_items)
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
