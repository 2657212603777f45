"""What exploration costs, per problem, measured side by side in one sitting: how many
scenarios the default exploration runs on the reference and how many per second, and how
long each pitfall and wrong variant takes to its first counterexample (median and max over
``--repeat`` runs; one fresh process per run, so no run warms another's caches).

    python -m workbook.explore.cost [pNN ...] [--repeat N] [--json]

A developer's measure for issue reports, not a test: its figures depend on the machine.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from importlib import import_module

from workbook import ROOT, manifest, variants


def _one(problem_id: str, path: str) -> dict:
    """One exploration of ``path`` with the problem's defaults: what its report says."""
    from workbook.explore import driver
    report = driver.explore(import_module(f"workbook.explore.{problem_id}"), path)
    return {"runs": report.runs, "seconds": report.seconds, "found": report.found is not None,
            "first_after": report.first_after, "uncontrolled": report.uncontrolled}


def _measure(problem_id: str, path: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "workbook.explore.cost", "--one", problem_id,
                           path], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(problem: manifest.Problem, repeat: int) -> dict:
    """The reference's scenarios per second, and each variant's first counterexample."""
    refs = [_measure(problem.id, str(problem.solution_file)) for _ in range(repeat)]
    rates = [r["runs"] / r["seconds"] for r in refs if r.get("seconds")]
    out = {"problem": problem.id, "reference_runs": refs[0].get("runs"),
           "reference_seconds": statistics.median(r.get("seconds", 0.0) for r in refs),
           "scenarios_per_second": statistics.median(rates) if rates else None,
           "reference_found": any(r.get("found") for r in refs), "variants": []}
    for variant in variants.all_variants(problem):
        runs = [_measure(problem.id, str(variants.materialize(variant)))
                for _ in range(repeat)]
        firsts = [r["first_after"] for r in runs if r.get("first_after") is not None]
        out["variants"].append({
            "name": f"{variant.kind} {variant.name}", "found": len(firsts), "runs": repeat,
            "median": statistics.median(firsts) if firsts else None,
            "max": max(firsts) if firsts else None,
            "declares_explore": f"{problem.id}.explore" in variant.fails})
    return out


def render(rows: list[dict]) -> str:
    """One Markdown table (a row per problem), then a line per problem naming each variant's
    median/max time to its first counterexample."""
    lines = ["| problem | reference: scenarios | seconds | scenarios/s | variants found | "
             "first counterexample, median of medians | max |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        found = [v for v in row["variants"] if v["found"]]
        medians = [v["median"] for v in found]
        lines.append(
            f"| {row['problem']} | {row['reference_runs']} | {row['reference_seconds']:.2f} | "
            f"{row['scenarios_per_second'] or 0:.0f} | {len(found)}/{len(row['variants'])} | "
            + (f"{statistics.median(medians):.2f} s | {max(v['max'] for v in found):.2f} s |"
               if found else "- | - |"))
    for row in rows:
        lines.append(f"\n{row['problem']}: " + ", ".join(
            f"{v['name']} {v['median']:.2f}/{v['max']:.2f} s" if v["found"]
            else f"{v['name']} not by exploration" for v in row["variants"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from workbook.errors import ArgumentParser
    parser = ArgumentParser(prog="python -m workbook.explore.cost")
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("PROBLEM", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(_one(*args.one)))
        return 0
    chosen = [manifest.get(p) for p in args.problems] or list(manifest.problems().values())
    rows = [measure(p, max(1, args.repeat)) for p in chosen]
    print(json.dumps(rows, indent=1) if args.json else render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
