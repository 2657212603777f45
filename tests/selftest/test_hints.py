"""The hints and the book name only what the checker has: every checkpoint id they mention
(``p03.interrupt``) is in the problem's manifest (``workbook/problems/pNN.toml``), and every
``--pitfall NAME`` / ``--wrong NAME`` they tell the reader to run is a declared variant.  A
hint that names a checkpoint the acceptance set no longer has sends a learner nowhere.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.selftest.conftest import PROBLEMS
from workbook import ROOT, manifest

#: ``p03.interrupt``; not ``p01.md`` or ``p04.toml`` (files), not part of a longer word.
CHECKPOINT = re.compile(r"(?<![\w/.])(p0\d)\.([a-z][a-z0-9_]*)\b(?!\.)")
FILE_SUFFIXES = {"md", "py", "toml", "diff", "json"}
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


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_hints_and_chapter_name_only_existing_checkpoints(problem):
    known = {cp.id for cp in problem.checkpoints}
    everyone = {cp.id for p in PROBLEMS for cp in p.checkpoints}
    bad = []
    for path in _texts(problem):
        for cp in sorted(named_checkpoints(path.read_text("utf-8"))):
            if cp not in everyone or (cp.startswith(problem.id + ".") and cp not in known):
                bad.append(f"{path.relative_to(ROOT)}: {cp}")
    assert not bad, "checkpoints named but not in any manifest:\n" + "\n".join(bad)


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
