"""A counterexample as the book prints its timelines: one column per thread, one row per
step, each cell naming what the thread did and, where it was in the learner's file, the
line.  ``as_timeline`` gives the same rows in the structure of ``workbook.timelines`` (the
book's ``[[steps]]``) for front ends that step through them."""
from __future__ import annotations

import textwrap
from typing import Sequence

from workbook.explore.sched import BASE, Event

WIDTH = 34


def _cell(event: Event) -> str:
    text = event.text
    if event.line is not None:
        text += f" · line {event.line}: {event.source}" if event.source else f" · line {event.line}"
    return text


def rows(events: Sequence[Event], names: Sequence[str]) -> list[tuple[str, float, list[str]]]:
    """(label, virtual time, one cell per thread) for each event worth showing."""
    out = []
    for n, event in enumerate(events, 1):
        cells = [""] * len(names)
        if 0 <= event.task < len(names):
            cells[event.task] = _cell(event)
        else:
            cells = [_cell(event)] + [""] * (len(names) - 1)
        out.append((str(n), event.now, cells))
    return out


def render(events: Sequence[Event], names: Sequence[str], width: int = WIDTH) -> str:
    """The timeline as fixed-width text (it goes into a failure message)."""
    head = ["step", "time"] + list(names)
    table = rows(events, names)
    lines = [f"{head[0]:>4}  {head[1]:>5}  " + " | ".join(f"{h:<{width}}" for h in head[2:])]
    lines.append("-" * len(lines[0]))
    for label, now, cells in table:
        wrapped = [textwrap.wrap(c, width) or [""] for c in cells]
        height = max(len(w) for w in wrapped)
        for k in range(height):
            left = f"{label:>4}  {now:>5.2f}  " if k == 0 else " " * 13
            lines.append(left + " | ".join(
                f"{(w[k] if k < len(w) else ''):<{width}}" for w in wrapped).rstrip())
    return "\n".join(lines)


def as_timeline(events: Sequence[Event], names: Sequence[str], title: str) -> dict:
    """The book's timeline document (``workbook.timelines.parse`` reads it)."""
    return {"title": title, "actors": list(names), "state": ["time"],
            "steps": [{"label": label, "do": cells, "state": [f"{now:g}"]}
                      for label, now, cells in rows(events, names)]}


__all__ = ["render", "rows", "as_timeline", "BASE"]
