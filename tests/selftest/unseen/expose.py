"""Prove that each corpus variant is really wrong: run its deterministic scenario on the
reference (must behave) and on the variant (must break).

    .venv/bin/python -m tests.selftest.unseen.expose [pNN ...] [--only NAME ...]

Scenarios live in ``expose_pNN.py`` (stdlib only), one function per variant, named after
it; each runs in its own subprocess with a hard time limit.  A scenario that needs another
interpreter (a mistake that breaks only on 3.10, say) names it in the module's ``PYTHON``
map and runs under it when one is found (``python3.X`` on PATH or a pyenv version).
Variants the current check already rejects have no scenario and are listed as such.
"""
from __future__ import annotations

import argparse
import glob
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.selftest.unseen import measure
from workbook import variants

HERE = Path(__file__).resolve().parent
LIMIT = 30.0


def interpreter(version: str | None) -> str | None:
    if version is None:
        return sys.executable
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    matches = sorted(glob.glob(f"{pyenv}/versions/{version}.*/bin/python{version}"))
    if matches:  # a real interpreter, not a pyenv shim that refuses to choose
        return matches[-1]
    return shutil.which(f"python{version}")


def run_one(script: Path, name: str, target: Path, python: str) -> tuple[bool | None, str]:
    """(behaved?, last line): True "ok", False "BROKEN ...", None if it could not tell."""
    try:
        proc = subprocess.run([python, str(script), name, str(target)], cwd=str(HERE),
                              capture_output=True, text=True, timeout=LIMIT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, f"no verdict within {LIMIT:.0f} s (hung)"
    said = proc.stdout.strip().splitlines()  # the verdict; stderr may hold logged errors
    if proc.returncode == 0 and said and said[-1] == "ok":
        return True, "ok"
    if proc.returncode == 1 and said and said[-1].startswith("BROKEN: "):
        return False, said[-1][len("BROKEN: "):]
    lines = (proc.stdout + proc.stderr).strip().splitlines() or ["(no output)"]
    return None, f"exit {proc.returncode}: {lines[-1]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.selftest.unseen.expose",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("problems", nargs="*")
    ap.add_argument("--only", nargs="+", metavar="NAME")
    args = ap.parse_args(argv)
    problems = args.problems or measure.problem_ids()
    sys.path.insert(0, str(HERE))
    failures = 0
    for p in problems:
        script = HERE / f"expose_{p}.py"
        module = importlib.import_module(f"expose_{p}") if script.is_file() else None
        scenarios = getattr(module, "SCENARIOS", {})
        pythons = getattr(module, "PYTHON", {})
        for entry in measure.corpus(p):
            if args.only and entry.name not in args.only:
                continue
            if entry.name not in scenarios:
                print(f"{p} {entry.name}: no scenario")
                continue
            python = interpreter(pythons.get(entry.name))
            if python is None:
                print(f"{p} {entry.name}: not run, needs Python {pythons[entry.name]}")
                continue
            target = variants.materialize(measure.as_variant(entry))
            ref_ok, ref_says = run_one(script, entry.name, variants.manifest.get(p).solution_file,
                                       python)
            var_ok, var_says = run_one(script, entry.name, target, python)
            exposed = ref_ok is True and var_ok is False
            failures += not exposed
            where = f" [Python {pythons[entry.name]}]" if entry.name in pythons else ""
            print(f"{p} {entry.name}{where}: {'EXPOSED' if exposed else 'NOT EXPOSED'}\n"
                  f"    reference: {ref_says}\n    variant:   {var_says}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
