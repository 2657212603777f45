"""Every manifest agrees with the files: the rustlings-style consistency check."""
from __future__ import annotations

import re

import pytest

from tests.selftest.conftest import PROBLEMS
from workbook import ROOT, manifest, scaffold, variants
from workbook.manifest import ManifestError, load_problem

MARKER = re.compile(r"""@pytest\.mark\.checkpoint\(\s*["']([\w.]+)["']\s*\)""")


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_file_the_manifest_implies_exists(problem):
    paths = [problem.learner_file, problem.solution_file, problem.chapter_file,
             problem.tests_dir / "__init__.py"]
    paths += [problem.hint_file(level) for level in (1, 2, 3)]
    paths += [problem.pitfall_diff(p.name) for p in problem.pitfalls]
    paths += [problem.wrong_diff(w.name) for w in problem.wrongs]
    missing = [str(p) for p in paths if not p.is_file()]
    assert not missing


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_no_scaffold_placeholder_is_left(problem):
    """``./check.sh new`` marks every stub it writes; this row lists those still to write."""
    paths = [manifest.PROBLEMS_DIR / f"{problem.id}.toml", problem.learner_file,
             problem.solution_file, problem.chapter_file, problem.tests_dir / "CONTRACT.md"]
    paths += [problem.hint_file(level) for level in (1, 2, 3)]
    paths += sorted(problem.tests_dir.glob("*.py"))
    left = [str(p.relative_to(ROOT)) for p in paths
            if p.is_file() and scaffold.MARKER in p.read_text("utf-8")]
    assert not left, f"{problem.id}: still to write ({scaffold.MARKER}): {', '.join(left)}"


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_checkpoint_has_a_test_and_every_marker_a_checkpoint(problem):
    used = set()
    for path in problem.tests_dir.glob("test_*.py"):
        used |= set(MARKER.findall(path.read_text("utf-8")))
    ids = {cp.id for cp in problem.checkpoints}
    assert ids - used == set(), "checkpoints without a test"
    assert used - ids == set(), "markers naming no checkpoint"


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_variant_states_its_mistake_above_its_diff(problem):
    for variant in variants.all_variants(problem):
        assert variants.parse(variant).explanation.strip(), variant.label


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_variant_file_is_declared_in_the_manifest(problem):
    pitfalls = problem.pitfall_diff("x").parent
    wrong = problem.wrong_diff("x").parent
    found = {("pitfall", f.stem) for f in pitfalls.glob("*.diff")}
    assert not list(pitfalls.glob("*.py")), "a pitfall is a .diff of the reference, not a module"
    found |= {("wrong", f.stem) for f in wrong.glob("*.diff")}
    declared = {("pitfall", p.name) for p in problem.pitfalls}
    declared |= {("wrong", w.name) for w in problem.wrongs}
    assert found - declared == set(), "variant files the manifest does not declare"


def test_a_manifest_with_an_unknown_checkpoint_in_a_pitfall_is_rejected(tmp_path):
    path = tmp_path / "p77.toml"
    path.write_text('''id = "p77"\ntitle = "t"\nsummary = "s"\nmodule = "m"\nminutes = 1
difficulty = "easy"\ntime_limit = 5
[[checkpoints]]\nid = "p77.a"\ntitle = "A"\npoints = 1\nhint = 1\nsection = "S"
[[pitfalls]]\nname = "x"\ntitle = "X"\nfails = ["p77.b"]\nhint = 1\nsection = "S"
''')
    with pytest.raises(ManifestError, match="fails"):
        load_problem(path)


def test_a_wrong_variant_is_loaded_and_checked_like_a_pitfall(tmp_path):
    head = '''id = "p77"\ntitle = "t"\nsummary = "s"\nmodule = "m"\nminutes = 1
difficulty = "easy"\ntime_limit = 5
[[checkpoints]]\nid = "p77.a"\ntitle = "A"\npoints = 1\nhint = 1\nsection = "S"
'''
    path = tmp_path / "p77.toml"
    path.write_text(head + '[[wrong]]\nname = "w"\nbreaks = "A is kept."\nfails = ["p77.a"]\n')
    problem = load_problem(path)
    assert problem.wrongs == (manifest.Wrong("w", "A is kept.", ("p77.a",)),)
    assert problem.wrong("w").fails == ("p77.a",)
    assert problem.wrong_diff("w").parts[-3:] == ("wrong", "p77", "w.diff")
    path.write_text(head + '[[wrong]]\nname = "w"\nbreaks = "A is kept."\nfails = ["p77.b"]\n')
    with pytest.raises(ManifestError, match="fails"):
        load_problem(path)
    path.write_text(head + '[[wrong]]\nname = "w"\nfails = ["p77.a"]\n')
    with pytest.raises(ManifestError, match="breaks"):
        load_problem(path)


def test_a_variant_may_name_checkpoints_that_catch_it_by_chance_but_not_its_own(tmp_path):
    head = '''id = "p77"\ntitle = "t"\nsummary = "s"\nmodule = "m"\nminutes = 1
difficulty = "easy"\ntime_limit = 5
[[checkpoints]]\nid = "p77.a"\ntitle = "A"\npoints = 1\nhint = 1\nsection = "S"
[[checkpoints]]\nid = "p77.b"\ntitle = "B"\npoints = 1\nhint = 1\nsection = "S"
[[wrong]]\nname = "w"\nbreaks = "A is kept."\nfails = ["p77.a"]
'''
    path = tmp_path / "p77.toml"
    path.write_text(head + 'may_also_fail = ["p77.b"]\n')
    assert load_problem(path).wrong("w").may_also_fail == ("p77.b",)
    for bad in ('["p77.a"]', '["p77.c"]'):  # its own checkpoint; an unknown one
        path.write_text(head + f"may_also_fail = {bad}\n")
        with pytest.raises(ManifestError, match="may_also_fail"):
            load_problem(path)


def test_problem_ids_are_the_file_names_and_in_order():
    assert list(manifest.problems()) == sorted(manifest.problems())
    with pytest.raises(KeyError, match="unknown problem"):
        manifest.get("p99")
