"""The terminal rendering of a parsed chapter (``./check.sh book pNN``): rich renderables
built from the same blocks the web pages use (``workbook.chapters``).

Made for an 80-column terminal: a ``<br>`` in a table cell is a line break, footnote
references are ``[n]`` with the notes listed where the chapter keeps them, a timeline too
wide for the terminal is shown one step at a time, diffs wrap instead of being cut, and a
pitfall's diff stays folded (only the changed lines, with ``--answers``).
"""
from __future__ import annotations

import re

from markdown_it.token import Token
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import Markdown as RichMarkdown
from rich.markdown import TableElement
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from workbook import chapters, timelines
from workbook.run import UsageError

BR = re.compile(r"^<br\s*/?>$", re.IGNORECASE)


class _FoldingTable(TableElement):
    """A markdown table whose too-long words fold onto the next line instead of ending in
    an ellipsis: a cut header or name (``head_equals_tai…``) cannot be read back."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for table in super().__rich_console__(console, options):
            for column in getattr(table, "columns", ()):
                column.overflow = "fold"
            yield table


class Markdown(RichMarkdown):
    """rich's Markdown, plus a line break for an inline ``<br>`` (rich drops inline HTML,
    which runs the names in a table cell together) and tables that fold, never cut."""

    elements = {**RichMarkdown.elements, "table_open": _FoldingTable}

    def __init__(self, markup: str, **kwargs) -> None:
        super().__init__(markup, **kwargs)
        for token in self.parsed:
            if token.children:
                token.children = [Token("hardbreak", "br", 0)
                                  if t.type == "html_inline" and BR.match(t.content.strip())
                                  else t for t in token.children]


def _with_note_numbers(text: str, chapter: chapters.Chapter) -> str:
    for note in chapter.footnotes:
        text = text.replace(f"[^{note.label}]", f"[{note.number}]")
    return text


def chapter_view(chapter: chapters.Chapter, *, answers: bool = False,
                 blocks: list[chapters.Block] | None = None) -> RenderableType:
    """The whole chapter (or just ``blocks`` of it); folds closed unless ``answers``."""
    items = list(chapter.blocks if blocks is None else blocks)
    if blocks is not None and not any(isinstance(b, chapters.Notes) for b in items):
        shown = chapter.notes_for(items)  # a section alone: its own notes at its end
        if shown:
            items.append(chapters.Notes(shown, 0))
    parts = _blocks(chapter, items, answers)
    return Panel(Group(*parts), title=f"{chapter.problem} · {chapter.title}",
                 title_align="left")


def notes_view(chapter: chapters.Chapter, notes) -> RenderableType:
    return Group(*(Markdown(f"**[{n.number}]** " + _with_note_numbers(n.text, chapter))
                   for n in notes))


def _blocks(chapter: chapters.Chapter, blocks, answers: bool) -> list[RenderableType]:
    out: list[RenderableType] = []
    for block in blocks:
        if isinstance(block, chapters.Markdown):
            out.append(Markdown(_with_note_numbers(block.text, chapter)))
        elif isinstance(block, chapters.Notes):
            out.append(notes_view(chapter, block.notes))
        elif isinstance(block, chapters.Heading):
            if out:
                out.append(Text(""))
            out.append(Markdown("#" * block.level + " " + block.text))
        elif isinstance(block, chapters.TimelineRef):
            out.append(timeline_view(block.name))
        elif isinstance(block, chapters.PitfallDiff):
            out.append(pitfall_diff_view(chapter.problem, block.name, answers=answers))
        elif isinstance(block, chapters.Fold):
            out.append(fold_view(chapter, block, answers))
    return out


class _Timeline:
    """The timeline's table when it fits the width; otherwise one small table per step
    (an 80-column terminal cannot show six columns without cutting their headers)."""

    def __init__(self, tl: timelines.Timeline, table: Table) -> None:
        self.tl, self.table = tl, table

    def _fits(self, console: Console, options: ConsoleOptions) -> bool:
        """Whether rich lays the table out at this width without cutting a word (it ends a
        cut one with an ellipsis, which the timeline's own text never contains)."""
        lines = console.render_lines(self.table, options, pad=False)
        return not any("…" in seg.text for line in lines for seg in line)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self._fits(console, options):
            yield self.table
            return
        yield Text(f"{self.tl.title} (one step at a time: the table is wider than the "
                   f"terminal)", style="bold")
        for step in self.tl.steps:
            rows = Table(show_header=False, box=None, padding=(0, 1), expand=True)
            rows.add_column(style="bold", no_wrap=True, max_width=max(12, options.max_width // 3))
            rows.add_column(ratio=1)
            for actor, cell in zip(self.tl.actors, step.do):
                if cell:
                    rows.add_row(actor, _inline(cell))
            for name, cell in zip(self.tl.state, step.state):
                rows.add_row(Text(name, style="cyan"), _inline(cell))
            if step.note:
                rows.add_row(Text("note", style="dim"), _inline(step.note))
            yield Panel(rows, title=f"step {step.label}", title_align="left",
                        border_style="dim")


def timeline_view(name: str) -> RenderableType:
    try:
        tl = timelines.load(name)
    except timelines.TimelineError as exc:
        return Text(f"[timeline {name}: {exc}]", style="red")
    table = Table(title=tl.title, title_justify="left", show_lines=True,
                  title_style="bold", expand=True)
    table.add_column("step", style="bold", no_wrap=True)
    for actor in tl.actors:
        table.add_column(actor, ratio=3)
    for col in tl.state:
        table.add_column(col, style="cyan", ratio=1)
    has_notes = any(s.note for s in tl.steps)
    if has_notes:
        table.add_column("note", style="dim", ratio=2)
    for step in tl.steps:
        cells = [Text(step.label)] + [_inline(c) for c in step.do] + \
                [_inline(c) for c in step.state]
        if has_notes:
            cells.append(_inline(step.note))
        table.add_row(*cells)
    parts: list[RenderableType] = []
    if tl.intro:
        parts.append(Markdown(tl.intro))
    parts.append(_Timeline(tl, table))
    return Group(*parts)


def _inline(text: str) -> RenderableType:
    return Markdown(text) if text else Text("")


def pitfall_diff_view(problem_id: str, name: str, *, answers: bool = True) -> RenderableType:
    """Folded unless ``answers``; open, the changed lines only, wrapped, never cut."""
    if not answers:
        return Text.assemble(("▸ ", "bold"), (f"pitfall {name}: the lines it changes", "bold"),
                             (f"  (hidden: --answers, or ./check.sh {problem_id} --pitfall "
                              f"{name} --show)", "dim"))
    try:
        why, diff = chapters.read_pitfall_diff(problem_id, name)
    except FileNotFoundError:
        path = chapters.pitfall_diff_file(problem_id, name)
        return Text(f"[pitfall {name}: {path.name} is not there yet]", style="yellow")
    except UsageError as exc:  # a malformed diff (variants.VariantError)
        return Text(f"[pitfall {name}: {exc}]", style="red")
    body: list[RenderableType] = []
    if why:
        body.append(Markdown(why))
    body.append(Syntax(chapters.changed_lines(diff).rstrip("\n"), "diff", theme="ansi_dark",
                       background_color="default", word_wrap=True))
    return Panel(Group(*body), title=f"pitfall {name}: the change from the reference",
                 title_align="left", border_style="yellow")


def fold_view(chapter: chapters.Chapter, fold: chapters.Fold, answers: bool) -> RenderableType:
    if not answers:
        return Text.assemble(("▸ ", "bold"), (chapters._plain(fold.summary), "bold"),
                             (f"  (hidden: ./check.sh book {chapter.problem} --answers)", "dim"))
    return Panel(Group(*_blocks(chapter, fold.blocks, answers)),
                 title=f"▾ {chapters._plain(fold.summary)}", title_align="left",
                 border_style="blue")
