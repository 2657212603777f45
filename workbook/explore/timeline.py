"""A counterexample as the book prints its timelines: one column per thread, one row per
step, each cell naming what the thread did and, where it was in the learner's file, the
line.  ``as_timeline`` gives the same rows in the structure of ``workbook.timelines`` (the
book's ``[[steps]]``) for front ends that step through them."""
from __future__ import annotations

import textwrap
from typing import Sequence

from workbook.explore.sched import BASE, Event

#: The whole table fits this many columns (a terminal panel, a failure message).
TOTAL = 76


#: A step (or a pair of steps) repeated more often than this in a row is shown this many
#: times, then once as a count, then its last time: a thread that polls a hundred times
#: is one story, not a hundred rows.
KEEP = 2


def _key(event: Event) -> tuple:
    return event.task, event.text, event.line


def collapse(events: Sequence[Event], keep: int = KEEP) -> list[Event]:
    """``events`` with each long run of one repeated step, or of one repeated pair of steps
    (a wait and its time-out), cut to ``keep`` repeats, a line counting the rest, and the
    last repeat."""
    out: list[Event] = []
    i = 0
    while i < len(events):
        for period in (1, 2):
            block = [_key(e) for e in events[i:i + period]]
            repeats = 1
            while [_key(e) for e in events[i + repeats * period:i + (repeats + 1) * period]] \
                    == block:
                repeats += 1
            if len(block) == period and repeats > keep + 2:
                out.extend(events[i:i + keep * period])
                last = i + (repeats - 1) * period
                hidden = repeats - keep - 1
                what = "step" if period == 1 else "two steps"
                out.append(Event(events[last - 1].step, events[i].task, events[last - 1].now,
                                 f"… the same {what} {hidden} more times …"))
                out.extend(events[last:last + period])
                i += repeats * period
                break
        else:
            out.append(events[i])
            i += 1
    return out


def _cell(event: Event) -> str:
    return event.text + (f" (L{event.line})" if event.line is not None else "")


def rows(events: Sequence[Event], names: Sequence[str]) -> list[tuple[str, float, list[str]]]:
    """(label, virtual time, one cell per thread) for each event worth showing."""
    out = []
    for n, event in enumerate(collapse(events), 1):
        cells = [""] * len(names)
        if 0 <= event.task < len(names):
            cells[event.task] = _cell(event)
        else:
            cells = [_cell(event)] + [""] * (len(names) - 1)
        out.append((str(n), event.now, cells))
    return out


def render(events: Sequence[Event], names: Sequence[str], total: int = TOTAL) -> str:
    """The timeline as fixed-width text: what the setup (column 0) did first as a list,
    then one column per thread, then the learner's lines the cells name."""
    setup = [e for e in events if e.task == 0]
    rest = collapse([e for e in events if e.task != 0])
    cols = list(names[1:])
    width = max(14, (total - 13) // max(len(cols), 1) - 3)
    lines = []
    shown = {}
    if setup:
        told = [e for e in setup if e.kind in ("call", "return")]
        if setup[-1].kind not in ("call", "return"):
            told.append(setup[-1])  # where the setup stopped: it never returned
        for event in told:
            if event.line is not None:
                shown[event.line] = event.source
        lines.append("setup (alone, before the threads start): "
                     + "; ".join(_cell(e) for e in told))
        lines.append("")
    lines.append(f"{'step':>4}  {'time':>5}  " + " | ".join(f"{h:<{width}}" for h in cols))
    lines.append("-" * min(len(lines[-1]), total))
    for n, event in enumerate(rest, 1):
        cells = [""] * len(cols)
        k = event.task - 1
        cells[k if 0 <= k < len(cols) else 0] = _cell(event)
        if event.line is not None:
            shown[event.line] = event.source
        wrapped = [textwrap.wrap(c, width) or [""] for c in cells]
        for r in range(max(len(w) for w in wrapped)):
            left = f"{n:>4}  {event.now:>5.2f}  " if r == 0 else " " * 13
            lines.append(left + " | ".join(
                f"{(w[r] if r < len(w) else ''):<{width}}" for w in wrapped).rstrip())
    if shown:
        lines.append("")
        lines.append("lines of your file named above:")
        for line in sorted(shown):
            lines.append(f"  L{line}: {shown[line]}")
    return "\n".join(lines)


def as_timeline(events: Sequence[Event], names: Sequence[str], title: str) -> dict:
    """The book's timeline document (``workbook.timelines.parse`` reads it)."""
    return {"title": title, "actors": list(names), "state": ["time"],
            "steps": [{"label": label, "do": cells, "state": [f"{now:g}"]}
                      for label, now, cells in rows(events, names)]}


__all__ = ["render", "rows", "as_timeline", "collapse", "BASE"]
