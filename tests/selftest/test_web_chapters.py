"""Chapters parsed into blocks (format D) and timelines (format C): every directive in every
chapter resolves, the parser keeps code intact, and ``book`` renders from the blocks."""
from __future__ import annotations

import pytest

from tests.selftest.conftest import PROBLEMS, cli
from workbook import chapters, timelines


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.id for p in PROBLEMS])
def test_every_directive_in_the_chapter_resolves(problem):
    chapter = chapters.load(problem)
    assert chapters.problems_of_directives(chapter) == []
    anchors = [h.anchor for h in chapter.headings]
    assert len(anchors) == len(set(anchors)), "duplicate heading anchors"


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.id for p in PROBLEMS])
def test_every_manifest_section_names_a_heading_of_the_chapter(problem):
    chapter = chapters.load(problem)
    sections = {cp.section for cp in problem.checkpoints} | {p.section for p in problem.pitfalls}
    missing = sorted(s for s in sections if chapter.heading(s) is None)
    assert not missing, f"{problem.id}: sections without a heading: {missing}"


def test_a_directive_naming_nothing_is_reported():
    ch = chapters.parse("# x\n\n<!-- timeline: p01-nowhere -->\n\n<!-- pitfall-diff: no_such -->\n"
                        "\n<!-- timeline: p02-state-first -->\n", problem="p01")
    found = chapters.problems_of_directives(ch)
    assert len(found) == 3, found
    assert "no timeline 'p01-nowhere'" in found[0]
    assert "no such pitfall" in found[1]
    assert "belongs to p02" in found[2]


def test_every_timeline_is_valid_and_used_by_exactly_one_chapter():
    used: dict[str, int] = {}
    for problem in PROBLEMS:
        for block in chapters.load(problem).walk():
            if isinstance(block, chapters.TimelineRef):
                used[block.name] = used.get(block.name, 0) + 1
    assert timelines.names(), "no timelines shipped"
    for name in timelines.names():
        tl = timelines.load(name)
        assert tl.steps and tl.actors
        assert used.get(name) == 1, f"{name} is included {used.get(name, 0)} times"


def test_timeline_cells_must_match_the_columns(tmp_path):
    (tmp_path / "p01-bad.toml").write_text(
        'title = "x"\nactors = ["a", "b"]\nstate = ["s"]\n'
        '[[steps]]\nlabel = "1"\ndo = ["only one"]\nstate = ["0"]\n', "utf-8")
    with pytest.raises(timelines.TimelineError, match="'do' has 1 cells, expected 2"):
        timelines.load("p01-bad", tmp_path)
    with pytest.raises(timelines.TimelineError, match="no timeline"):
        timelines.load("p01-absent", tmp_path)


def test_a_table_converts_to_a_timeline_that_loads_back(tmp_path):
    table = ["| step | A | B | x |", "| --- | --- | --- | --- |",
             "| 1 | `go()` | | 0 |", "| 2 | | wait \"here\" | 1 |"]
    doc = timelines.from_table(table, "T", 2)
    (tmp_path / "p09-t.toml").write_text(timelines.dumps(doc), "utf-8")
    tl = timelines.load("p09-t", tmp_path)
    assert tl.actors == ("A", "B") and tl.state == ("x",)
    assert [s.do for s in tl.steps] == [("`go()`", ""), ("", 'wait "here"')]
    assert [s.state for s in tl.steps] == [("0",), ("1",)]


SAMPLE = """# P09 · Title

<!-- timeline: p09-demo -->

## The `design`: part 1

```python
# not a heading
<!-- timeline: not-a-directive -->
<details><summary>not a fold</summary>
```

<details><summary>Answer: why drain twice?</summary>

Because **of** the window.

<!-- pitfall-diff: single_drain -->

</details>

<!-- anchor: pitfall-single_drain -->
### Pitfall: single drain

## The design: part 1
"""


def test_the_parser_splits_blocks_and_leaves_code_alone():
    ch = chapters.parse(SAMPLE, problem="p09")
    kinds = [type(b).__name__ for b in ch.blocks]
    assert kinds == ["Heading", "TimelineRef", "Heading", "Markdown", "Fold", "Heading",
                     "Heading"]
    assert ch.title == "P09 · Title"
    code = ch.blocks[3].text
    assert "# not a heading" in code and "not-a-directive" in code and "not a fold" in code
    fold = ch.blocks[4]
    assert fold.summary == "Answer: why drain twice?"
    assert [type(b).__name__ for b in fold.blocks] == ["Markdown", "PitfallDiff"]
    assert fold.blocks[1].name == "single_drain"
    assert [h.anchor for h in ch.headings] == [
        "p09--title", "the-design-part-1", "pitfall-single_drain", "the-design-part-1-1"]
    assert ch.heading("pitfall-single_drain").slug == "pitfall-single-drain"
    assert ch.heading("The design: part 1").anchor == "the-design-part-1"
    assert ch.heading("nothing like it") is None
    assert [type(b).__name__ for b in ch.section("the-design-part-1")] == [
        "Heading", "Markdown", "Fold", "Heading"]


@pytest.mark.parametrize("text, message", [
    ("<details><summary>x</summary>\n\nbody\n", "never closed"),
    ("text\n</details>\n", "without <details>"),
    ("<!-- anchor: a -->\nplain text\n", "not directly followed by a heading"),
    ("<details>\n\nno summary\n</details>\n", "needs a <summary>"),
])
def test_malformed_constructs_are_reported(text, message):
    with pytest.raises(chapters.ChapterError, match=message):
        chapters.parse(text, problem="p09")


def test_book_renders_timelines_as_tables_and_hides_folds_unless_answers():
    out = cli("book", "p01")
    assert out.returncode == 0, out.stderr
    tl = timelines.load("p01-lost-wakeup")
    assert tl.title in out.stdout
    assert "<!-- timeline" not in out.stdout
    for column in tl.state:
        assert column in out.stdout
    assert "<details>" not in out.stdout and "<!-- pitfall-diff" not in out.stdout
    p01 = chapters.load(__import__("workbook.manifest").manifest.get("p01"))
    folds = [b for b in p01.walk() if isinstance(b, chapters.Fold)]
    for fold in folds:  # closed by default, every one of them; opened with --answers
        assert f"▸ {chapters._plain(fold.summary)}" in out.stdout
    if folds:
        opened = cli("book", "p01", "--answers")
        assert opened.returncode == 0 and "(hidden: ./check.sh book" not in opened.stdout
        assert len(opened.stdout) > len(out.stdout)


def _text(renderable) -> str:
    from rich.console import Console
    console = Console(width=120, record=True, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


def test_a_fold_shows_its_summary_and_hides_its_body_unless_answers():
    from workbook import bookview
    ch = chapters.parse(SAMPLE.replace("<!-- timeline: p09-demo -->", ""), problem="p01")
    closed = _text(bookview.chapter_view(ch))
    assert "Answer: why drain twice?" in closed and "--answers" in closed
    assert "of the window" not in closed
    opened = _text(bookview.chapter_view(ch, answers=True))
    assert "of the window" in opened and "pitfall single_drain" in opened
