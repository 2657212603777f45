"""BREAKS: "put(item): callable from any thread; never blocks on the consumer; items of one
producer come out in the order that producer put them" and get_batch "Returns 1..max_items
items, oldest first" -- i.e. nothing put is ever lost.

HOW: to make a drain O(1) the consumer swaps the whole buffer under the lock
(``items, self._items = self._items, deque()``) and keeps the leftovers beyond max_items by
swapping back.  But put() appends *without* the lock (``self._items.append(item)``, as the
spec says: append first, the lock is only for the flag).  A producer that has already loaded
the old deque (``self._items.append`` evaluated, the C call not yet made) when the consumer
swaps appends its item to the orphaned deque: it is never returned.  Interleaving: put('a')
done; producer B evaluates ``self._items.append``; consumer get_batch() swaps, returns ['a'];
B's append lands in the old deque; every later get_batch misses 'b'.  The demo holds B at the
C call to deque.append (sys.setprofile 'c_call') while the consumer takes a batch.
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
        # Take the whole buffer in one step instead of popping item by item.
        with self._lock:
            if not self._items:
                return []
            items, self._items = self._items, collections.deque()
        if len(items) <= max_items:
            return list(items)
        batch = [items.popleft() for _ in range(max_items)]
        with self._lock:  # leftovers go back in front of anything put meanwhile
            items.extend(self._items)
            self._items = items
        return batch

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
