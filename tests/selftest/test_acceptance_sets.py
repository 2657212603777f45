"""The acceptance sets judge correctly: the reference and the alternates pass, every shipped
pitfall fails with a diagnosis naming it, the skeleton reports not-implemented."""
from __future__ import annotations

import pytest

from tests.selftest.conftest import PROBLEMS, alternate_cases, checked, pitfall_cases


def _failures(result) -> str:
    return "; ".join(f"{cp.id}: {cp.message}" for cp in result.checkpoints
                     if cp.status != "passed") or result.output[-2000:]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_the_reference_passes_every_checkpoint(problem):
    result = checked(problem.id, str(problem.solution_file))
    assert result.passed and not result.incomplete, _failures(result)
    assert all(cp.status == "passed" for cp in result.checkpoints), _failures(result)


@pytest.mark.parametrize("problem,pitfall", pitfall_cases())
def test_each_pitfall_fails_with_a_diagnosis_that_names_it(problem, pitfall):
    result = checked(problem.id, str(problem.pitfall_file(pitfall.name)))
    assert not result.passed, f"{pitfall.name} passed every checkpoint"
    assert result.import_error is None, result.import_error
    by_id = {cp.id: cp for cp in result.checkpoints}
    still_passing = [cp for cp in pitfall.fails if by_id[cp].status == "passed"]
    assert not still_passing, f"{pitfall.name} should fail {still_passing}"
    named = [cp for cp in pitfall.fails if by_id[cp].pitfall == pitfall.name]
    assert named, (f"no failing checkpoint names {pitfall.name}: "
                   + "; ".join(f"{c}: {by_id[c].pitfall} / {by_id[c].message}"
                               for c in pitfall.fails))


@pytest.mark.parametrize("problem,path", alternate_cases())
def test_a_correct_solution_in_another_style_passes(problem, path):
    result = checked(problem.id, str(path))
    assert result.passed, _failures(result)


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_the_skeleton_reports_not_implemented(problem):
    result = checked(problem.id, str(problem.learner_file))
    assert not result.passed and result.skeleton, _failures(result)
    for cp in result.checkpoints:
        assert "not implemented" in (cp.message or ""), f"{cp.id}: {cp.message}"
        assert cp.status == ("not_attempted" if cp.kind == "extension" else "failed")


def test_every_problem_ships_at_least_one_alternate():
    assert all(list(p.alternates_dir.glob("*.py")) for p in PROBLEMS)
