"""The acceptance sets judge correctly: the reference and the alternates pass; every shipped
pitfall and wrong variant fails exactly the checkpoints it declares and passes all the others
(a pitfall with a diagnosis naming it); the skeleton reports not-implemented."""
from __future__ import annotations

import pytest

from tests.selftest.conftest import PROBLEMS, alternate_cases, checked, variant_cases
from tests.selftest.views_check import same_panels_if_served
from workbook import ROOT, cli, variants


def _failures(result) -> str:
    return "; ".join(f"{cp.id}: {cp.message}" for cp in result.checkpoints
                     if cp.status != "passed") or result.output[-2000:]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_the_reference_passes_every_checkpoint(problem):
    result = checked(problem.id, str(problem.solution_file))
    assert result.passed and not result.incomplete, _failures(result)
    assert all(cp.status == "passed" for cp in result.checkpoints), _failures(result)
    assert all(cp.stuck == 0 for cp in result.checkpoints), \
        [(cp.id, cp.message) for cp in result.checkpoints if cp.stuck]  # no stuck verdict
    if problem.id == "p01":  # a test's notes reach its checkpoint (testkit.note's sink)
        timeout = next(cp for cp in result.checkpoints if cp.id == "p01.timeout")
        assert any("returned after" in text for text in timeout.notes), timeout.notes
    same_panels_if_served(result, problem)


@pytest.mark.parametrize("variant", variant_cases())
def test_each_variant_fails_exactly_its_declared_checkpoints(variant):
    result = checked(variant.problem.id, str(variants.materialize(variant)))
    assert result.import_error is None, result.import_error
    same_panels_if_served(result, variant.problem)  # the page's panels are the terminal's
    by_id = {cp.id: cp for cp in result.checkpoints}
    still_passing = [cp for cp in variant.fails if by_id[cp].status == "passed"]
    assert not still_passing, f"{variant.label} should fail {still_passing}"
    also_failing = {cp.id: cp.message for cp in result.checkpoints
                    if cp.id not in variant.fails + variant.may_also_fail
                    and cp.status != "passed"}
    assert not also_failing, (f"{variant.label} must pass every checkpoint it does not "
                              f"declare in 'fails': {also_failing}")
    if variant.kind == "pitfall":
        named = [cp for cp in variant.fails if by_id[cp].pitfall == variant.name]
        assert named, (f"no failing checkpoint names {variant.name}: "
                       + "; ".join(f"{c}: {by_id[c].pitfall} / {by_id[c].message}"
                                   for c in variant.fails))


@pytest.mark.parametrize("variant", variant_cases())
def test_each_diff_applies_to_the_reference_and_explains_itself(variant):
    parsed = variants.parse(variant)
    assert parsed.explanation.strip(), f"{variant.label}: no explanation above the diff"
    text = variants.apply(variant)
    assert text != variant.problem.solution_file.read_text("utf-8")
    compile(text, str(variant.source), "exec", dont_inherit=True)


def _flat(text: str) -> str:
    return "".join(ch for ch in "".join(text.split()) if ch not in "`*_")


@pytest.mark.parametrize("variant", variant_cases())
def test_show_prints_the_explanation_and_the_change(variant, capsys):
    option = "--pitfall" if variant.kind == "pitfall" else "--wrong"
    assert cli.main([variant.problem.id, option, variant.name, "--show"]) == 0
    out = capsys.readouterr().out
    flat = _flat(out)  # rich wraps long lines and renders the explanation's markdown
    assert _flat(variant.name) in flat and _flat(variant.fails[0]) in flat, out
    parsed = variants.parse(variant)
    first = parsed.explanation.splitlines()[0] if parsed.explanation else ""
    assert _flat(first)[:40] in flat, out
    added = [_flat(ln[1:]) for ln in parsed.diff.splitlines()
             if ln.startswith("+") and not ln.startswith("+++") and ln[1:].strip()]
    assert all(a[:30] in flat for a in added[:3]), out


@pytest.mark.parametrize("problem,path", alternate_cases())
def test_a_correct_solution_in_another_style_passes(problem, path):
    result = checked(problem.id, str(path))
    assert result.passed, _failures(result)
    assert all(cp.stuck == 0 for cp in result.checkpoints), \
        [(cp.id, cp.stuck) for cp in result.checkpoints if cp.stuck]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_the_skeleton_reports_not_implemented(problem):
    result = checked(problem.id, str(problem.learner_file))
    assert not result.passed and result.skeleton, _failures(result)
    same_panels_if_served(result, problem)
    for cp in result.checkpoints:
        assert "not implemented" in (cp.message or ""), f"{cp.id}: {cp.message}"
        assert cp.status == ("not_attempted" if cp.kind == "extension" else "failed")


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_every_problem_ships_at_least_one_alternate(problem):
    assert variants.alternates(problem), \
        f"{problem.id}: no correct solution in another style in " \
        f"{problem.alternates_dir.relative_to(ROOT)}/"
