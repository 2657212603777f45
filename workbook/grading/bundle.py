"""``./check.sh gradescope-bundle OUT.zip``: the same acceptance sets as a Gradescope
autograder.

The zip holds what ``stage.staged_files`` stages for a graded run (the harness package and
the chosen problems' acceptance sets; never solutions, hints or the book), the project's
``pyproject.toml``, a ``constraints.txt`` pinning every installed distribution to the version the
bundle was built with, ``setup.sh`` (Gradescope runs it once per image) and
``run_autograder`` (once per submission; it writes a valid ``results.json`` whatever happens).
"""
from __future__ import annotations

import io
import zipfile
from importlib import metadata
from pathlib import Path

from rich.console import Console

from workbook import ROOT, manifest
from workbook.grading.gradebook import atomic_write
from workbook.grading.sandbox.stage import staged_files
from workbook.errors import ArgumentParser

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder image.
set -euo pipefail
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip
# The grader's sandbox: bubblewrap where the image allows it (else its fallback is used).
apt-get install -y --no-install-recommends bubblewrap || true
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --disable-pip-version-check \\
    -c /autograder/source/constraints.txt -e /autograder/source
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission.  It always leaves a valid results.json: the
# grader writes one whole (atomically) or none, and for none this writes a score of 0 with
# the reason (and the log below says why).
set -uo pipefail
base="${AUTOGRADER_ROOT:-/autograder}"
python="${WORKBOOK_PYTHON:-$base/venv/bin/python}"
results="$base/results/results.json"
mkdir -p "$base/results"
rm -f "$results"
cd "$base/source" || exit 1
echo "workbook autograder: grading $base/submission (PROBLEMS)"
# --one-python: the image has one Python (the venv's); no other is looked for or prepared.
"$python" -m workbook grade "$base/submission" --single --format gradescope \\
    --out "$results" --gradebook "$base/results/gradebook.json" --problem PROBLEMS \\
    --visibility VISIBILITY --one-python
status=$?
echo "workbook autograder: the grader exited with $status"
if [ ! -s "$results" ]; then
    # The grader itself broke (not the submission): say so, and keep its log from students.
    reason="the grader exited with status $status without writing results"
    printf '{"score": 0, "visibility": "hidden", "stdout_visibility": "hidden", "tests": [],
 "output": "The autograder itself failed, not this submission (%s); its log is shown to the instructor only."}\\n' "$reason" >"$results"
    echo "workbook autograder: the grader failed, not the submission: $reason"
fi
exit 0
"""


def constraints() -> str:
    """``name==version`` of every distribution installed beside the workbook: the versions
    the bundle is built and tested with.  A constraint pins only what something requires,
    so pins of tools the autograder never installs are harmless."""
    pins = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name != "concurrency-workbook":
            pins[name] = dist.version
    return "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def bundle_files(problems: list[manifest.Problem],
                 visibility: str = "visible") -> dict[str, bytes]:
    files = {str(rel): (ROOT / rel).read_bytes() for rel in staged_files(problems)}
    for name in ("pyproject.toml", "README.md"):
        files[name] = (ROOT / name).read_bytes()
    files["constraints.txt"] = constraints().encode()
    files["setup.sh"] = SETUP_SH.encode()
    files["run_autograder"] = RUN_AUTOGRADER.replace(
        "PROBLEMS", " ".join(p.id for p in problems)).replace("VISIBILITY", visibility).encode()
    return files


def main(argv: list[str]) -> int:
    from workbook.grading.batch import select

    parser = ArgumentParser(prog="check.sh gradescope-bundle",
                            description="Build a Gradescope autograder zip.")
    parser.add_argument("out", type=Path, help="the zip to write, e.g. autograder.zip")
    parser.add_argument("--problem", nargs="+", action="extend", metavar="pNN",
                        help="only these problems (default: all)")
    from workbook.grading.exports import VISIBILITIES
    parser.add_argument("--visibility", choices=VISIBILITIES, default="visible",
                        help="when students see each checkpoint's result on Gradescope "
                             "(default: visible)")
    args = parser.parse_args(argv)
    problems = select(args.problem)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in sorted(bundle_files(problems, args.visibility).items()):
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if name in ("setup.sh", "run_autograder")
                                  else 0o100644) << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
    atomic_write(args.out, buffer.getvalue())
    Console(highlight=False).print(
        f"wrote {args.out} ({len(buffer.getvalue()) // 1024} KiB): upload it as the autograder "
        f"of a Gradescope programming assignment ({', '.join(p.id for p in problems)}).")
    return 0
