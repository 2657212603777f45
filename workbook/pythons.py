"""``--pythons``: one check under every supported interpreter this machine has.

A mistake can break on one version only (``asyncio`` and ``threading`` changed between 3.10
and 3.13), so a check that ran on one interpreter proves nothing about the others.  Each
interpreter found (pyenv's versions, then ``python3.X`` on ``PATH``) gets a venv of its own
under ``.workbook/pythons/`` with the runtime dependencies, made once; the check runs under
each in turn (the harness itself comes from this checkout, through ``PYTHONPATH``), and the
results combine into one: a checkpoint passes only when it passes on every interpreter, and
a failure says on which ones it failed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from workbook import ROOT, manifest
from workbook.errors import UsageError
from workbook.run import CheckpointResult, Result, run_check

#: The interpreters the workbook supports (pyproject's requires-python and CI's matrix).
SUPPORTED = ("3.10", "3.11", "3.12", "3.13")
HOME = ROOT / ".workbook" / "pythons"


@dataclass(frozen=True)
class Interpreter:
    version: str  # "3.12"
    path: Path  # the interpreter that makes the venv


def _pyenv_versions() -> dict[str, Path]:
    """The newest pyenv build of each supported minor version."""
    if not shutil.which("pyenv"):
        return {}
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=20,
                              check=True).stdout.strip()
        bare = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True,
                              timeout=20, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[str, tuple[tuple[int, ...], Path]] = {}
    for name in bare:
        m = re.fullmatch(r"(3\.\d+)\.(\d+)", name)  # plain CPython builds only
        exe = Path(root) / "versions" / name / "bin" / "python3"
        if m and m.group(1) in SUPPORTED and exe.is_file():
            key = tuple(int(p) for p in name.split("."))
            if m.group(1) not in found or key > found[m.group(1)][0]:
                found[m.group(1)] = (key, exe)
    return {v: exe for v, (_, exe) in found.items()}


def find() -> list[Interpreter]:
    """Every supported interpreter found, oldest first; this one always among them.
    ``WORKBOOK_PYTHONS`` (e.g. ``3.10,3.13``) keeps only the versions it names."""
    paths = _pyenv_versions()
    for version in SUPPORTED:
        exe = shutil.which(f"python{version}")
        if version not in paths and exe:
            paths[version] = Path(exe)
    paths[f"{sys.version_info[0]}.{sys.version_info[1]}"] = Path(sys.executable)
    only = [v.strip() for v in os.environ.get("WORKBOOK_PYTHONS", "").split(",") if v.strip()]
    unknown = [v for v in only if v not in SUPPORTED]
    if unknown:
        raise UsageError(f"WORKBOOK_PYTHONS names {', '.join(unknown)}; the supported "
                         f"versions are {', '.join(SUPPORTED)}")
    return [Interpreter(v, paths[v]) for v in SUPPORTED if v in paths and (not only or v in only)]


def venv_python(interp: Interpreter, say: Callable[[str], None]) -> str:
    """The python of ``interp``'s venv with the runtime dependencies, made on first use (and
    again when pyproject.toml changes)."""
    if Path(interp.path) == Path(sys.executable):
        return sys.executable
    venv = HOME / interp.version
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    wanted = str(zlib.crc32((ROOT / "pyproject.toml").read_bytes()))
    if python.is_file() and stamp.is_file() and stamp.read_text() == wanted:
        return str(python)
    say(f"preparing Python {interp.version} for --pythons (once, about a minute)…")
    log = HOME / f"{interp.version}.log"
    HOME.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        steps = [[str(interp.path), "-m", "venv", "--clear", str(venv)],
                 [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                  "-e", str(ROOT)]]
        for step in steps:
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                              timeout=900).returncode:
                raise UsageError(f"could not prepare Python {interp.version} "
                                 f"(log: {os.path.relpath(log)})")
    stamp.write_text(wanted)
    return str(python)


def combine(problem: manifest.Problem, runs: dict[str, Result]) -> Result:
    """One result from one run per interpreter: a checkpoint passes only where it passed on
    all of them; a failure names the interpreters it failed on.  A failure is any status
    but passed and not attempted (a graded run's checkpoint can also be incomplete)."""
    versions = list(runs)
    first = runs[versions[0]]
    checkpoints: list[CheckpointResult] = []
    by_id = {v: {c.id: c for c in runs[v].checkpoints} for v in versions}
    for cp in first.checkpoints:
        each = {v: by_id[v][cp.id] for v in versions}  # every run lists every checkpoint
        failed = [v for v, c in each.items() if c.status not in ("passed", "not_attempted")]
        worst = each[failed[0]] if failed else cp
        merged = replace(worst, seconds=max(c.seconds for c in each.values()),
                         notes=list(worst.notes), stuck=sum(c.stuck for c in each.values()))
        if failed and len(failed) < len(versions):
            merged.message = (f"on Python {', '.join(failed)} only "
                              f"(passed on {', '.join(v for v in versions if v not in failed)}):"
                              f"\n{worst.message or ''}")
        elif not failed and merged.status == "passed":
            merged.notes.append(f"passed on Python {', '.join(versions)}")
        checkpoints.append(merged)
    broken = [v for v in versions if runs[v].import_error]
    import_error = None
    if broken:
        import_error = f"on Python {', '.join(broken)}: {runs[broken[0]].import_error}"
    return Result(problem.id, first.file, checkpoints, import_error=import_error,
                  incomplete=any(r.incomplete for r in runs.values()),
                  seconds=sum(r.seconds for r in runs.values()),
                  output=runs[(broken or versions)[0]].output)


def check(problem: manifest.Problem, target: Path,
          say: Callable[[str], None]) -> tuple[Result, dict[str, Result]]:
    """Run the check under every interpreter found; the combined result and each run."""
    runs: dict[str, Result] = {}
    for interp in find():
        python = venv_python(interp, say)
        say(f"checking under Python {interp.version}…")
        runs[interp.version] = run_check(problem, target, python=python)
    return combine(problem, runs), runs
