"""./check.sh mutate: Cosmic Ray's mutants of a reference, judged by its acceptance set."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("cosmic_ray", reason="the 'dev' or 'mutate' extra installs Cosmic Ray")

from tests.selftest.conftest import cli  # noqa: E402
from workbook import mutate  # noqa: E402

SOURCE = '''from __future__ import annotations


def clamp(x: int | None, top: int = 10) -> int:
    if x is None:
        return 0
    return x if x < top else top


def double(y):
    return y * 2
'''


def _problem(tmp_path, source: str):
    ref = tmp_path / "ref.py"
    ref.write_text(source)
    return SimpleNamespace(id="p77", module="m", solution_file=ref, tests_dir=tmp_path)


def test_mutant_identities_survive_lines_moving_and_annotations_are_skipped(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = mutate.find_mutants(_problem(tmp_path / "a", SOURCE), tmp_path / "a")
    moved = SOURCE.replace("\n\ndef clamp", "\nimport os\n\n\ndef clamp")
    second = mutate.find_mutants(_problem(tmp_path / "b", moved), tmp_path / "b")
    assert len(first) == len(second) > 10
    assert [m.id for m in first] == [m.id for m in second]
    assert all(b.line == a.line + 2 for a, b in zip(first, second))
    skipped = [m for m in first if m.outcome == "skipped"]
    assert skipped and all("int | None" in m.original for m in skipped)
    assert len({m.id for m in first}) == len(first)


def test_an_equivalent_entry_marks_its_mutant_and_a_stale_one_is_reported(tmp_path):
    problem = _problem(tmp_path, SOURCE)
    mutants = mutate.find_mutants(problem, tmp_path)
    target = next(m for m in mutants if m.original == "return y * 2" and "Pow" in m.operator)
    (tmp_path / "equivalent_mutants.toml").write_text(
        "[[equivalent]]\n"
        f'operator = "{target.operator}"\nline = 99\noccurrence = 0\n'
        f'original = "{target.original}"\nmutated = "{target.mutated}"\n'
        'reason = "for the only y the tests use, y ** 2 == y * 2"\n'
        "[[equivalent]]\n"
        'operator = "core/NumberReplacer"\noccurrence = 0\n'
        'original = "gone = 1"\nmutated = "gone = 2"\nreason = "stale"\n')
    stale = mutate.mark_equivalents(mutants, mutate.load_equivalents(problem))
    assert [e["original"] for e in stale] == ["gone = 1"]
    assert [m for m in mutants if m.outcome == "equivalent"] == [target]
    assert target.reason.startswith("for the only y")


def test_a_sample_is_deterministic(tmp_path):
    mutants = mutate.find_mutants(_problem(tmp_path, SOURCE), tmp_path)
    one = [m.id for m in mutate.sample(mutants, 3)]
    assert one == [m.id for m in mutate.sample(mutants, 3)] and len(one) == 3


def test_mutate_runs_a_small_sample_of_p01_end_to_end(tmp_path):
    proc = cli("mutate", "p01", "--sample", "3", "--jobs", "2", "--json", "--out",
               str(tmp_path), timeout=120)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc == json.loads((tmp_path / "p01.json").read_text())
    assert doc["sample"] == 3 and len(doc["mutants"]) == 3
    for m in doc["mutants"]:
        assert m["outcome"] in ("killed", "timeout", "survived"), m
        assert m["operator"].startswith(("core/", "workbook/")) and m["line"] > 0 and m["mutated"]
        assert (m["outcome"] == "survived") == (not m["killed_by"]), m
    counts = doc["counts"]
    assert counts["killed"] + counts["timeout"] + counts["survived"] == 3
    assert (tmp_path / "p01" / "session.sqlite").is_file()
    assert proc.returncode == (1 if counts["survived"] else 0)


def test_the_workbook_operator_removes_a_call_or_await_statement_only(tmp_path):
    source = ("async def f(e, q):\n    e.set()\n    x = q.get()\n    await e.wait()\n"
              "    return x\n")
    removed = [m for m in mutate.find_mutants(_problem(tmp_path, source), tmp_path)
               if m.operator == "workbook/RemoveCall"]
    assert [(m.original, m.mutated) for m in removed] == [("e.set()", "pass"),
                                                          ("await e.wait()", "pass")]
    compile(removed[1].code, "m.py", "exec")
