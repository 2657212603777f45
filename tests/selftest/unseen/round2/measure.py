"""Run today's check on the round-2 blind corpus: each wrong file must be rejected, each
correct one must pass.

    .venv/bin/python -m tests.selftest.unseen.round2.measure [pNN ...] [--pythons]

A file whose docstring starts ``BREAKS:`` is wrong, ``CORRECT:`` correct (see README.md).
One line per file (verdict, the checkpoints that failed), then per problem: wrong files
rejected, correct files passed.  ``--pythons`` checks under every Python found, as a
graded run does.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from workbook import manifest
from workbook.run import run_check

HERE = Path(__file__).resolve().parent


def corpus(problem_ids: list[str]) -> list[tuple[str, Path, bool]]:
    """(problem, file, is it wrong) for every file of the corpus, in name order."""
    out = []
    for pid in problem_ids:
        for path in sorted((HERE / pid).glob("*.py")):
            if path.name.endswith(".demo.py"):
                continue
            head = path.read_text("utf-8")[:20]
            out.append((pid, path, head.startswith('"""BREAKS:')))
    return out


def check(pid: str, path: Path, pythons: bool):
    """The check of ``path``, run on a copy named like the learner's file outside the
    repository (under ``tests/`` a file counts as the harness's own code)."""
    problem = manifest.get(pid)
    with tempfile.TemporaryDirectory(prefix="round2-") as folder:
        copy = Path(folder) / problem.learner_file.name
        shutil.copyfile(path, copy)
        if not pythons:
            return run_check(problem, str(copy))
        from workbook import pythons as every
        return every.check(problem, copy, lambda _: None)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.selftest.unseen.round2.measure")
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--pythons", action="store_true")
    args = parser.parse_args(argv)
    ids = args.problems or sorted(p.name for p in HERE.iterdir() if p.is_dir()
                                  and p.name.startswith("p"))
    tally: dict[str, list[int]] = {}
    for pid, path, wrong in corpus(ids):
        result = check(pid, path, args.pythons)
        failed = [cp.id.split(".", 1)[1] for cp in result.checkpoints if cp.status == "failed"]
        right = (not result.passed) if wrong else result.passed
        kind = "wrong" if wrong else "correct"
        print(f"{pid} {kind:7} {'ok  ' if right else 'MISS'} {path.stem}: "
              f"{'rejected' if not result.passed else 'passed'} {' '.join(failed)}", flush=True)
        counts = tally.setdefault(pid, [0, 0, 0, 0])
        counts[0 if wrong else 2] += right
        counts[1 if wrong else 3] += 1
    for pid, (caught, wrongs, passed, corrects) in tally.items():
        print(f"{pid}: {caught}/{wrongs} wrong files rejected, {passed}/{corrects} correct "
              "files passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
