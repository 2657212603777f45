"""Which Pythons judge a graded run, and how their verdicts become one gradebook entry.

``grade`` judges each submission × problem under every supported interpreter this machine has
(``--pythons``, the default), as a learner's ``./check.sh pNN --pythons`` does: a mistake
that breaks on 3.10 only (``asyncio.timeout``, ``TaskGroup``) or on 3.13 only must not earn
full marks.  The interpreters are ``pythons.find()``'s, each with the venv ``pythons`` made
for it; each run happens in the same sandbox, under the same judge, with that venv's
interpreter bound into the sandbox read-only.  A checkpoint earns its points only when it
passed under every one (``pythons.combine``: a failure says on which Python), and the entry
records which interpreters judged it.  ``--one-python`` (the grader's own) and ``--python
X.Y`` narrow the set.
"""
from __future__ import annotations

import json
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from workbook import manifest, pythons
from workbook.errors import UsageError
from workbook.grading.gradebook import Entry
from workbook.grading.sandbox import IsolationError
from workbook.grading.sandbox.isolation import probe
from workbook.run import Result

#: What an interpreter says about itself: its release and the folders it runs from.
_ASK = r"""
import json, os, platform, sys
dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
        os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))}
dirs |= {os.path.realpath(d) for d in dirs}
print(json.dumps({"release": platform.python_version(), "dirs": sorted(dirs)}))
"""


@dataclass(frozen=True)
class GradingPython:
    """One interpreter that judges runs."""
    version: str                # "3.12": what messages name
    release: str                # "3.12.1": what the gradebook records
    executable: str             # the interpreter the sandbox runs (a venv's, or the grader's)
    binds: tuple[str, ...] = ()  # its folders, bound read-only into the sandbox (not the
    #                              grader's own: those are bound for every run anyway)

    @property
    def own(self) -> bool:
        """The grader's own interpreter: nothing to prepare, to bind or to probe."""
        return self.executable == sys.executable


def this_python() -> GradingPython:
    return GradingPython(f"{sys.version_info[0]}.{sys.version_info[1]}",
                         platform.python_version(), sys.executable)


def _described(version: str, executable: str) -> GradingPython:
    if executable == sys.executable:
        return this_python()
    try:
        out = subprocess.run([executable, "-I", "-c", _ASK], capture_output=True,
                             text=True, timeout=60, check=True)
        said = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise UsageError(f"Python {version} ({executable}) does not start: {exc}") from None
    return GradingPython(version, said["release"], executable, tuple(said["dirs"]))


def choose(one: bool, versions: list[str] | None, say: Callable[[str], None],
           warn: Callable[[str], None]) -> list[GradingPython]:
    """The interpreters a batch judges with, oldest first: the grader's own (``one``), the
    ``versions`` named (each must be found and prepared, else a usage error), or every one
    found (one that cannot be prepared is left out with a warning; only one found is said
    once, not an error)."""
    if one:
        return [this_python()]
    for version in versions or []:
        if version not in pythons.SUPPORTED:
            raise UsageError(f"--python {version}: not a supported version (supported: "
                             f"{', '.join(pythons.SUPPORTED)})")
    found = pythons.find()
    if versions:
        have = {i.version for i in found}
        missing = [v for v in versions if v not in have]
        if missing:
            raise UsageError(f"--python {missing[0]}: not found on this machine (found: "
                             f"{', '.join(sorted(have)) or 'none'}; WORKBOOK_PYTHONS narrows "
                             f"the search)")
        found = [i for i in found if i.version in versions]
    chosen = []
    for interp in found:
        try:
            chosen.append(_described(interp.version, pythons.venv_python(interp, say)))
        except UsageError as exc:
            if versions:
                raise
            warn(f"{exc}: grading without Python {interp.version}")
    if not chosen:  # every other one failed: the grader's own always works
        chosen = [this_python()]
    if len(chosen) == 1 and not versions:
        say(f"only Python {chosen[0].release} found: every run is judged under it alone "
            f"(with more of {', '.join(pythons.SUPPORTED)} installed, e.g. through pyenv, "
            "each run is judged under each)")
    return chosen


def sandboxed(judges: list[GradingPython], iso: str, forbidden: list[Path], strict: bool,
              warn: Callable[[str], None]) -> list[GradingPython]:
    """The interpreters a probe run proves to work in the sandbox (``iso``) without reaching
    the solutions, as the grader's own was (``isolation.detect``).  Another one is an error
    when it was asked for by name (``strict``), else it is left out with a warning (the
    ``uid`` mode cannot run a Python that lies under a 0700 ``/root``)."""
    kept = []
    for judge in judges:
        why = None if judge.own else probe(iso, forbidden, judge.executable, judge.binds)
        if why is None:
            kept.append(judge)
        elif strict:
            raise IsolationError(f"Python {judge.version} cannot be sandboxed ({iso}): {why}")
        else:
            warn(f"Python {judge.version} left out: it cannot be sandboxed ({iso}): {why}")
    return kept or [this_python()]


def combine(problem: manifest.Problem, entries: dict[str, Entry],
            judges: dict[str, GradingPython]) -> Entry:
    """One entry from one run per interpreter (``entries`` by version, oldest first): a
    checkpoint earns its points only where it passed under every one, and a failure on some
    of them names them (``pythons.combine``); reasons and notes say under which Python they
    happened unless every run had them."""
    versions = list(entries)
    first = entries[versions[0]]
    if len(entries) == 1:
        merged = first
    else:
        runs = {v: Result(problem.id, e.file or "", e.checkpoints) for v, e in entries.items()}
        checkpoints = pythons.combine(problem, runs).checkpoints
        broken = [entries[v] for v in versions if entries[v].status == "error"]
        cpus = [e.cpu for e in entries.values()]
        merged = Entry(
            status="error" if broken else first.status, checkpoints=checkpoints,
            max_score=problem.points,
            reasons=_by_python({v: e.reasons for v, e in entries.items()}),
            notes=_by_python({v: e.notes for v, e in entries.items()}),
            file=first.file, sha256=first.sha256, files=first.files,
            seconds=round(sum(e.seconds for e in entries.values()), 2),
            cpu=None if None in cpus else round(sum(cpus), 3),
            tests_reported=sum(e.tests_reported for e in entries.values()),
            tests_expected=sum(e.tests_expected for e in entries.values()),
            output_bytes=max(e.output_bytes for e in entries.values()),
            output_tail=(broken[0] if broken else first).output_tail,
            leftovers=sum(e.leftovers for e in entries.values()),
            points={cp.id: problem.checkpoint(cp.id).points
                    for cp in checkpoints if cp.status == "passed"},
            explore_seed=first.explore_seed)
    merged.pythons = [judges[v].release for v in versions]
    merged.scores_by_python = {judges[v].release: e.score for v, e in entries.items()}
    return merged


def _by_python(lines: dict[str, list[str]]) -> list[str]:
    """Each distinct line once, in order; prefixed with the versions it came from unless it
    came from every one."""
    where: dict[str, list[str]] = {}
    for version, texts in lines.items():
        for text in texts:
            where.setdefault(text, []).append(version)
    return [text if len(versions) == len(lines)
            else f"on Python {', '.join(versions)}: {text}" for text, versions in where.items()]

