"""BREAKS: "put(item): ... never blocks on the consumer ... (under a short threading.Lock) if no
wakeup is in flight: mark one in flight and count it in wakeups_scheduled; outside the lock
call loop.call_soon_threadsafe(event.set)" (skeleton: "holding no lock while it calls").

HOW: the learner moved call_soon_threadsafe inside the ``with self._lock`` block ("so the flag
and the wakeup are one atomic step").  call_soon_threadsafe is a system call (a write to the
loop's self-pipe) and, with a wrapper loop, arbitrary code.  While producer A is inside it
(preempted, or the wrapper is slow), producer B's put() -- which only has to see "in flight"
and leave -- blocks on the lock, and so does the consumer's arm on the loop thread.  The demo
holds A inside the wrapper's call_soon_threadsafe and checks that B's put returns within
0.5 s.
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
            if self._wakeup_in_flight or self._loop is None:
                return
            self._wakeup_in_flight = True
            self.wakeups_scheduled += 1
            # schedule the wakeup in the same critical section as the flag
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
