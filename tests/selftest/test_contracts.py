"""Each problem's contract table (tests/pNN/CONTRACT.md) and its acceptance set agree.

The table maps every sentence of the spec and of the skeleton's docstrings to the tests that
fail when it is broken:

    | id | source | sentence | tests |
    | --- | --- | --- | --- |
    | C1 | spec: Public API | `put(item)`: ... | test_output_sink.py::test_put_from_any_thread |

Checked here: the table is there with exactly these columns; no cell is empty; ids are
unique; a source is `spec: <section>` or `skeleton: <Class.method>` naming a definition of the
skeleton; every listed test exists; every test function of tests/pNN is listed at least once.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.selftest.conftest import PROBLEMS

COLUMNS = ["id", "source", "sentence", "tests"]
TEST_REF = re.compile(r"(test_\w+\.py)::((?:Test\w+::)?test\w*)")


@dataclass
class Row:
    line: int
    cells: dict[str, str]

    def tests(self) -> list[str]:
        return [t.strip().strip("`") for t in self.cells["tests"].split(",") if t.strip()]


def split_row(line: str) -> list[str]:
    """The cells of a markdown table row; a `|` inside backticks or escaped is text."""
    cells, cell, in_code, i = [], "", False, 0
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cell += "|"
            i += 2
            continue
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += ch
        i += 1
    cells.append(cell.strip())
    return cells


def contract_path(problem) -> Path:
    return problem.tests_dir / "CONTRACT.md"


def read_contract(problem) -> list[Row]:
    path = contract_path(problem)
    assert path.is_file(), f"{problem.id}: no contract table yet ({path.name} is missing)"
    lines = path.read_text("utf-8").splitlines()
    starts = [i for i, line in enumerate(lines)
              if line.lstrip().startswith("|") and [c.lower() for c in split_row(line)] == COLUMNS]
    assert len(starts) == 1, (f"{problem.id}: {path.name} needs exactly one table with the "
                              f"columns {' | '.join(COLUMNS)} (found {len(starts)})")
    start = starts[0]
    assert start + 1 < len(lines) and set(lines[start + 1].replace("|", "").strip()) <= set("-: "), \
        f"{problem.id}: the header of the table must be followed by its | --- | line"
    rows = []
    for number, line in enumerate(lines[start + 2:], start + 3):
        if not line.lstrip().startswith("|"):
            break
        cells = split_row(line)
        assert len(cells) == len(COLUMNS), f"{path.name}:{number}: {len(cells)} cells, not 4"
        rows.append(Row(number, dict(zip(COLUMNS, cells))))
    assert rows, f"{problem.id}: the contract table has no rows"
    return rows


def acceptance_tests(problem) -> set[str]:
    """``file.py::test_name`` (or ``file.py::TestClass::test_name``) of every test in tests/pNN."""
    found = set()
    for path in sorted(problem.tests_dir.glob("test_*.py")):
        tree = ast.parse(path.read_text("utf-8"), str(path))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and node.name.startswith("test"):
                found.add(f"{path.name}::{node.name}")
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                            and item.name.startswith("test"):
                        found.add(f"{path.name}::{node.name}::{item.name}")
    return found


def skeleton_names(problem) -> set[str]:
    """Dotted names defined in the skeleton: ``Class``, ``Class.method``, ``function``, and
    the module's own name (for a sentence of the module docstring)."""
    tree = ast.parse(problem.learner_file.read_text("utf-8"))
    names = {problem.learner_file.stem}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{item.name}" for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_the_contract_table_has_no_empty_cell_and_unique_ids(problem):
    rows = read_contract(problem)
    empty = [f"line {r.line}: {k}" for r in rows for k, v in r.cells.items() if not v.strip()]
    assert not empty, f"{problem.id}: empty cells: {empty}"
    assert all(r.tests() for r in rows)
    ids = [r.cells["id"] for r in rows]
    assert len(set(ids)) == len(ids), f"{problem.id}: repeated ids"


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_source_is_a_spec_section_or_a_skeleton_definition(problem):
    defined = skeleton_names(problem)
    bad = []
    for row in read_contract(problem):
        kind, _, where = row.cells["source"].partition(":")
        where = where.strip().strip("`")
        if kind.strip() == "spec" and where:
            continue
        if kind.strip() == "skeleton" and where.removesuffix("()") in defined:
            continue
        bad.append(f"line {row.line}: {row.cells['source']!r}")
    assert not bad, (f"{problem.id}: a source is 'spec: <section>' or 'skeleton: "
                     f"<Class.method>' of {problem.learner_file.name}: {bad}")


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_listed_test_exists(problem):
    existing = acceptance_tests(problem)
    unknown = []
    for row in read_contract(problem):
        for ref in row.tests():
            if not TEST_REF.fullmatch(ref) or ref not in existing:
                unknown.append(f"line {row.line}: {ref}")
    assert not unknown, f"{problem.id}: listed tests that do not exist: {unknown}"


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_test_of_the_acceptance_set_is_listed(problem):
    listed = {ref for row in read_contract(problem) for ref in row.tests()}
    unlisted = sorted(acceptance_tests(problem) - listed)
    assert not unlisted, f"{problem.id}: tests no sentence of the contract lists: {unlisted}"


def test_the_row_splitter_keeps_pipes_inside_code_and_escaped():
    assert split_row("| C1 | spec: A | `a | b` and x \\| y | t.py::test_a, t.py::test_b |") \
        == ["C1", "spec: A", "`a | b` and x | y", "t.py::test_a, t.py::test_b"]


def test_the_checks_catch_an_unlisted_test_a_missing_test_and_a_bad_source(tmp_path):
    from types import SimpleNamespace

    (tmp_path / "test_a.py").write_text("def test_one():\n    pass\n\n\n"
                                        "async def test_two():\n    pass\n")
    skeleton = tmp_path / "m.py"
    skeleton.write_text("class Sink:\n    def put(self, item):\n        '''Queue it.'''\n")
    (tmp_path / "CONTRACT.md").write_text(
        "# Contract\n\n| id | source | sentence | tests |\n| --- | --- | --- | --- |\n"
        "| C1 | skeleton: Sink.put | Queue it. | test_a.py::test_one, test_a.py::test_gone |\n"
        "| C2 | skeleton: Sink.take | Take it. | test_a.py::test_one |\n\nAfter.\n")
    problem = SimpleNamespace(id="p77", tests_dir=tmp_path, learner_file=skeleton)
    assert [r.cells["id"] for r in read_contract(problem)] == ["C1", "C2"]
    assert acceptance_tests(problem) == {"test_a.py::test_one", "test_a.py::test_two"}
    with pytest.raises(AssertionError, match="test_gone"):
        test_every_listed_test_exists(problem)
    with pytest.raises(AssertionError, match="test_two"):
        test_every_test_of_the_acceptance_set_is_listed(problem)
    with pytest.raises(AssertionError, match="Sink.take"):
        test_every_source_is_a_spec_section_or_a_skeleton_definition(problem)
    (tmp_path / "CONTRACT.md").unlink()
    with pytest.raises(AssertionError, match="no contract table yet"):
        read_contract(problem)
