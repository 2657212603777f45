"""Pitfall: items beyond max_items are dropped instead of staying queued."""
from solutions.p01_output_sink import OutputSink as _Reference


class OutputSink(_Reference):
    def _drain(self, max_items):
        out = []
        while True:
            try:
                out.append(self._items.popleft())
            except IndexError:
                return out[:max_items]  # WRONG: the rest is thrown away
