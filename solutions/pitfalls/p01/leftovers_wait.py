"""Pitfall: the consumer waits for the doorbell before it looks in the queue.

Items left over from a full batch are already queued, but no new wakeup is coming for
them: they wait for the next put (or the timeout) instead of being returned at once.
"""
import asyncio

from solutions.p01_output_sink import OutputSink as _Reference


class OutputSink(_Reference):
    async def get_batch(self, max_items=1024, timeout=None):
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if not self._event.is_set():  # WRONG: wait first, look afterwards
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    return self._drain(max_items)
                try:
                    await asyncio.wait_for(self._event.wait(), remaining)
                except asyncio.TimeoutError:
                    return self._drain(max_items)
            self._event.clear()
            with self._lock:
                self._wakeup_in_flight = False
            batch = self._drain(max_items)
            if batch:
                return batch
            if self.after_empty_drain is not None:
                self.after_empty_drain()
