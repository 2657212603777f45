"""Checks: a checkpoint failure carries a diagnosis and, where it fits, the name of the
pitfall it looks like; notes are figures a test wants shown next to its checkpoint."""
from __future__ import annotations

from typing import Callable, NoReturn


class Failure(AssertionError):
    """A checkpoint failure with a diagnosis; ``pitfall`` names the mistake it looks like;
    ``timeline`` is the failing run step by step (an explorer's counterexample, in the
    structure of ``workbook.timelines``: ``title``, ``actors``, ``state``, ``steps``, and
    ``text``, the part of ``message`` that draws it as a table)."""

    def __init__(self, message: str, pitfall: str | None = None,
                 timeline: dict | None = None) -> None:
        super().__init__(message)
        self.pitfall = pitfall
        self.timeline = timeline


class Hung(Exception):
    """Injected into a thread that is still running a learner call after its bound."""


def fail(message: str, *, pitfall: str | None = None,
         timeline: dict | None = None) -> NoReturn:
    raise Failure(message, pitfall, timeline)


def check(condition: object, message: str, *, pitfall: str | None = None) -> None:
    if not condition:
        raise Failure(message, pitfall)


#: Where ``note`` sends its text: set by the pytest plugin (``set_note_sink``).
_note_sink: Callable[[str], None] | None = None


def set_note_sink(sink: Callable[[str], None] | None) -> None:
    """Send every ``note`` to ``sink`` (the plugin's report), or nowhere with None."""
    global _note_sink
    _note_sink = sink


def note(text: str) -> None:
    """Show ``text`` under the current checkpoint in the report (no effect outside a check)."""
    sink = _note_sink
    if sink is not None:
        sink(text)
