"""P01, another correct style: one lock guards a plain list *and* the flag.

No reliance on deque's atomicity: put() appends and checks the flag in one critical
section, so "item queued" and "wakeup decided" can never be seen apart.  The waiting uses
asyncio.wait() on a task instead of wait_for().
"""
import asyncio
import threading


class OutputSink:
    def __init__(self):
        self._lock = threading.Lock()  # guards _pending and _armed
        self._pending = []
        self._armed = True  # True: the next put must wake the consumer
        self.wakeups_scheduled = 0
        self.after_empty_drain = None
        self._loop = None
        self._event = None

    def bind_loop(self, loop=None):
        loop = loop or asyncio.get_running_loop()
        event = asyncio.Event()
        with self._lock:  # put() reads both under this lock: it sees the pair or nothing
            self._loop, self._event = loop, event

    def put(self, item):
        with self._lock:
            self._pending.append(item)
            loop, event = self._loop, self._event
            wake = self._armed and loop is not None
            if wake:
                self._armed = False
                self.wakeups_scheduled += 1
        if wake:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass

    def _take(self, n):
        with self._lock:
            batch, self._pending = self._pending[:n], self._pending[n:]
        return batch

    async def get_batch(self, max_items=1024, timeout=None):
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            batch = self._take(max_items)
            if batch:
                return batch
            if self.after_empty_drain:
                self.after_empty_drain()
            self._event.clear()
            with self._lock:
                self._armed = True
            batch = self._take(max_items)
            if batch:
                return batch
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return []
            waiter = asyncio.ensure_future(self._event.wait())
            done, _ = await asyncio.wait({waiter}, timeout=left)
            if not done:
                waiter.cancel()
