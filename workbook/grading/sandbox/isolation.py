"""Which isolation this machine allows, best first, each proved by a probe run inside it before
any submission runs: ``bwrap`` (root with bubblewrap), ``namespaces`` (root: the trampoline's
own), ``uid`` (root without namespaces: refused unless the run's uid can neither read nor
import the solutions), ``none`` (not root: resource limits only).  See the README's table.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

from workbook import ROOT
from workbook.grading.sandbox import IsolationError
from workbook.grading.sandbox.limits import Limits
from workbook.grading.sandbox.runner import run
from workbook.grading.sandbox.stage import Harness, Stage
from workbook.grading.sandbox.uids import UidClaim


#: What the probe run tries; it prints one JSON line.  ``paths`` are files it must not read.
_PROBE = r"""
import json, os, sys
paths, root, names = map(json.loads, sys.argv[1:])
sys.path.insert(0, root)
def works(action):
    try:
        action()
        return True
    except Exception:
        return False
print(json.dumps({"uid": os.getuid(),
                  "readable": [p for p in paths if works(lambda: open(p, "rb").close())],
                  "importable": [n for n in names if works(lambda: __import__("solutions." + n))]}))
"""


def detect(forbidden: list[Path]) -> str:
    """The best isolation this machine allows (``namespaces``, ``uid`` or ``none``), verified
    by a probe run inside it.

    ``forbidden`` are files the sandboxed code must not read (the reference solutions).
    Raises ``IsolationError`` when running as root but the solutions would be reachable.
    """
    if os.geteuid() != 0:  # not root: nothing better is possible (the grader warns)
        return "none"
    wanted = os.environ.get("WORKBOOK_SANDBOX")  # force a level (for tests)
    problems = []
    modes = (["bwrap"] if shutil.which("bwrap") else []) + ["namespaces", "uid"]
    for mode in [wanted] if wanted else modes:
        try:
            with UidClaim(0 if mode == "none" else 1) as claim:
                verdict = _probe(mode, forbidden, (claim.uids or [None])[0])
        except IsolationError as exc:
            verdict = str(exc)
        if verdict is None:
            return mode
        problems.append(f"{mode}: {verdict}")
    raise IsolationError("cannot isolate learner code: " + "; ".join(problems))


def probe(mode: str, forbidden: list[Path], python: str,
          binds: Sequence[str] = ()) -> str | None:
    """None if ``python`` (another interpreter than the grader's, with its folders
    ``binds``) runs in the sandbox ``mode`` that ``detect`` chose and reads no forbidden
    file there; else why not."""
    try:
        with UidClaim(1) as claim:
            return _probe(mode, forbidden, (claim.uids or [None])[0], python, binds)
    except IsolationError as exc:
        return str(exc)


def _probe(mode: str, forbidden: list[Path], uid: int | None, python: str = sys.executable,
           binds: Sequence[str] = ()) -> str | None:
    """None if a run at this level works and reads no forbidden file; else why not."""
    modules = [p.stem for p in forbidden if p.parent.name == "solutions"]
    argv = [python, "-I", "-S", "-c", _PROBE, json.dumps([str(p) for p in forbidden]),
            json.dumps(str(ROOT)), json.dumps(modules)]
    with Stage(Harness(()), "probe", b"", uid) as stage:
        out = run(stage, argv, Limits.for_wall(30), iso=mode, uid=uid, python=binds)
    if out.timed_out:
        return "the probe did not finish"
    lines = out.output.strip().splitlines()
    if out.sandbox_error and "Permission denied" in out.sandbox_error and uid is not None \
            and mode != "bwrap":
        return (f"{out.sandbox_error}: the sandbox uid cannot run {python} (a Python "
                "under a private home such as /root?). Install bubblewrap (it binds the "
                "interpreter in as root), or grade with a Python every user can run "
                "(WORKBOOK_PYTHON=/usr/bin/python3 ./check.sh grade …, or one under /opt)")
    if out.exit_code != 0:
        return out.sandbox_error or (lines[-1] if lines else f"exit code {out.exit_code}")
    try:
        found = json.loads(lines[-1])
    except (ValueError, IndexError):
        return "the probe printed nothing useful"
    if uid is not None and found["uid"] != uid:
        return f"ran as uid {found['uid']}, not {uid}"
    if found["readable"]:
        return (f"the sandbox user can read {found['readable'][0]} "
                "(chmod -R o-rwx solutions/, or give it namespaces)")
    if found["importable"]:
        return f"the sandbox user can import solutions.{found['importable'][0]}"
    return None
