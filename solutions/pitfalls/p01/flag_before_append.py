"""Pitfall: the flag is checked and set before the item is appended.

The wakeup can reach the consumer before the item does: it drains nothing, re-arms and
sleeps; the append that follows sees "in flight" already handled and wakes nobody.
"""
from solutions.p01_output_sink import OutputSink as _Reference


class OutputSink(_Reference):
    def put(self, item):
        if self._loop is None:
            self._items.append(item)
            return
        with self._lock:
            schedule = not self._wakeup_in_flight
            if schedule:
                self._wakeup_in_flight = True
                self.wakeups_scheduled += 1
        if schedule:
            try:
                self._loop.call_soon_threadsafe(self._event.set)
            except RuntimeError:
                pass
        self._items.append(item)  # WRONG: appended after the wakeup went out
