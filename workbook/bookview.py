"""The terminal rendering of a parsed chapter (``./check.sh book pNN``): rich renderables
built from the same blocks the web pages use (``workbook.chapters``)."""
from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from workbook import chapters, timelines
from workbook.run import UsageError


def chapter_view(chapter: chapters.Chapter, *, answers: bool = False,
                 blocks: list[chapters.Block] | None = None) -> RenderableType:
    """The whole chapter (or just ``blocks`` of it); folds closed unless ``answers``."""
    parts = _blocks(chapter, chapter.blocks if blocks is None else blocks, answers)
    return Panel(Group(*parts), title=f"{chapter.problem} · {chapter.title}",
                 title_align="left")


def _blocks(chapter: chapters.Chapter, blocks, answers: bool) -> list[RenderableType]:
    out: list[RenderableType] = []
    for block in blocks:
        if isinstance(block, chapters.Markdown):
            out.append(Markdown(block.text))
        elif isinstance(block, chapters.Heading):
            if out:
                out.append(Text(""))
            out.append(Markdown("#" * block.level + " " + block.text))
        elif isinstance(block, chapters.TimelineRef):
            out.append(timeline_view(block.name))
        elif isinstance(block, chapters.PitfallDiff):
            out.append(pitfall_diff_view(chapter.problem, block.name))
        elif isinstance(block, chapters.Fold):
            out.append(fold_view(chapter, block, answers))
    return out


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
    parts.append(table)
    return Group(*parts)


def _inline(text: str) -> RenderableType:
    return Markdown(text) if text else Text("")


def pitfall_diff_view(problem_id: str, name: str) -> RenderableType:
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
    body.append(Syntax(diff, "diff", theme="ansi_dark", background_color="default"))
    return Panel(Group(*body), title=f"pitfall {name}: the change from the reference",
                 title_align="left", border_style="yellow")


def fold_view(chapter: chapters.Chapter, fold: chapters.Fold, answers: bool) -> RenderableType:
    if not answers:
        return Text.assemble(("▸ ", "bold"), (chapters._plain(fold.summary), "bold"),
                             (f"  (hidden: ./check.sh book {chapter.problem} --answers)", "dim"))
    return Panel(Group(*_blocks(chapter, fold.blocks, answers)),
                 title=f"▾ {chapters._plain(fold.summary)}", title_align="left",
                 border_style="blue")
