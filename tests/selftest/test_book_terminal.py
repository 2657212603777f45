"""The book in an 80-column terminal: every chapter (answers open, so folds, diffs and
timelines are all drawn) renders with no word cut short by an ellipsis (a truncated table
header such as "eve…"), no raw footnote marker ``[^label]``, every footnote numbered and
listed, and a ``<br>`` in a table cell kept as a line break.  ``--pitfall NAME --show`` piped
is a patch that applies to the reference.
"""
from __future__ import annotations

import io
import re
import shutil
import subprocess

import pytest
from rich.console import Console

from tests.selftest.conftest import PROBLEMS, variant_cases
from workbook import ROOT, book_sections, bookview, chapters, cli

CUT = re.compile(r"\S*…")


def _render(chapter: chapters.Chapter, width: int = 80, answers: bool = True) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, legacy_windows=False).print(
        bookview.chapter_view(chapter, answers=answers))
    return buf.getvalue()


def _chapters():
    out = [pytest.param(chapters.load(p), id=p.id) for p in PROBLEMS]
    out += [pytest.param(book_sections.load_extra(name), id=name) for name in book_sections.EXTRA]
    return out


def _source(chapter: chapters.Chapter) -> str:
    text = chapter.path.read_text("utf-8")
    for block in chapter.walk():
        if isinstance(block, chapters.TimelineRef):
            text += (ROOT / "book" / "timelines" / f"{block.name}.toml").read_text("utf-8")
    return text


@pytest.mark.parametrize("chapter", _chapters())
def test_80_columns_cut_no_word_and_show_no_raw_footnote(chapter):
    out = _render(chapter)
    source = _source(chapter)
    cut = sorted({m.strip("│┃ ") for m in CUT.findall(out)} - {""})
    cut = [c for c in cut if c not in source]  # an ellipsis the chapter itself writes is fine
    assert not cut, f"{chapter.path.name}: words cut at 80 columns: {cut[:10]}"
    assert "[^" not in out, f"{chapter.path.name}: a raw footnote marker at 80 columns"
    for note in chapter.footnotes:
        assert f"[{note.number}]" in out, (chapter.path.name, note.label)


def test_the_chapters_have_footnotes_and_wide_timelines_to_check():
    # the check above must have something to bite on
    assert sum(len(chapters.load(p).footnotes) for p in PROBLEMS) >= 5
    p03 = chapters.load(next(p for p in PROBLEMS if p.id == "p03"))
    assert "one step at a time" in _render(p03, 80)
    assert "one step at a time" not in _render(p03, 220)


def test_a_wide_timeline_shows_every_step_and_every_header_whole():
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(
        bookview.timeline_view("p03-wrong-role-woken"))
    text = out.getvalue()
    from workbook import timelines
    tl = timelines.load("p03-wrong-role-woken")
    for step in tl.steps:
        assert f"step {step.label}" in text
    for name in tl.state:
        assert name in text, name
    assert "…" not in text


def test_a_br_in_a_table_cell_is_a_line_break():
    md = "| a | b |\n| --- | --- |\n| first<br>second | x |\n"
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(bookview.Markdown(md))
    lines = out.getvalue().splitlines()
    assert any("first" in ln and "second" not in ln for ln in lines), out.getvalue()
    assert any("second" in ln and "first" not in ln for ln in lines), out.getvalue()


def test_footnotes_are_numbered_by_first_reference_and_leave_the_text():
    ch = chapters.parse("# t\n\nB[^b] then A[^a] and B again[^b].\n\n## Sources\n\n"
                        "[^a]: note a\n    more a\n\n[^b]: note b\n\n## Map\n\nend\n",
                        problem="x")
    assert [(n.label, n.number) for n in ch.footnotes] == [("b", 1), ("a", 2)]
    assert ch.footnotes[1].text == "note a\nmore a"
    kinds = [type(b).__name__ for b in ch.blocks]
    assert kinds.count("Notes") == 1 and kinds.index("Notes") < kinds.index("Heading", 3)
    text = "".join(b.text for b in ch.walk() if isinstance(b, chapters.Markdown))
    assert "note a" not in text and "[^a]:" not in text
    out = _render(ch)
    assert "B[1] then A[2] and B again[1]." in out and "[2] note a" in out


def test_pitfall_diffs_are_folded_and_show_only_changed_lines():
    p01 = chapters.load(next(p for p in PROBLEMS if p.id == "p01"))
    closed = _render(p01, answers=False)
    assert "self._items.append(item)  # first" not in closed  # the reference's own put()
    assert "pitfall asyncio_queue: the lines it changes" in closed
    _, diff = chapters.read_pitfall_diff("p01", "asyncio_queue")
    cut = chapters.changed_lines(diff)
    context = [ln for ln in diff.splitlines() if ln.startswith(" ") and ln.strip()
               and not ln.strip().startswith(("def ", "class ", "async def "))]
    assert context and not any(ln in cut.splitlines() for ln in context)
    assert all(ln in cut.splitlines() for ln in diff.splitlines()
               if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---")))


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to apply the patch")
@pytest.mark.parametrize("variant", variant_cases("pitfall")[:6] + variant_cases("wrong")[:2])
def test_show_piped_prints_a_patch_that_applies(variant, capsys, tmp_path):
    option = "--pitfall" if variant.kind == "pitfall" else "--wrong"
    assert cli.main([variant.problem.id, option, variant.name, "--show"]) == 0
    patch = tmp_path / "change.diff"
    patch.write_text(capsys.readouterr().out, "utf-8")
    target = tmp_path / "tree" / variant.problem.solution_file.relative_to(ROOT)
    target.parent.mkdir(parents=True)
    shutil.copyfile(variant.problem.solution_file, target)
    done = subprocess.run(["git", "apply", "--check", "--verbose", str(patch)],
                          cwd=tmp_path / "tree", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr + patch.read_text("utf-8")[:2000]


@pytest.mark.skipif(not hasattr(__import__("os"), "openpty"), reason="needs a pseudo-terminal")
def test_on_a_tty_the_chapter_goes_through_the_pager(tmp_path):
    import os
    import sys
    paged = tmp_path / "paged.txt"
    env = {**os.environ, "PAGER": f"cat > {paged}", "COLUMNS": "80", "LINES": "24",
           "TERM": "xterm"}
    primary, secondary = os.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "workbook", "book", "p03"], cwd=ROOT,
                              env=env, stdin=secondary, stdout=secondary, stderr=secondary,
                              timeout=120)
    finally:
        os.close(secondary)
    shown = b""
    os.set_blocking(primary, False)
    try:
        while chunk := os.read(primary, 65536):
            shown += chunk
    except (BlockingIOError, OSError):
        pass
    os.close(primary)
    assert proc.returncode == 0
    text = paged.read_text("utf-8", "replace")
    assert "BoundedBlockingQueue" in text and text.count("\n") > 500  # the chapter, paged
    assert shown.count(b"\n") < 24, shown[:500]  # and not dumped on the terminal


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_hint_at_80_columns_cuts_no_word_and_keeps_its_line_breaks(problem):
    from workbook import render

    for level in (1, 2, 3):
        path = problem.hint_file(level)
        source = path.read_text("utf-8")
        buf = io.StringIO()
        Console(file=buf, width=80, color_system=None, legacy_windows=False).print(
            render.markdown_view(f"{problem.id} · hint level {level} of 3", source))
        out = buf.getvalue()
        cut = sorted({m.strip("│┃ ") for m in CUT.findall(out)} - {""})
        cut = [c for c in cut if c not in source]
        assert not cut, f"{path.name} of {problem.id}: words cut at 80 columns: {cut[:10]}"
        assert "<br" not in out and "[^" not in out, f"{problem.id} L{level}: raw markup"
