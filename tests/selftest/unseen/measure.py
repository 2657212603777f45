"""Run today's acceptance sets against the corpus of unseen wrong variants.

Every ``tests/selftest/unseen/pNN/NAME.diff`` is a wrong variant (the reference plus one
small change breaking one contract sentence) that the acceptance set accepted when it was
written; ``pNN.toml`` beside it says which sentence, the class of the mistake and the
scenario that exposes it.  This command shows how many of them the current check rejects,
so a new checker (an explorer, a new test) can be measured on mistakes nobody wrote a
scenario for:

    .venv/bin/python -m tests.selftest.unseen.measure [pNN ...] [--repeat N] [--jobs N]
                                                      [--only NAME ...] [--json]

One line per variant: how many of its runs rejected it, the checkpoints that failed, the
seconds per run; then the catch rate per problem (a variant counts as caught when at least
one run rejected it; "always" counts those rejected by every run).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from workbook import manifest, variants
from workbook.run import run_check

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Entry:
    problem: str
    name: str
    breaks: str
    source: Path


@dataclass
class Outcome:
    entry: Entry
    runs: int = 0
    rejected: int = 0
    failed: dict[str, int] = field(default_factory=dict)  # checkpoint id -> runs it failed
    seconds: list[float] = field(default_factory=list)
    error: str | None = None  # the diff does not apply, or the check could not run


#: Where a promoted variant's diff lives: it became a manifest wrong variant.
WRONG = HERE.parents[2] / "solutions" / "wrong"


def problem_ids() -> list[str]:
    """Every problem with a corpus index (its folder may be empty once all are promoted)."""
    return sorted(p.stem for p in HERE.glob("p*.toml"))


def corpus(problem: str) -> list[Entry]:
    """The problem's variants: those its toml lists, in order, then any unlisted diff, then
    the promoted ones (``[[promoted]]``: once a checker rejected them every run, they moved
    to ``solutions/wrong/pNN/`` as manifest wrong variants; they stay in the corpus, so a
    measurement keeps counting every mistake written before the checker that caught it)."""
    listed: dict[str, str] = {}
    promoted: dict[str, str] = {}
    index = HERE / f"{problem}.toml"
    if index.is_file():
        with index.open("rb") as f:
            data = tomllib.load(f)
        for v in data.get("variants", []):
            listed[v["name"]] = v.get("breaks", "")
        for v in data.get("promoted", []):
            promoted[v["name"]] = v.get("breaks", "")
    names = list(listed) + sorted(p.stem for p in (HERE / problem).glob("*.diff")
                                  if p.stem not in listed)
    return ([Entry(problem, n, listed.get(n, ""), HERE / problem / f"{n}.diff") for n in names]
            + [Entry(problem, n, b, WRONG / problem / f"{n}.diff") for n, b in promoted.items()])


def as_variant(entry: Entry) -> variants.Variant:
    """The corpus diff as a workbook Variant (kind "wrong", no expected checkpoints)."""
    return variants.Variant(manifest.get(entry.problem), "wrong", entry.name, entry.source,
                            entry.breaks, fails=())


def measure(entry: Entry, repeat: int) -> Outcome:
    out = Outcome(entry)
    try:
        path = variants.materialize(as_variant(entry))
    except variants.VariantError as exc:
        out.error = str(exc)
        return out
    problem = manifest.get(entry.problem)
    for _ in range(repeat):
        started = time.monotonic()
        result = run_check(problem, path)
        out.seconds.append(time.monotonic() - started)
        out.runs += 1
        if result.import_error:
            out.error = result.import_error
        if not result.passed:
            out.rejected += 1
            for cp in result.checkpoints:
                if cp.status == "failed":
                    out.failed[cp.id] = out.failed.get(cp.id, 0) + 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.selftest.unseen.measure",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("problems", nargs="*", help="pNN ... (default: every problem)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per variant (default 1)")
    ap.add_argument("--jobs", type=int, default=1, help="variants checked at once (default 1)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these variants")
    ap.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    args = ap.parse_args(argv)
    problems = args.problems or problem_ids()
    for p in problems:
        if not (HERE / f"{p}.toml").is_file():
            ap.error(f"no corpus for {p!r} under {HERE}")
    entries = [e for p in problems for e in corpus(p)
               if not args.only or e.name in args.only]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        outcomes = list(pool.map(lambda e: measure(e, max(1, args.repeat)), entries))

    if args.json:
        print(json.dumps([{
            "problem": o.entry.problem, "name": o.entry.name, "runs": o.runs,
            "rejected": o.rejected, "failed": o.failed, "error": o.error,
            "seconds": [round(s, 2) for s in o.seconds]} for o in outcomes], indent=2))
        return 0
    width = max((len(o.entry.name) for o in outcomes), default=10)
    print(f"{'problem':7}  {'variant':{width}}  {'rejected':>8}  {'s/run':>6}  failed checkpoints")
    for o in outcomes:
        if o.error and not o.runs:
            print(f"{o.entry.problem:7}  {o.entry.name:{width}}  {'ERROR':>8}  {'':>6}  {o.error}")
            continue
        mean = sum(o.seconds) / len(o.seconds)
        failed = ", ".join(f"{cp} ({n}/{o.runs})" for cp, n in sorted(o.failed.items()))
        if o.error:
            failed = f"{failed}  [{o.error.splitlines()[0]}]".strip()
        print(f"{o.entry.problem:7}  {o.entry.name:{width}}  {o.rejected:>3}/{o.runs:<4}  "
              f"{mean:6.1f}  {failed or '-'}")
    print()
    for p in problems:
        mine = [o for o in outcomes if o.entry.problem == p]
        if not mine:
            continue
        caught = sum(1 for o in mine if o.rejected)
        always = sum(1 for o in mine if o.runs and o.rejected == o.runs)
        print(f"{p}: caught {caught}/{len(mine)} ({100 * caught / len(mine):.0f} %), "
              f"always {always}/{len(mine)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
