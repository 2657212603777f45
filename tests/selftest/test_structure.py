"""The structure of ``workbook/`` drawn from its imports: the modules form no cycle.

Every ``import`` and ``from ... import`` in every module counts, also those inside functions
(a late import is still a dependency); only imports under ``if TYPE_CHECKING:`` do not (they
never run).  Run this file as a script to print the structure, lowest layer first.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "workbook"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
        or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every import node, skipping the bodies of ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if _type_checking_only(node):
            yield from (n for child in node.orelse for n in _imports_of(child))
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    yield from _imports(node)


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the workbook modules it imports (a package's ``__init__`` is its name)."""
    modules = {module_name(p, package.parent): p for p in package.rglob("*.py")}
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text("utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                # ``from workbook import run`` imports the module workbook.run
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            for target in targets:
                while target and target not in modules:  # workbook.x.y -> workbook.x
                    target = target.rpartition(".")[0]
                if target and target != name and target != "workbook":
                    edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def layers(edges: dict[str, set[str]]) -> list[list[str]]:
    """Modules by layer: a module's layer is one above the highest layer it imports."""
    level: dict[str, int] = {}

    def depth(v: str) -> int:
        if v not in level:
            level[v] = -1  # no cycle (asserted), so this is never read while computing
            level[v] = 1 + max((depth(w) for w in edges[v]), default=-1)
        return level[v]

    for v in edges:
        depth(v)
    out: list[list[str]] = [[] for _ in range(max(level.values()) + 1)]
    for v, d in level.items():
        out[d].append(v)
    return [sorted(layer) for layer in out]


def test_the_workbook_modules_import_each_other_without_a_cycle():
    edges = graph()
    assert len(edges) > 30 and edges["workbook.cli"], "the graph found the modules"
    assert cycles(edges) == []


def test_no_module_of_the_workbook_is_much_over_500_lines():
    """A reader finds each job in one file (issue 21): a module that grows past ~500 lines is
    doing more than one and gets split, as cli.py (watch.py) and testkit.py (a package) were."""
    sizes = {module_name(path): len(path.read_text("utf-8").splitlines())
             for path in PACKAGE.rglob("*.py")}
    assert len(sizes) > 30
    assert {name: n for name, n in sizes.items() if n > 550} == {}


def test_the_lowest_layers_import_no_runner():
    """The errors and the report records sit below the runner: raising a usage error or
    reading a record never imports the runner (the old manifest ↔ run ↔ variants cycle)."""
    edges = graph()
    assert edges["workbook.errors"] == set()
    assert "workbook.run" not in edges["workbook.variants"]
    assert "workbook.variants" not in edges["workbook.manifest"]


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_late_and_relative_imports_count_and_type_checking_ones_do_not(tmp_path):
    pkg = tmp_path / "workbook"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from workbook import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from workbook import a\n")
    (pkg / "sub" / "__init__.py").write_text("from . import c\n")
    (pkg / "sub" / "c.py").write_text("from ..a import f\n")
    edges = graph(pkg)
    assert edges == {"workbook": set(), "workbook.a": {"workbook.b"}, "workbook.b": set(),
                     "workbook.sub": {"workbook.sub.c"}, "workbook.sub.c": {"workbook.a"}}


if __name__ == "__main__":
    g = graph()
    if cycles(g):
        sys.exit(f"cycles: {cycles(g)}")
    for i, layer in enumerate(layers(g)):
        print(f"{i}: {' '.join(m.removeprefix('workbook.') for m in layer)}")
