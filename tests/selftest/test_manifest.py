"""Every manifest agrees with the files: the rustlings-style consistency check."""
from __future__ import annotations

import re

import pytest

from tests.selftest.conftest import PROBLEMS
from workbook import manifest
from workbook.manifest import ManifestError, load_problem

MARKER = re.compile(r"""@pytest\.mark\.checkpoint\(\s*["']([\w.]+)["']\s*\)""")


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_file_the_manifest_implies_exists(problem):
    paths = [problem.learner_file, problem.solution_file, problem.chapter_file,
             problem.tests_dir / "__init__.py"]
    paths += [problem.hint_file(level) for level in (1, 2, 3)]
    paths += [problem.pitfall_file(p.name) for p in problem.pitfalls]
    missing = [str(p) for p in paths if not p.is_file()]
    assert not missing


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_checkpoint_has_a_test_and_every_marker_a_checkpoint(problem):
    used = set()
    for path in problem.tests_dir.glob("test_*.py"):
        used |= set(MARKER.findall(path.read_text("utf-8")))
    ids = {cp.id for cp in problem.checkpoints}
    assert ids - used == set(), "checkpoints without a test"
    assert used - ids == set(), "markers naming no checkpoint"


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_section_the_manifest_points_to_is_a_heading_of_the_chapter(problem):
    headings = {m.strip() for m in re.findall(r"^#{1,4} (.+)$",
                                              problem.chapter_file.read_text("utf-8"), re.M)}
    sections = {cp.section for cp in problem.checkpoints} | {p.section for p in problem.pitfalls}
    assert sections - headings == set()


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_pitfall_module_states_its_mistake_in_a_docstring(problem):
    for pitfall in problem.pitfalls:
        text = problem.pitfall_file(pitfall.name).read_text("utf-8")
        assert text.lstrip().startswith('"""'), pitfall.name


def test_a_manifest_with_an_unknown_checkpoint_in_a_pitfall_is_rejected(tmp_path):
    path = tmp_path / "p77.toml"
    path.write_text('''id = "p77"\ntitle = "t"\nsummary = "s"\nmodule = "m"\nminutes = 1
difficulty = "easy"\ntime_limit = 5
[[checkpoints]]\nid = "p77.a"\ntitle = "A"\npoints = 1\nhint = 1\nsection = "S"
[[pitfalls]]\nname = "x"\ntitle = "X"\nfails = ["p77.b"]\nhint = 1\nsection = "S"
''')
    with pytest.raises(ManifestError, match="fails"):
        load_problem(path)


def test_problem_ids_are_the_file_names_and_in_order():
    assert list(manifest.problems()) == sorted(manifest.problems())
    with pytest.raises(KeyError, match="unknown problem"):
        manifest.get("p99")
