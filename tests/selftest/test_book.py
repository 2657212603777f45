"""The book agrees with the manifests: every section a manifest (and so a diagnosis) names
exists, every pitfall has its own anchored subsection with its diff, every chapter opens with
its card and closes with its map, anchors are unique, and ``book --section`` finds sections.

A diagnosis names the section of its pitfall, or of its checkpoint (``render.diagnosis``
reads both from the manifest), so checking the manifests checks the diagnoses.
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from tests.selftest.conftest import PROBLEMS
from workbook import ROOT, book_sections, chapters, cli, render
from workbook.tuning import BOUND

ANCHOR = re.compile(r"^<!-- anchor: (\S+) -->$", re.M)


def _chapter(problem) -> chapters.Chapter:
    return chapters.load(problem)


def _section_text(problem, anchor: str) -> str:
    """The raw markdown of a section: from its anchor comment to the next heading at its level
    or above (read directly, so that this test does not depend on the renderer)."""
    text = problem.chapter_file.read_text("utf-8")
    start = text.index(f"<!-- anchor: {anchor} -->")
    level = len(re.compile(r"^(#+) ", re.M).search(text, start).group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, text.index("\n", start) + 1)
    end2 = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, end.end()) if end else None
    return text[start:end2.start() if end2 else len(text)]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_section_a_manifest_or_diagnosis_names_exists(problem):
    chapter = _chapter(problem)
    named = [(cp.id, cp.section) for cp in problem.checkpoints]
    named += [(p.name, p.section) for p in problem.pitfalls]
    missing = [(who, section) for who, section in named if chapter.heading(section) is None]
    assert not missing, f"{problem.id}: sections named by the manifest but not in the chapter"


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_pitfall_has_its_own_anchored_subsection_with_its_diff(problem):
    chapter = _chapter(problem)
    for pitfall in problem.pitfalls:
        anchor = f"pitfall-{pitfall.name}"
        assert pitfall.section == anchor, (
            f"{problem.id}: pitfall {pitfall.name} names {pitfall.section!r}, not its own "
            f"subsection {anchor!r}")
        heading = chapter.heading(anchor)
        assert heading is not None and heading.anchor == anchor, f"no anchor {anchor}"
        assert heading.level == 3 and heading.text.startswith("Pitfall: "), heading
        body = _section_text(problem, anchor)
        assert f"<!-- pitfall-diff: {pitfall.name} -->" in body, f"{anchor}: no diff directive"
        assert f"./check.sh {problem.id} --pitfall {pitfall.name}" in body, (
            f"{anchor}: the subsection does not give its --pitfall command")


@pytest.mark.parametrize("path", sorted((ROOT / "book").glob("*.md")), ids=lambda p: p.name)
def test_anchors_and_heading_slugs_are_unique(path):
    text = path.read_text("utf-8")
    explicit = ANCHOR.findall(text)
    assert len(explicit) == len(set(explicit)), "an explicit anchor is used twice"
    chapter = chapters.parse(text, problem=path.stem, path=path)
    slugs = [chapters.slugify(h.text) for h in chapter.headings]
    twice = {s for s in slugs if slugs.count(s) > 1}
    assert not twice, f"headings with the same slug: {twice}"
    clash = set(explicit) & (set(slugs) - {h.slug for h in chapter.headings if h.anchor != h.slug})
    assert not clash, f"an explicit anchor equals another heading's slug: {clash}"


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_chapter_opens_with_its_card(problem):
    head = problem.chapter_file.read_text("utf-8").split("\n\n", 3)[1]
    learner = problem.learner_file.relative_to(ROOT).as_posix()
    for value in (f"{problem.minutes} min", problem.difficulty, f"`{learner}`",
                  f"`./check.sh {problem.id}`", f"`./check.sh hint {problem.id}`"):
        assert value in head, f"{problem.id}: the card lacks {value!r}"


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_chapter_ends_with_a_map_of_checkpoints_pitfalls_and_sections(problem):
    text = problem.chapter_file.read_text("utf-8")
    last = re.findall(r"^## (.+)$", text, re.M)[-1]
    assert last == "Map: checkpoints, pitfalls, sections"
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([\w.]+)`.*$",
                                                        text.split(f"## {last}")[1], re.M)}
    chapter = _chapter(problem)
    for cp in problem.checkpoints:
        assert cp.id in rows, f"{cp.id} has no row in the map"
        row = rows[cp.id]
        # exactly the pitfalls the manifest says fail it: one missing hides a cause, one
        # too many sends a reader to a mistake the checkpoint does not catch
        named = set(re.findall(r"\(#pitfall-(\w+)\)", row))
        failing = {p.name for p in problem.pitfalls if cp.id in p.fails}
        assert named == failing, (f"{cp.id}: the map names {sorted(named - failing)} too "
                                  f"many and lacks {sorted(failing - named)}")
        assert f"(#{chapter.heading(cp.section).anchor})" in row, f"{cp.id}: no section link"


def test_book_section_finds_a_pitfall_by_words_and_refuses_nonsense(capsys):
    assert cli.main(["book", "p01", "--section", "single drain"]) == 0
    shown = capsys.readouterr().out
    assert "Pitfall: Single drain" in shown and "Measurements" not in shown
    assert cli.main(["book", "p02", "--section", "pitfall-close_before_unregister"]) == 0
    assert "Close before unregister" in capsys.readouterr().out
    assert cli.main(["book", "p01", "--section", "zzzz qqqq"]) == 2
    err = capsys.readouterr().err
    assert "no section of p01 matches" in err and "Traceback" not in err


def test_book_section_prefers_the_closest_title():
    chapter = _chapter(PROBLEMS[0])
    assert book_sections.find(chapter, "lost wakeup").anchor == "timeline-the-lost-wakeup"
    assert book_sections.find(chapter, "never_clear").anchor == "pitfall-never_clear"


def test_the_closing_chapter_is_readable_and_compares_four_designs(capsys):
    chapter = book_sections.load_extra("designs")
    text = chapter.path.read_text("utf-8")
    for design in ("flag + Event", "byte + selector", "two conditions",
                   "waker + callback queue"):
        assert design in text
    assert chapter.heading("free-threaded") is not None or any(
        "free-threaded" in h.text.lower() for h in chapter.headings)
    assert cli.main(["book", "designs", "--section", "free threaded"]) == 0
    assert "3.13" in capsys.readouterr().out


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_a_diagnosis_names_the_exact_subsection_of_its_pitfall(problem):
    chapter = _chapter(problem)
    for pitfall in problem.pitfalls:
        failed = SimpleNamespace(id=pitfall.fails[0], title="t", message="m",
                                 pitfall=pitfall.name)
        body = render.diagnosis(failed, problem).renderable.plain
        assert pitfall.section in body
        assert chapter.heading(pitfall.section).anchor == f"pitfall-{pitfall.name}"


def test_the_race_demos_correct_variants_never_bite():
    """Small runs of each demo's correct variant (its wrong one is measured, not asserted)."""
    from workbook.demos import p01, p02, p03, p04
    # A bitten round is one that took half its timeout: with the demo's 50 ms, a crowded
    # machine alone can make a correct round that slow (seen beside two CPU burners).  A
    # lost wakeup costs the whole timeout, whatever it is; a correct round, microseconds.
    assert p01.pingpong(True, 50, timeout=BOUND) == 0
    assert p02.lost_cancels(True, 20) == 0
    assert p03.stolen(True, 3, 20) == 0
    assert p04.lost_bursts(True, 5, 100) == 0


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_sources_link_to_the_python_docs_and_the_upstream_files(problem):
    text = problem.chapter_file.read_text("utf-8")
    sources = text[text.index("\n## Sources\n"):]
    assert "](https://docs.python.org/3/" in sources, "no link to docs.python.org"
    assert "](https://github.com/python/cpython/blob/v3." in text, "no link to a CPython file"
    # a file named as `Lib/...` in the sources is a link, not bare text
    bare = re.findall(r"(?<!\[)`(Lib/[\w/.]+\.py)`(?!\])", sources)
    assert not bare, f"CPython files named but not linked: {bare}"
