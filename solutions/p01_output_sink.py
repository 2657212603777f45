"""P01 · OutputSink — batched wakeups from producer threads into an asyncio loop.

Reference solution.  The whole trick is the order of four steps in ``get_batch``:
drain, arm, drain again, wait.  See book/p01_output_sink.md.
"""
from __future__ import annotations

import asyncio
import collections
import threading
from typing import Callable


class OutputSink:
    """Items go in from any thread with ``put``; one asyncio consumer takes them in batches."""

    def __init__(self) -> None:
        # Items waiting for the consumer.  deque.append / popleft are atomic in CPython, so
        # the data itself needs no lock: only the flag below does.
        self._items: collections.deque = collections.deque()
        # Guards _wakeup_in_flight and wakeups_scheduled.  Held only for a check-and-set;
        # nobody ever waits or calls out while holding it.
        self._lock = threading.Lock()
        # True from the put that schedules a wakeup until the consumer re-arms.
        # Invariant: items queued  =>  the consumer is awake, or a wakeup is in flight
        #            (True here), or the consumer will drain again before it sleeps.
        self._wakeup_in_flight = False
        self.wakeups_scheduled = 0
        self.after_empty_drain: Callable[[], None] | None = None  # test hook
        # Set once by bind_loop, together and under the lock: a put sees both or neither.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Attach the consumer's loop (default: the running one) and create the Event."""
        loop = loop if loop is not None else asyncio.get_running_loop()
        event = asyncio.Event()
        with self._lock:  # publish the pair at once: a racing put sees both or neither
            self._loop, self._event = loop, event

    def put(self, item: object) -> None:
        """Queue ``item``; wake the consumer unless a wakeup is already on its way."""
        self._items.append(item)  # first: whoever sees the flag set can rely on the item
        with self._lock:
            loop, event = self._loop, self._event
            if self._wakeup_in_flight or loop is None or event is None:
                return
            self._wakeup_in_flight = True
            self.wakeups_scheduled += 1
        # Outside the lock: this queues the callback and writes a byte to the loop's
        # self-pipe -- a system call, too slow to make other producers wait for.
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # the loop is closed: nobody is left to wake
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
        """Return 1..max_items items, oldest first; ``[]`` only once ``timeout`` has passed."""
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, not {max_items}")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout  # one deadline, fixed
        while True:
            batch = self._drain(max_items)
            if batch:
                return batch
            if self.after_empty_drain is not None:
                self.after_empty_drain()  # holding no lock: the hook may call put()
            # Arm: from here on, a put must schedule a new wakeup.
            self._event.clear()
            with self._lock:
                self._wakeup_in_flight = False
            # Drain again, with no await in between: a put that landed after the first
            # drain but saw the old "in flight" flag did not wake us -- its item is here.
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
                pass  # loop once more: the deadline check above returns [] after a drain
