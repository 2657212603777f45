"""Pitfall: after_empty_drain is called while holding the lock that put() needs.

The hook (like any callback) may call put() from another thread and wait for it; that put
blocks on the lock held by get_batch: deadlock.
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
            self._event.clear()
            with self._lock:
                if self.after_empty_drain is not None:
                    self.after_empty_drain()  # WRONG: called with the lock held
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
