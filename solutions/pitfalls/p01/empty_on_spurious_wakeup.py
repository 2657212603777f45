"""Pitfall: [] returned as soon as a wakeup finds nothing, before the deadline.

A wakeup can be spurious (a stale set of the event, a wakeup for items already taken);
only the deadline may end the wait with an empty batch.
"""
import asyncio

from solutions.p01_output_sink import OutputSink as _Reference


class OutputSink(_Reference):
    async def get_batch(self, max_items=1024, timeout=None):
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        woken = False
        while True:
            batch = self._drain(max_items)
            if batch or woken and deadline is not None:
                return batch  # WRONG: a wakeup that found nothing ends the wait
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
                woken = True
            except asyncio.TimeoutError:
                pass
