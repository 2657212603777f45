"""The corpus of unseen wrong variants (tests/selftest/unseen/) cannot drift.

Each ``unseen/pNN/NAME.diff`` must still apply to the current reference and compile, be
listed in ``unseen/pNN.toml`` with the sentence it breaks, and have an exposure scenario in
``unseen/expose_pNN.py``.  Cheap: no acceptance run, no scenario run (``python -m
tests.selftest.unseen.measure`` and ``... .expose`` do those).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.selftest.unseen import measure
from workbook import manifest, variants

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

UNSEEN = Path(measure.__file__).resolve().parent
PROBLEMS = measure.problem_ids()
FIELDS = ("name", "breaks", "class", "scenario", "checkpoint", "accepted")


def _index(problem: str) -> dict:
    with (UNSEEN / f"{problem}.toml").open("rb") as f:
        return tomllib.load(f)


def _cases():
    return [pytest.param(e, id=f"{e.problem}-{e.name}") for p in PROBLEMS
            for e in measure.corpus(p)]


def test_every_problem_has_a_corpus_of_at_least_eight():
    assert PROBLEMS == sorted(manifest.problems())
    for p in PROBLEMS:
        assert len(measure.corpus(p)) >= 8, p


@pytest.mark.parametrize("entry", _cases())
def test_the_diff_applies_to_the_current_reference_and_compiles(entry):
    variant = measure.as_variant(entry)
    parsed = variants.parse(variant)
    assert parsed.explanation, f"{entry.source.name} explains nothing above the diff"
    text = variants.apply(variant)
    assert text != variant.problem.solution_file.read_text("utf-8")
    compile(text, str(variant.problem.solution_file), "exec", dont_inherit=True)


@pytest.mark.parametrize("problem", PROBLEMS)
def test_the_index_and_the_diffs_agree(problem):
    data = _index(problem)
    listed = [v["name"] for v in data.get("variants", [])]
    on_disk = sorted(p.stem for p in (UNSEEN / problem).glob("*.diff"))
    assert sorted(listed) == on_disk and len(set(listed)) == len(listed)
    checkpoints = {cp.id for cp in manifest.get(problem).checkpoints}
    for v in data.get("variants", []):
        missing = [k for k in FIELDS if not str(v.get(k, "")).strip()]
        assert not missing, f"{problem} {v['name']} lacks {missing}"
        assert v["checkpoint"] in checkpoints, f"{problem} {v['name']}: {v['checkpoint']}"
    for d in data.get("discarded", []):  # rejected today, so not kept: not on disk either
        assert d["name"] not in on_disk and d["caught_by"].strip()
    for w in data.get("withdrawn", []):  # not wrong after all: gone, with the reason
        assert w["name"] not in on_disk and w["why"].strip()


@pytest.mark.parametrize("problem", PROBLEMS)
def test_a_promoted_variant_is_a_manifest_wrong_variant_that_fails_its_checkpoint(problem):
    """Promoted once a checker rejected it every run: its diff moved to solutions/wrong/
    and the manifest declares what it fails, the checkpoint whose subject it is included
    or the exploration that caught it."""
    data = _index(problem)
    wrong = {v.name: v for v in manifest.get(problem).wrongs}
    on_disk = {p.stem for p in (UNSEEN / problem).glob("*.diff")}
    for v in data.get("promoted", []):
        missing = [k for k in FIELDS if not str(v.get(k, "")).strip()]
        assert not missing, f"{problem} {v['name']} lacks {missing}"
        assert v["name"] in wrong, f"{problem} {v['name']} is not a manifest wrong variant"
        assert v["name"] not in on_disk, f"{problem} {v['name']} is in the corpus twice"
        fails = wrong[v["name"]].fails
        assert v["checkpoint"] in fails or f"{problem}.explore" in fails, (v["name"], fails)


@pytest.mark.parametrize("problem", PROBLEMS)
def test_every_variant_has_an_exposure_scenario(problem):
    tree = ast.parse((UNSEEN / f"expose_{problem}.py").read_text("utf-8"))
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    names = [e.name for e in measure.corpus(problem)]
    assert not [n for n in names if n not in functions]


def test_the_round_2_corpus_compiles_and_each_wrong_file_has_its_demo_and_index_line():
    from tests.selftest.unseen.round2 import measure as round2
    files = round2.corpus(["p01", "p02", "p03", "p04"])
    assert len(files) == 40 and sum(wrong for _, _, wrong in files) == 32
    for pid, path, wrong in files:
        compile(path.read_text("utf-8"), str(path), "exec")
        assert path.stem in (path.parent / "INDEX.md").read_text("utf-8"), path
        if wrong:
            demo = path.with_name(path.stem + ".demo.py")
            compile(demo.read_text("utf-8"), str(demo), "exec")
