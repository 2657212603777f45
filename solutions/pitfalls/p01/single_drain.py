"""Pitfall: single drain -- the consumer arms and sleeps without looking at the queue again.

A put that lands between the empty drain and the re-arm sees the old "in flight" flag,
schedules nothing, and its item sits in the queue until the next put or the timeout.
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
            batch = self._drain(max_items)
            if batch:
                return batch
            if self.after_empty_drain is not None:
                self.after_empty_drain()
            self._event.clear()
            with self._lock:
                self._wakeup_in_flight = False
            # WRONG: no second drain here.
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
