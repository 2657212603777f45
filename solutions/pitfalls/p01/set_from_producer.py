"""Pitfall: event.set() called directly from the producer thread.

asyncio.Event is not thread-safe: setting it from another thread marks the waiter's future
done but never writes to the loop's self-pipe, so a loop asleep in select() stays asleep.
"""
from solutions.p01_output_sink import OutputSink as _Reference


class OutputSink(_Reference):
    def put(self, item):
        self._items.append(item)
        with self._lock:
            if self._wakeup_in_flight or self._loop is None:
                return
            self._wakeup_in_flight = True
            self.wakeups_scheduled += 1
        self._event.set()  # WRONG: must go through loop.call_soon_threadsafe
