"""The hints and the book name only what the checker has: every checkpoint id they mention
(``p03.interrupt``) is in the problem's manifest (``workbook/problems/pNN.toml``), and every
``--pitfall NAME`` / ``--wrong NAME`` they tell the reader to run is a declared variant.  A
hint that names a checkpoint the acceptance set no longer has sends a learner nowhere.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.selftest.conftest import PROBLEMS
from workbook import ROOT, book_sections, chapters, manifest

#: ``p03.interrupt``; not ``p01.md`` or ``p04.toml`` (files), not part of a longer word.
CHECKPOINT = re.compile(r"(?<![\w/.])(p0\d)\.([a-z][a-z0-9_]*)\b(?!\.)")
FILE_SUFFIXES = {"md", "py", "toml", "diff", "json"}
#: a section named after the word "chapter": "The frame" or *Timeline: the waker*
QUOTED = re.compile(r'"([^"\n]+)"|(?<![*\w])\*([^*\n]+)\*(?!\*)')
VARIANT = re.compile(r"--(pitfall|wrong)[ =]([a-z_][a-z0-9_]*)\b")  # NAME is a placeholder


def _texts(problem: manifest.Problem) -> list[Path]:
    return [problem.hint_file(level) for level in (1, 2, 3)] + [problem.chapter_file]


def named_checkpoints(text: str) -> set[str]:
    return {f"{p}.{name}" for p, name in CHECKPOINT.findall(text) if name not in FILE_SUFFIXES}


def named_variants(text: str) -> set[tuple[str, str]]:
    return set(VARIANT.findall(text))


def test_the_scanners_find_what_they_should():
    # the patterns themselves: a check that finds nothing would pass vacuously
    text = ("see `p03.interrupt` and p01.fifo; not book/p01.md nor p04.toml; "
            "run `./check.sh p03 --pitfall swallow_interrupt` or --wrong interrupt_loses_wakeup")
    assert named_checkpoints(text) == {"p03.interrupt", "p01.fifo"}
    assert named_variants(text) == {("pitfall", "swallow_interrupt"),
                                    ("wrong", "interrupt_loses_wakeup")}


def unknown_checkpoints(text: str) -> list[str]:
    """The checkpoint ids ``text`` (a hint or a chapter) names that no manifest declares.
    Another problem's existing id is fine: the chapters compare designs."""
    everyone = {cp.id for p in PROBLEMS for cp in p.checkpoints}
    return sorted(cp for cp in named_checkpoints(text) if cp not in everyone)


def test_a_made_up_checkpoint_id_is_reported():
    # the check below must be able to fail: an id one letter off, one of no problem, and a
    # real one side by side
    p03 = next(p for p in PROBLEMS if p.id == "p03")
    real = p03.checkpoints[0].id
    text = f"`{real}`, `p03.interupt`, `p07.fifo` and `p01.made_up_checkpoint`"
    assert unknown_checkpoints(text) == ["p01.made_up_checkpoint", "p03.interupt",
                                              "p07.fifo"]
    assert unknown_checkpoints(f"only `{real}`") == []


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_hints_and_chapter_name_only_existing_checkpoints(problem):
    bad = [f"{path.relative_to(ROOT)}: {cp}"
           for path in _texts(problem)
           for cp in unknown_checkpoints(path.read_text("utf-8"))]
    assert not bad, "checkpoints named but not in any manifest:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", sorted(book_sections.EXTRA))
def test_the_closing_chapter_names_only_existing_checkpoints(name):
    path = book_sections.EXTRA[name]
    assert not unknown_checkpoints(path.read_text("utf-8")), path.name


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_hints_and_chapter_name_only_declared_variants(problem):
    declared = {("pitfall", p.name) for p in problem.pitfalls}
    declared |= {("wrong", w.name) for w in problem.wrongs}
    bad = [f"{path.relative_to(ROOT)}: --{kind} {name}"
           for path in _texts(problem)
           for kind, name in sorted(named_variants(path.read_text("utf-8")))
           if (kind, name) not in declared]
    assert not bad, f"variants not declared in {problem.id}.toml:\n" + "\n".join(bad)


def test_every_hint_level_exists_and_every_checkpoints_hint_level_is_shipped():
    for problem in PROBLEMS:
        for cp in problem.checkpoints:
            assert problem.hint_file(cp.hint).is_file(), (problem.id, cp.id, cp.hint)


def named_sections(text: str) -> set[str]:
    """Quoted names that follow the word "chapter" in a paragraph: the sections a hint or a
    skeleton sends the reader to (``Chapter: sections "The design" and "Pitfalls".``)."""
    out = set()
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        at = para.casefold().find("chapter")
        if at >= 0:
            out |= {a or b for a, b in QUOTED.findall(para[at:])}
    return out


def _prose_of(path: Path) -> str:
    """A hint's text, or a skeleton's docstrings and comments (not its code)."""
    text = path.read_text("utf-8")
    if path.suffix != ".py":
        return text
    tree = ast.parse(text)
    docs = [ast.get_docstring(node) or "" for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))]
    comments = [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]
    return "\n\n".join(docs + ["\n".join(comments)])


def test_the_section_scanner_finds_quoted_names_after_chapter():
    text = ('Chapter: sections "The design" and\n"Pitfalls".\n\n"Not this" one.\n\n'
            "(trace in the chapter, *Timeline: the waker*)")
    assert named_sections(text) == {"The design", "Pitfalls", "Timeline: the waker"}


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_hints_and_skeleton_send_the_reader_only_to_sections_the_chapter_has(problem):
    chapter = chapters.load(problem)
    paths = [problem.hint_file(level) for level in (1, 2, 3)]
    paths.append(ROOT / "mine" / f"{problem.module}.py")
    named = {(path, name) for path in paths for name in named_sections(_prose_of(path))}
    assert named, f"{problem.id}: no hint names a chapter section (the scanner found nothing)"
    bad = [f"{path.relative_to(ROOT)}: {name!r}" for path, name in sorted(named)
           if chapter.heading(name) is None]
    assert not bad, f"sections named but not in {chapter.path.name}:\n" + "\n".join(bad)
    assert chapter.heading("A section no chapter has") is None


#: ``the checkpoint "No ready-made queue underneath"``: a checkpoint named by its title
BY_TITLE = re.compile(r'[Cc]heckpoint\s+"([^"]+)"')


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_a_checkpoint_named_by_its_title_has_that_title(problem):
    titles = {cp.title for cp in problem.checkpoints}
    assert BY_TITLE.findall('the checkpoint "No such title" fails') == ["No such title"]
    bad = [f"{path.relative_to(ROOT)}: {title!r}"
           for path in _texts(problem)
           for title in BY_TITLE.findall(" ".join(path.read_text("utf-8").split()))
           if title not in titles]
    assert not bad, f"not a title in {problem.id}.toml:\n" + "\n".join(bad)
