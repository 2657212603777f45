"""P01, another correct style: a fresh Future for every sleep instead of an asyncio.Event.

Arming creates the Future the consumer will await; the wakeup callback resolves whatever
Future is current.  A wakeup that finds no Future (or a done one) is simply spurious.
"""
import asyncio
import collections
import threading


class OutputSink:
    def __init__(self):
        self._items = collections.deque()
        self._lock = threading.Lock()  # guards _in_flight and wakeups_scheduled
        self._in_flight = False
        self.wakeups_scheduled = 0
        self.after_empty_drain = None
        self._loop = None
        self._sleeper = None  # the Future the consumer sleeps on; loop thread only

    def bind_loop(self, loop=None):
        self._loop = loop if loop is not None else asyncio.get_running_loop()

    def _wake(self):  # runs on the loop thread
        if self._sleeper is not None and not self._sleeper.done():
            self._sleeper.set_result(None)

    def put(self, item):
        self._items.append(item)
        with self._lock:
            if self._in_flight or self._loop is None:
                return
            self._in_flight = True
            self.wakeups_scheduled += 1
        try:
            self._loop.call_soon_threadsafe(self._wake)
        except RuntimeError:
            pass

    def _drain(self, n):
        out = []
        while self._items and len(out) < n:
            out.append(self._items.popleft())
        return out

    async def get_batch(self, max_items=1024, timeout=None):
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            out = self._drain(max_items)
            if out:
                return out
            if self.after_empty_drain is not None:
                self.after_empty_drain()
            self._sleeper = loop.create_future()
            with self._lock:
                self._in_flight = False
            out = self._drain(max_items)
            if out:
                return out
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return []
            timer = None if left is None else loop.call_later(left, self._wake)
            try:
                await self._sleeper
            finally:
                if timer is not None:
                    timer.cancel()
