"""Pitfall: call_soon_threadsafe on every put.

Correct, but every item pays for a system call (a byte written to the loop's self-pipe)
and a trip around the loop: 1000 puts cost 1000 wakeups instead of one per burst.
"""
from solutions.p01_output_sink import OutputSink as _Reference


class OutputSink(_Reference):
    def put(self, item):
        self._items.append(item)
        if self._loop is None:
            return
        with self._lock:
            self._wakeup_in_flight = True
            self.wakeups_scheduled += 1
        try:
            self._loop.call_soon_threadsafe(self._event.set)  # WRONG: no "in flight" check
        except RuntimeError:
            pass
