"""Pitfall: an asyncio.Queue used across threads.

put_nowait() from a producer thread resolves the consumer's future without writing to the
loop's self-pipe, so a loop asleep in select() is not woken (and asyncio.Queue is not
thread-safe to begin with).
"""
import asyncio


class OutputSink:
    def __init__(self):
        self.wakeups_scheduled = 0
        self.after_empty_drain = None
        self._queue = None
        self._early = []

    def bind_loop(self, loop=None):
        self._queue = asyncio.Queue()
        for item in self._early:
            self._queue.put_nowait(item)

    def put(self, item):
        if self._queue is None:
            self._early.append(item)
        else:
            self._queue.put_nowait(item)  # WRONG: called from the producer thread

    async def get_batch(self, max_items=1024, timeout=None):
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        if self._queue.empty() and self.after_empty_drain is not None:
            self.after_empty_drain()
        try:
            if timeout is not None and timeout <= 0:
                first = self._queue.get_nowait()
            else:
                first = await asyncio.wait_for(self._queue.get(), timeout)
        except (asyncio.TimeoutError, asyncio.QueueEmpty):
            return []
        batch = [first]
        while len(batch) < max_items and not self._queue.empty():
            batch.append(self._queue.get_nowait())
        return batch
