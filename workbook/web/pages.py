"""What the index and problem pages show, computed once for the server and the static site."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from workbook import ROOT, book_sections, chapters, manifest, progress
from workbook.render import shown_path
from workbook.web import html

HINT_LABELS = {1: "light spoiler", 2: "medium spoiler", 3: "heavy spoiler"}
HINT_TITLES = {1: "examples and key questions", 2: "approach and common traps",
               3: "answers, traces, skeleton hints"}


@dataclass
class Card:
    id: str
    title: str
    summary: str
    minutes: int
    difficulty: str
    file: str
    command: str
    checkpoints: int
    done: bool = False
    done_at: str | None = None
    last_check: dict | None = None
    hints_seen: int = 0
    next: bool = False

    path: str | None = None  # the learner file, for "file changed since"

    @property
    def _entry(self) -> dict:
        return {"done_at": self.done_at, "last_check": self.last_check} if self.done \
            else {"last_check": self.last_check}

    @property
    def status(self) -> str:
        """The same line as ``./check.sh status``, with the last check's time and where it
        ran (the terminal or the page)."""
        text = progress.status_text(self._entry, self.path)
        last = self.last_check or {}
        if last.get("at"):
            text += f" · checked {last['at'][5:16]}" + (f" ({last['source']})"
                                                       if last.get("source") else "")
        return text

    @property
    def state(self) -> str:
        """"done", "done_failed" (done, but the last check failed) or "open": what the
        navigation's mark and the card's tick show."""
        if not self.done:
            return "open"
        return "done_failed" if progress.last_failed(self._entry) else "done"

    @property
    def changed(self) -> bool:
        """The file differs from the one the last check ran on."""
        return bool(self.path) and progress.changed_since(self._entry, self.path)

    @property
    def last_line(self) -> str:
        """The line above the last result: when and where it was checked, its tally, and
        whether the file changed since."""
        last = self.last_check
        if not last:
            return "Not checked yet: run the checks."
        where = {"terminal": " in the terminal", "page": " on this page"}.get(
            last.get("source") or "", "")
        text = (f"Last check {progress.when(last.get('at'))}{where}: {last.get('passed')} of "
                f"{last.get('total')} checkpoints passed.")
        if self.changed:
            text += " The file changed since: run the checks again."
        return text

    def live(self) -> dict:
        """What a page updates in place when progress changes (the navigation's mark, the
        card's status, the last-check line)."""
        return {"id": self.id, "done": self.done, "state": self.state, "status": self.status,
                "changed": self.changed, "last_line": self.last_line,
                "hints_seen": self.hints_seen, "next": self.next}


def learner_file(problem: manifest.Problem, mine: Path | None) -> Path:
    return (mine / f"{problem.module}.py") if mine else problem.learner_file


def cards(data: dict | None = None, mine: Path | None = None) -> list[Card]:
    data = progress.load() if data is None else data
    out = []
    for p in manifest.problems().values():
        e = progress.entry(data, p.id)
        out.append(Card(
            id=p.id, title=p.title, summary=p.summary, minutes=p.minutes,
            difficulty=p.difficulty, file=shown_path(learner_file(p, mine)),
            command=f"./check.sh {p.id}", checkpoints=len(p.checkpoints),
            done=bool(e.get("done_at")), done_at=e.get("done_at"),
            last_check=e.get("last_check"), hints_seen=int(e.get("hints_seen", 0)),
            path=str(learner_file(p, mine))))
    for c in out:  # the next problem to do: the first one not done
        if not c.done:
            c.next = True
            break
    return out


def card(problem_id: str, mine: Path | None = None) -> Card:
    return next(c for c in cards(mine=mine) if c.id == problem_id)


@dataclass
class Hint:
    level: int
    label: str
    title: str
    html: str


@dataclass
class Chapter:
    problem: manifest.Problem
    html: str
    toc: list[tuple[str, str]]              # (anchor, plain text) of the top sections
    sections: dict[str, str] = field(default_factory=dict)   # manifest section -> anchor
    titles: dict[str, str] = field(default_factory=dict)     # manifest section -> heading


@lru_cache(maxsize=None)
def _chapter_cached(problem_id: str, mtimes: tuple) -> Chapter:
    problem = manifest.get(problem_id)
    ch = chapters.load(problem)
    body = html.blocks(ch, [b for b in ch.blocks
                            if not (isinstance(b, chapters.Heading) and b.level == 1)])
    toc = [(h.anchor, chapters._plain(h.text)) for h in ch.headings if h.level == 2]
    sections, titles = {}, {}
    for s in {cp.section for cp in problem.checkpoints} | {p.section for p in problem.pitfalls}:
        h = ch.heading(s)
        if h is not None:
            sections[s], titles[s] = h.anchor, chapters._plain(h.text)
    return Chapter(problem, body, toc, sections, titles)


@dataclass
class ExtraChapter:
    """A chapter that belongs to no problem (the closing one): its own page."""
    name: str
    title: str
    html: str
    toc: list[tuple[str, str]]


@lru_cache(maxsize=None)
def _extra_cached(name: str, mtime: int) -> ExtraChapter:
    ch = book_sections.load_extra(name)
    body = html.blocks(ch, [b for b in ch.blocks
                            if not (isinstance(b, chapters.Heading) and b.level == 1)])
    toc = [(h.anchor, chapters._plain(h.text)) for h in ch.headings if h.level == 2]
    return ExtraChapter(name, ch.title, body, toc)


def extra_chapter(name: str) -> ExtraChapter:
    """``designs``: the closing chapter, re-rendered when its file changes."""
    return _extra_cached(name, book_sections.EXTRA[name].stat().st_mtime_ns)


EXTRA_TITLES = {"designs": "Designs"}  # the name in the site's navigation


def chapter(problem: manifest.Problem) -> Chapter:
    """The chapter as HTML; re-rendered when the chapter or a timeline file changes."""
    files = [problem.chapter_file, *sorted((ROOT / "book" / "timelines").glob(f"{problem.id}-*"))]
    return _chapter_cached(problem.id, tuple((str(f), f.stat().st_mtime_ns) for f in files
                                             if f.exists()))


def _hint_chapter(problem: manifest.Problem, level: int) -> chapters.Chapter:
    path = problem.hint_file(level)
    return chapters.parse(path.read_text("utf-8"), problem=problem.id, path=path)


def hint_title(ch: chapters.Chapter, level: int) -> str:
    """What the level is about, from its file's title ("...: examples and key questions")."""
    _, sep, tail = ch.title.partition(":")
    return tail.strip() if sep and tail.strip() else HINT_TITLES[level]


@lru_cache(maxsize=None)
def _hint_cached(problem_id: str, level: int, mtime: int) -> Hint:
    problem = manifest.get(problem_id)
    ch = _hint_chapter(problem, level)
    items = [b for b in ch.blocks if not (isinstance(b, chapters.Heading) and b.level == 1)]
    return Hint(level, HINT_LABELS[level], hint_title(ch, level),
                html.blocks(ch, items, anchor_prefix=f"hint-L{level}-", shift=2))


def hint(problem: manifest.Problem, level: int) -> Hint:
    """A hint level, rendered; re-rendered when its file changes.  Reading it is not opening
    it: only the server's POST records a level (``progress.record_hint``)."""
    return _hint_cached(problem.id, level, problem.hint_file(level).stat().st_mtime_ns)


def hints(problem: manifest.Problem) -> list[Hint]:
    """All three levels: the page folds the ones not opened yet (see problem.html)."""
    return [hint(problem, level) for level in (1, 2, 3)]


def reference(problem: manifest.Problem) -> str:
    return html.python(problem.solution_file.read_text("utf-8"))
