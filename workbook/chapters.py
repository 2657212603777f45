"""A chapter parsed once into blocks, rendered alike by the terminal and the web.

A chapter is markdown plus three constructs (format D of the team contracts):

* ``<!-- timeline: p01-lost-wakeup -->`` on a line of its own: a timeline (``book/timelines``);
* ``<!-- pitfall-diff: single_drain -->`` on a line of its own: the pitfall's diff against
  the reference (``solutions/pitfalls/pNN/NAME.diff``);
* a fold ``<details><summary>Answer: ...</summary> ... </details>``: an answer the reader
  opens by choice.

Footnotes are markdown's own (``text[^label]`` and ``[^label]: note``), found by
markdown-it's footnote plugin on the whole chapter: the definitions leave the running text
and become one ``Notes`` block where the first of them stood, numbered in the order of
their first reference; renderers turn each ``[^label]`` into a link (web) or ``[n]``
(terminal).

Every heading gets a stable anchor, its GitHub-style slug; ``<!-- anchor: NAME -->`` on the
line before a heading gives it an explicit one instead (the slug stays as an alias).
Nothing inside a fenced code block is a directive or a heading.
"""
from __future__ import annotations

import re
import textwrap
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Union

from workbook import ROOT, manifest, timelines

DIRECTIVE = re.compile(r"^\s*<!--\s*(timeline|pitfall-diff|anchor)\s*:\s*(\S+?)\s*-->\s*$")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
DETAILS_OPEN = re.compile(r"^\s*<details(?:\s+open)?\s*>\s*(?:<summary>(.*?)</summary>)?\s*$",
                          re.IGNORECASE)
SUMMARY = re.compile(r"^\s*<summary>(.*?)</summary>\s*$", re.IGNORECASE)
DETAILS_CLOSE = re.compile(r"^\s*</details>\s*$", re.IGNORECASE)


class ChapterError(ValueError):
    """A chapter's construct is malformed (an unclosed fold, a stray anchor, ...)."""


@dataclass(frozen=True)
class Markdown:
    text: str


@dataclass(frozen=True)
class Heading:
    level: int
    text: str        # the heading's markdown (inline)
    anchor: str      # the explicit anchor if there is one, else the slug
    slug: str        # the GitHub-style slug (an alias when an explicit anchor exists)
    line: int


@dataclass(frozen=True)
class TimelineRef:
    name: str
    line: int


@dataclass(frozen=True)
class PitfallDiff:
    name: str
    line: int


@dataclass(frozen=True)
class Footnote:
    label: str
    number: int      # 1, 2, ... in the order of the first reference
    text: str        # the note's markdown


@dataclass(frozen=True)
class Notes:
    notes: tuple[Footnote, ...]
    line: int


@dataclass(frozen=True)
class Fold:
    summary: str
    blocks: tuple["Block", ...]
    line: int


Block = Union[Markdown, Heading, TimelineRef, PitfallDiff, Fold, Notes]


@dataclass
class Chapter:
    problem: str
    path: Path
    title: str
    blocks: list[Block]
    headings: list[Heading] = field(default_factory=list)
    footnotes: tuple[Footnote, ...] = ()

    def notes_for(self, blocks: Iterable[Block]) -> tuple[Footnote, ...]:
        """The footnotes that ``blocks`` (a section, say) refer to, in number order."""
        text = "\n".join(b.text for b in _walk(blocks) if isinstance(b, Markdown))
        return tuple(n for n in self.footnotes if f"[^{n.label}]" in text)

    def walk(self) -> Iterator[Block]:
        """Every block, folds' contents included, in reading order."""
        yield from _walk(self.blocks)

    def heading(self, section: str) -> Heading | None:
        """The heading a manifest's ``section`` names: an anchor, a slug or the heading text."""
        wanted = section.strip()
        for h in self.headings:
            if wanted in (h.anchor, h.slug):
                return h
        for h in self.headings:
            if _plain(h.text).casefold() == _plain(wanted).casefold():
                return h
        return None

    def section(self, section: str) -> list[Block]:
        """The heading ``section`` and everything under it, up to the next heading of the
        same or a higher level.  Empty if there is no such heading."""
        head = self.heading(section)
        if head is None:
            return []
        out: list[Block] = []
        for block in self.blocks:
            if out and isinstance(block, Heading) and block.level <= head.level:
                break
            if out or block == head:
                out.append(block)
        return out


def _walk(blocks: Iterable[Block]) -> Iterator[Block]:
    for b in blocks:
        yield b
        if isinstance(b, Fold):
            yield from _walk(b.blocks)


def _plain(text: str) -> str:
    """Heading markdown without its inline markup."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[`*_]{1,3}(?=\S)|(?<=\S)[`*_]{1,3}", "", text).strip()


def slugify(text: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation dropped, spaces become '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LN" or cat == "Mn":
            kept.append(ch)
        elif ch == " ":
            kept.append("-")
    return "".join(kept)


def footnotes(text: str) -> tuple[tuple[Footnote, ...], dict[int, int]]:
    """The chapter's referenced footnotes, and the lines their definitions take
    (line index -> index of the first line of that definition)."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.footnote import footnote_plugin

    env: dict = {}
    tokens = MarkdownIt("commonmark").use(footnote_plugin).parse(text, env)
    lines = text.split("\n")
    notes: list[Footnote] = []
    spans: dict[int, int] = {}
    current: dict | None = None
    for tok in tokens:
        if tok.type == "footnote_open":
            current = {"meta": tok.meta, "start": None, "end": None}
        elif tok.type == "footnote_close" and current is not None:
            start, end = current["start"], current["end"]
            label, number = current["meta"]["label"], current["meta"]["id"] + 1
            if start is None:  # an empty note
                notes.append(Footnote(label, number, ""))
            else:
                first = lines[start].split("]:", 1)[1] if "]:" in lines[start] else ""
                body = textwrap.dedent("\n".join(lines[start + 1:end]))
                notes.append(Footnote(label, number, (first.strip() + "\n" + body).strip()))
                spans.update({i: start for i in range(start, end)})
            current = None
        elif current is not None and tok.map:
            lo, hi = tok.map
            current["start"] = lo if current["start"] is None else min(current["start"], lo)
            current["end"] = hi if current["end"] is None else max(current["end"], hi)
    return tuple(sorted(notes, key=lambda n: n.number)), spans


def parse(text: str, *, problem: str = "", path: Path | None = None) -> Chapter:
    lines = text.split("\n")
    notes, spans = footnotes(text) if "[^" in text else ((), {})
    used: dict[str, int] = {}
    headings: list[Heading] = []
    blocks, end = _parse_blocks(lines, 0, headings, used, top=True, notes=(notes, spans))
    title = next((_plain(h.text) for h in headings if h.level == 1), problem)
    return Chapter(problem=problem, path=path or Path("<text>"), title=title, blocks=blocks,
                   headings=headings, footnotes=notes)


def _parse_blocks(lines: list[str], i: int, headings: list[Heading], used: dict[str, int], *,
                  top: bool, notes: tuple[tuple[Footnote, ...], dict[int, int]] = ((), {})
                  ) -> tuple[list[Block], int]:
    """Blocks from ``lines[i:]`` up to the end (top level) or the closing ``</details>``."""
    blocks: list[Block] = []
    buf: list[str] = []
    fence: str | None = None
    anchor: tuple[str, int] | None = None

    def flush() -> None:
        if any(line.strip() for line in buf):
            blocks.append(Markdown("\n".join(buf).strip("\n") + "\n"))
        buf.clear()

    while i < len(lines):
        line = lines[i]
        if fence is not None:
            buf.append(line)
            m = FENCE.match(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not line.strip()[len(m.group(1)):].strip():
                fence = None
            i += 1
            continue
        if i in notes[1]:  # a footnote definition: all of them become one Notes block
            if notes[0] and not any(isinstance(b, Notes) for b in blocks):
                flush()
                blocks.append(Notes(notes[0], i + 1))
                notes = ((), notes[1])
            i += 1
            continue
        m = FENCE.match(line)
        if m:
            fence = m.group(1)
            buf.append(line)
            i += 1
            continue
        if anchor is not None and line.strip() and not HEADING.match(line):
            raise ChapterError(f"line {anchor[1]}: <!-- anchor: {anchor[0]} --> is not "
                               f"directly followed by a heading")
        d = DIRECTIVE.match(line)
        if d:
            kind, name = d.groups()
            flush()
            if kind == "timeline":
                blocks.append(TimelineRef(name, i + 1))
            elif kind == "pitfall-diff":
                blocks.append(PitfallDiff(name, i + 1))
            else:
                anchor = (name, i + 1)
            i += 1
            continue
        h = HEADING.match(line)
        if h:
            flush()
            level, htext = len(h.group(1)), h.group(2)
            slug = _unique(slugify(htext), used)
            name = slug
            if anchor is not None:
                name = anchor[0]
                if name in used and name != slug:
                    raise ChapterError(f"line {anchor[1]}: anchor {name!r} is used twice")
                used[name] = used.get(name, 0) + 1
                anchor = None
            heading = Heading(level, htext, name, slug, i + 1)
            headings.append(heading)
            blocks.append(heading)
            i += 1
            continue
        o = DETAILS_OPEN.match(line)
        if o:
            flush()
            start = i + 1
            summary = o.group(1)
            i += 1
            if summary is None:
                while i < len(lines) and not lines[i].strip():
                    i += 1
                s = SUMMARY.match(lines[i]) if i < len(lines) else None
                if not s:
                    raise ChapterError(f"line {start}: <details> needs a <summary>...</summary>")
                summary = s.group(1)
                i += 1
            inner, i = _parse_blocks(lines, i, headings, used, top=False, notes=notes)
            blocks.append(Fold(summary.strip(), tuple(inner), start))
            continue
        if DETAILS_CLOSE.match(line):
            if top:
                raise ChapterError(f"line {i + 1}: </details> without <details>")
            flush()
            return blocks, i + 1
        buf.append(line)
        i += 1
    if not top:
        raise ChapterError("a <details> fold is never closed")
    if fence is not None:
        raise ChapterError("a fenced code block is never closed")
    flush()
    return blocks, i


def _unique(slug: str, used: dict[str, int]) -> str:
    n = used.get(slug, 0)
    used[slug] = n + 1
    return slug if n == 0 else f"{slug}-{n}"


def load(problem: manifest.Problem) -> Chapter:
    path = problem.chapter_file
    return parse(path.read_text("utf-8"), problem=problem.id, path=path)


def pitfall_diff_file(problem_id: str, name: str) -> Path:
    return ROOT / "solutions" / "pitfalls" / problem_id / f"{name}.diff"


def read_pitfall_diff(problem_id: str, name: str) -> tuple[str, str]:
    """(explanation, diff) of a shipped pitfall: the free text before the first ``---``
    line, and the unified diff itself.  ``FileNotFoundError`` if it does not exist."""
    path = pitfall_diff_file(problem_id, name)
    if not path.is_file():
        raise FileNotFoundError(path)
    try:  # the variants mechanism is the one reader of diffs
        from workbook import variants
        problem = manifest.get(problem_id)
        parsed = variants.parse(variants.Variant(problem, "pitfall", name, path, "", ()))
        return parsed.explanation, parsed.diff
    except (ImportError, KeyError):
        pass
    lines = path.read_text("utf-8").split("\n")
    for i, line in enumerate(lines):
        if line.startswith("--- "):
            return "\n".join(lines[:i]).strip(), "\n".join(lines[i:]).rstrip("\n") + "\n"
    return "\n".join(lines).strip(), ""


def changed_lines(diff: str) -> str:
    """A unified diff cut down to what changes: the hunk headers, the removed and added lines,
    and, for orientation, the ``def``/``class`` lines among the context.  The rest of the
    context is the reference's own code, which a chapter read before solving must not show."""
    keep = []
    for line in diff.splitlines():
        if line.startswith(("--- ", "+++ ")):
            continue
        if line.startswith(("@@", "-", "+")):
            keep.append(line)
        elif line[1:].lstrip().startswith(("def ", "async def ", "class ")):
            keep.append(line)
    return "\n".join(keep) + "\n"


def problems_of_directives(chapter: Chapter, *, strict: bool = False) -> list[str]:
    """Readable problems with the chapter's directives: missing timelines, unknown pitfalls,
    missing diffs.  A declared pitfall still shipped as the old ``.py`` module (not yet
    converted to a diff) passes unless ``strict``."""
    problems: list[str] = []
    for block in chapter.walk():
        if isinstance(block, TimelineRef):
            try:
                tl = timelines.load(block.name)
            except timelines.TimelineError as exc:
                problems.append(f"{chapter.path.name}:{block.line}: {exc}")
                continue
            if tl.problem != chapter.problem:
                problems.append(f"{chapter.path.name}:{block.line}: timeline {block.name} "
                                f"belongs to {tl.problem}, not {chapter.problem}")
        elif isinstance(block, PitfallDiff):
            path = pitfall_diff_file(chapter.problem, block.name)
            where = f"{chapter.path.name}:{block.line}: pitfall-diff {block.name}"
            try:
                declared = block.name in {p.name for p in manifest.get(chapter.problem).pitfalls}
            except KeyError:
                declared = False
            if not declared:
                problems.append(f"{where}: no such pitfall in the manifest of {chapter.problem}")
            elif not path.is_file():
                legacy = path.with_suffix(".py").is_file()  # not converted to a diff yet
                if strict or not legacy:
                    problems.append(f"{where}: {path.relative_to(ROOT)} does not exist")
    return problems
