"""The judged process's first code: ``python -I -B launch.py STAGE PYTEST_ARGS...``.

The audit hook (``guard``) goes in before anything else is imported, then the judge
(``judge``: it reads the signing key from its pipe now, before pytest or any learner code
exists, and keeps it where no Python object leads); then pytest runs from the stage.  The
submission's folder is not on ``sys.path``: from the learner import on, a finder serves its
modules to its own imports only (``reporter.SubmissionFinder``).  This is a file of the staged
harness, not ``-c`` code: the guard trusts code by its file, and this is the bottom frame of
every stack in the run.
"""
import os
import sys


def main() -> int:
    stage = sys.argv.pop(1)
    sys.path.insert(0, stage)
    from workbook.grading.sandbox import guard, judge
    armed = guard.install(stage)  # (classify, refusals, alarm): handed on, never kept here
    report_fd, key_fd = os.environ.pop("WORKBOOK_REPORT_FD", None), \
        os.environ.pop("WORKBOOK_KEY_FD", None)
    if report_fd is not None and key_fd is not None:
        judge.install(armed[0], armed[1], int(report_fd), int(key_fd), alarm=armed[2])
        os.set_inheritable(int(report_fd), False)
        os.environ["WORKBOOK_JUDGE"] = "armed"  # for the reporter plugin
    del armed
    import pytest
    return pytest.main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
