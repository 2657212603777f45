"""Pitfall: the full timeout restarts on every turn of the loop.

Each spurious wakeup gives the wait a fresh `timeout` seconds, so a steady trickle of them
keeps get_batch waiting far past the deadline the caller asked for.
"""
import asyncio

from solutions.p01_output_sink import OutputSink as _Reference


class OutputSink(_Reference):
    async def get_batch(self, max_items=1024, timeout=None):
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
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
            if timeout is not None and timeout <= 0:
                return []
            try:
                # WRONG: `timeout` again on every turn instead of what is left of a deadline
                await asyncio.wait_for(self._event.wait(), timeout)
            except asyncio.TimeoutError:
                return self._drain(max_items)
