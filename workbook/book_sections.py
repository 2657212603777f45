"""``./check.sh book pNN --section NAME``: find one section of a chapter by a fuzzy name.

A manifest or a diagnosis names a section exactly (an anchor such as ``pitfall-single_drain``,
a heading's slug, or its text); a reader types something close to it ("single drain",
"lost wakeup", "unregister").  ``find`` tries, in order: an exact anchor, slug or heading
text (``chapters.Chapter.heading``); a heading whose words contain the query's words; the
closest heading by ``difflib``.  Nothing close enough is a one-line usage error.

Chapters that belong to no problem (the closing chapter) are listed in ``EXTRA``.
"""
from __future__ import annotations

import difflib
import re

from workbook import ROOT, chapters

EXTRA = {"designs": ROOT / "book" / "closing_designs.md"}


class NoSection(LookupError):
    """No heading matches the query; the message is one readable line, then the closest
    headings, one per line."""


def load_extra(name: str) -> chapters.Chapter:
    path = EXTRA[name]
    return chapters.parse(path.read_text("utf-8"), problem=name, path=path)


def _words(text: str) -> str:
    """Lowercase words only: markup, punctuation, '-' and '_' become single spaces."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return " ".join(re.findall(r"[^\W_]+", text.casefold()))


def find(chapter: chapters.Chapter, query: str) -> chapters.Heading:
    exact = chapter.heading(query)
    if exact is not None:
        return exact
    wanted = _words(query)
    if not wanted:
        raise NoSection(f"empty section name {query!r}")
    names = {h: (_words(h.text), _words(h.anchor)) for h in chapter.headings if h.level > 1}
    tokens = wanted.split()
    hits = [h for h, (title, anchor) in names.items()
            if all(t in title.split() or t in anchor.split() for t in tokens)
            or wanted in title or wanted in anchor]
    if not hits:
        by_text = {}
        for h, (title, anchor) in names.items():
            by_text.setdefault(title, h)
            by_text.setdefault(anchor, h)
        close = difflib.get_close_matches(wanted, list(by_text), n=1, cutoff=0.6)
        hits = [by_text[close[0]]] if close else []
    if not hits:
        near = difflib.get_close_matches(wanted, [t for t, _ in names.values()], n=3, cutoff=0)
        # The closest headings one per line, whole: each is a name to type after --section.
        raise NoSection(f"no section of {chapter.problem} matches {query!r}"
                        + ("; the closest:\n" + "\n".join(f"  {n}" for n in near)
                           if near else ""))
    # Several headings contain the words: the one whose title is closest to the query.
    return max(hits, key=lambda h: difflib.SequenceMatcher(None, wanted, names[h][0]).ratio())
