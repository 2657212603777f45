"""Pitfall: more than max_items returned in one batch (the drain ignores the limit)."""
from solutions.p01_output_sink import OutputSink as _Reference


class OutputSink(_Reference):
    def _drain(self, max_items):
        out = []
        while True:  # WRONG: takes everything, whatever max_items says
            try:
                out.append(self._items.popleft())
            except IndexError:
                return out
