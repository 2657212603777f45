"""Pitfall: the event is never cleared.

Once a wakeup has set it, event.wait() returns at once every time: an empty wait turns
into a loop that spins (and burns a core) until its deadline.
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
            with self._lock:  # WRONG: re-armed without self._event.clear()
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
