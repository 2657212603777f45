"""The judged process's first code: ``python -I -B launch.py STAGE PYTEST_ARGS...``.

The audit hook (``guard``) goes in before anything else is imported; then pytest runs from the
stage.  The submission's folder is not on ``sys.path`` here: the reporter appends it only
when the learner file is about to be imported, so no helper module of the submission can be imported
in place of a module the standard library, pytest or the harness look for (an optional
module that ``subprocess``, ``copy`` or ``pickle`` try to import, say) before the guard is
armed.  This is a file of the staged harness, not ``-c`` code: the guard trusts code by its
file, and this is the bottom frame of every stack in the run.
"""
import sys


def main() -> int:
    stage = sys.argv.pop(1)
    sys.path.insert(0, stage)
    from workbook.grading.sandbox import guard
    guard.refusals = guard.install(stage)  # taken (and removed) by the reporter
    import pytest
    return pytest.main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
