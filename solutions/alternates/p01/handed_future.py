"""P01, another correct style: the consumer hands the Future it will sleep on to the producers.

One lock guards the pending list and the published Future.  "No wakeup in flight" means a
Future is published: the put that finds one takes it (later puts find none) and resolves it
through call_soon_threadsafe.  Arming publishes a fresh Future.  bind_loop publishes the
first one, so the first put after it schedules a wakeup.  Batches are cut from a list
swapped out under the lock; the wait uses asyncio.wait with what is left of the deadline.
"""
import asyncio
import threading


def _resolve(future):
    if not future.done():
        future.set_result(None)


class OutputSink:
    def __init__(self):
        self._lock = threading.Lock()  # guards _pending, _published, _loop, the count
        self._pending = []
        self._published = None  # the Future the next wakeup resolves; None: one in flight
        self._loop = None
        self.wakeups_scheduled = 0
        self.after_empty_drain = None

    def bind_loop(self, loop=None):
        loop = loop if loop is not None else asyncio.get_running_loop()
        first = loop.create_future()
        with self._lock:
            self._loop, self._published = loop, first

    def put(self, item):
        with self._lock:
            self._pending.append(item)
            future, self._published = self._published, None
            if future is None:
                return
            self.wakeups_scheduled += 1
            loop = self._loop
        try:
            loop.call_soon_threadsafe(_resolve, future)
        except RuntimeError:
            pass

    def _cut(self, n):
        with self._lock:
            if len(self._pending) <= n:
                batch, self._pending = self._pending, []
            else:
                batch, self._pending = self._pending[:n], self._pending[n:]
        return batch

    async def get_batch(self, max_items=1024, timeout=None):
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            batch = self._cut(max_items)
            if batch:
                return batch
            if self.after_empty_drain is not None:
                self.after_empty_drain()
            sleeper = loop.create_future()
            with self._lock:
                self._published = sleeper
            batch = self._cut(max_items)
            if batch:
                return batch
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return []
            await asyncio.wait({sleeper}, timeout=left)
