"""Grade the full battery the way the issue's "done when" says, and measure it.

    python -m tests.selftest.grading.measure [--count 40] [--jobs 2] [--out DIR]
                                             [--kill-after 0.5] [--clean-run] [--oracle]
                                             [--mix all|typical] [--throughput-only]
                                             [--compare-pythons ROUNDS]

1. builds ``--count`` submissions across every problem that exists (``battery.build``);
2. grades them with ``--jobs N`` and SIGKILLs the grader once about ``--kill-after`` of the
   runs have finished; checks that no sandboxed process survived it;
3. grades again (resume): nothing finished is redone; every row must be as expected;
4. ``--clean-run``: one more uninterrupted ``--fresh`` batch, for a clean throughput figure;
``--mix typical``: no hostile files (the honest and typical wrong class); ``--throughput-only``:
skip 2 and 3 (only the clean run).  ``--compare-pythons N``: instead, N rounds of two clean
runs side by side, ``--one-python`` then ``--pythons`` (every interpreter found), and the
ratio of their throughputs.

5. ``--oracle``: each pitfall pair must match, checkpoint by checkpoint, an unsandboxed
   ``run_check`` of the original pitfall file.

Prints the figures and exits 1 if anything was not as expected.
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.selftest.grading import battery
from workbook import ROOT, manifest, run, variants
from workbook.grading.sandbox.isolation import detect
from workbook.grading.sandbox.procs import processes_of


def _finished(state: Path) -> dict[tuple[str, str], str]:
    try:
        doc = json.loads(state.read_text())
    except (OSError, ValueError):
        return {}
    return {(name, pid): e["graded_at"] for name, row in doc["rows"].items()
            for pid, e in row["problems"].items() if "seconds" in e and e["seconds"] > 0}


def _command(subs: Path, state: Path, jobs: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "workbook", "grade", str(subs), "--jobs", str(jobs),
            "--format", "json", "--out", str(state), *extra]


def _sandbox_processes(state: Path) -> list[int]:
    """Live processes of the uids the (killed) batch had claimed, as its gradebook says."""
    try:
        uids = json.loads(state.read_text())["sandbox_uids"]
    except (OSError, ValueError, KeyError):
        return []
    return [pid for uid in uids for pid in processes_of(uid)]


def main(argv: list[str] | None = None) -> int:
    """Grade and measure; the battery's decoy checkout (under /run) is removed after."""
    markers: list[str] = []
    try:
        return _main(argv, markers)
    finally:
        for marker in markers:
            shutil.rmtree(battery.decoy_path(marker), ignore_errors=True)


def _main(argv: list[str] | None, markers: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Grade the full battery and measure it.")
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--kill-after", type=float, default=0.5)
    parser.add_argument("--clean-run", action="store_true")
    parser.add_argument("--oracle", action="store_true")
    parser.add_argument("--mix", choices=("all", "typical"), default="all",
                        help="typical: no hostile submissions")
    parser.add_argument("--throughput-only", action="store_true",
                        help="only the clean run (implies --clean-run)")
    parser.add_argument("--compare-pythons", type=int, metavar="ROUNDS", default=0,
                        help="only clean runs: ROUNDS × (--one-python, then --pythons)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="workbook-battery-"))
    problems = list(manifest.problems().values())
    iso = detect([p.solution_file for p in problems])
    bat = battery.build(out, problems, count=args.count, isolation=iso,
                        hostile=[] if args.mix == "typical" else None)
    markers.append(bat.marker)
    pairs = len(bat.expected) * len(problems)
    submitted = sum(1 for per in bat.expected.values() for e in per.values()
                    if e["status"] != "not_submitted" and "symbolic link" not in
                    str(e.get("reason")))
    print(f"battery: {len(bat.expected)} submissions × {len(problems)} problems = {pairs} "
          f"pairs, {submitted} to run; isolation {iso}; in {out}")
    state = out / "gradebook.json"
    failures: list[str] = []
    if args.compare_pythons:
        return _report(_compare_pythons(args, bat, out, problems, pairs, submitted))
    if args.throughput_only:
        return _report(_clean_run(args, bat, out, problems, pairs, submitted, failures)[1])

    # -- 2. a batch killed midway
    started = time.monotonic()
    batch = subprocess.Popen(_command(bat.submissions, state, args.jobs, "--quiet"), cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = int(submitted * args.kill_after)
    while len(_finished(state)) < target and batch.poll() is None:
        time.sleep(0.1)
    batch.send_signal(signal.SIGKILL)
    batch.wait()
    first_seconds = time.monotonic() - started
    before = _finished(state)
    time.sleep(1)
    left = _sandbox_processes(state)
    print(f"killed the batch after {first_seconds:.0f} s with {len(before)} runs finished; "
          f"sandbox processes alive 1 s later: {len(left)}")
    if left:
        failures.append(f"{len(left)} sandboxed processes outlived the killed grader")

    # -- 3. resume
    started = time.monotonic()
    resumed = subprocess.run(_command(bat.submissions, state, args.jobs), cwd=ROOT,
                             capture_output=True, text=True)
    resume_seconds = time.monotonic() - started
    print(resumed.stdout[-2500:])
    after = _finished(state)
    redone = [k for k in before if after.get(k) != before[k]]
    if resumed.returncode != 0:
        failures.append(f"the resumed batch exited {resumed.returncode}: {resumed.stderr[-800:]}")
    if redone:
        failures.append(f"resume redid finished work: {redone}")
    doc = json.loads(state.read_text())
    wrong = battery.mismatches(doc, bat, problems)
    failures += wrong
    if battery.marker_processes(bat.marker):
        failures.append("the orphan hostile's sleeper is still alive")
    leftovers = sum(e.get("leftovers", 0) for r in doc["rows"].values()
                    for e in r["problems"].values())
    runs = len(after)
    total_seconds = first_seconds + resume_seconds
    print(f"resume: {resume_seconds:.0f} s, {runs - len(before)} runs, "
          f"{len(before)} finished runs kept as they were ({len(redone)} redone)")
    print(f"rows as expected: {len(bat.expected) - len({m.split('/')[0].split(':')[0] for m in wrong})}"
          f"/{len(bat.expected)}; leftover processes killed after runs: {leftovers}")
    print(f"interrupted + resumed: {pairs} pairs ({runs} runs) in {total_seconds:.0f} s → "
          f"{pairs / total_seconds * 60:.1f} submission×problem pairs/min, "
          f"{runs / total_seconds * 60:.1f} runs/min")

    # -- 4. a clean run
    if args.clean_run:
        doc, failures = _clean_run(args, bat, out, problems, pairs, submitted, failures)

    # -- 5. the pitfall pairs against an unsandboxed check of the original files
    if args.oracle:
        by_id = {p.id: p for p in problems}
        compared, varied = 0, []
        for name, per in bat.expected.items():
            for pid, want in per.items():
                if "pitfall" not in want:
                    continue
                p = by_id[pid]
                direct = run.run_check(p, variants.pitfall_file(p, want["pitfall"]))
                graded = {c["id"]: c["status"] for c in
                          doc["rows"][name]["problems"][pid]["checkpoints"]}
                plain = {cp.id: cp.status for cp in direct.checkpoints}
                compared += 1
                declared = [c for c in want["fails"] if graded[c] == "passed" or
                            plain[c] == "passed"]
                if declared:  # the pitfall's contract: these fail, sandboxed or not
                    failures.append(f"{name}/{pid} ({want['pitfall']}): declared failures "
                                    f"passed: {declared}")
                diff = {k: (plain[k], graded[k]) for k in plain if plain[k] != graded[k]}
                if diff:  # a racy wrong variant may fail other checkpoints on some runs
                    varied.append(f"{name}/{pid} ({want['pitfall']}): direct vs sandboxed "
                                  f"{diff}")
        print(f"oracle: {compared} pitfall pairs compared with an unsandboxed run_check; "
              f"declared failures held in all; {len(varied)} differed elsewhere:")
        for line in varied:
            print("   ", line)

    return _report(failures)


def _compare_pythons(args, bat, out: Path, problems, pairs: int,
                     submitted: int) -> list[str]:
    """Clean runs under the grader's Python alone and under every one found, alternated in
    one sitting; their pairs a minute and the ratio."""
    failures: list[str] = []
    rates: dict[str, list[float]] = {"--one-python": [], "--pythons": []}
    for _ in range(args.compare_pythons):
        for flag, figures in rates.items():
            doc, failures = _clean_run(args, bat, out, problems, pairs, submitted, failures,
                                       flag)
            figures.append(doc["_pairs_per_min"])
    one, all_ = (sum(v) / len(v) for v in rates.values())
    print(f"pythons: {', '.join(p['release'] for p in doc['pythons'])}; pairs a minute, "
          f"--one-python {rates['--one-python']} vs --pythons {rates['--pythons']}: "
          f"--pythons grades at {all_ / one:.2f}× the pace of one Python "
          f"({one / all_:.2f}× the time)")
    return failures


def _clean_run(args, bat, out: Path, problems, pairs: int, submitted: int,
               failures: list[str], *flags: str) -> tuple[dict, list[str]]:
    """One uninterrupted ``--fresh`` batch: the throughput figure."""
    started = time.monotonic()
    cpu = _children_cpu()
    clean = subprocess.run(_command(bat.submissions, out / "clean.json", args.jobs,
                                    "--fresh", "--quiet", *flags), cwd=ROOT,
                           capture_output=True, text=True)
    seconds = time.monotonic() - started
    cpu = _children_cpu() - cpu  # the whole batch: grader, sandboxes, pytest processes
    doc = json.loads((out / "clean.json").read_text())
    wrong = battery.mismatches(doc, bat, problems)
    runs = [e["seconds"] for r in doc["rows"].values() for e in r["problems"].values()
            if e.get("seconds")]
    inside = sum(e.get("cpu") or 0 for r in doc["rows"].values() for e in r["problems"].values())
    outside = [e["reason"] for r in doc["rows"].values() for e in r["problems"].values()
               if "outside view" in str(e.get("reason"))]
    doc["_pairs_per_min"] = round(len(runs) / seconds * 60, 1)  # for _compare_pythons
    shown = "".join(f", {flag}" for flag in flags)
    print(f"clean run (--fresh, --jobs {args.jobs}, mix {args.mix}{shown}): {pairs} pairs, "
          f"{len(runs)} runs in {seconds:.0f} s → {len(runs) / seconds * 60:.1f} runs/min "
          f"({pairs / seconds * 60:.1f} pairs/min); mean run {sum(runs) / len(runs):.2f} s; "
          f"CPU {cpu:.0f} s outside the runs' namespaces, {inside:.0f} s in the runs' "
          f"cgroups ({inside / len(runs):.2f} s a run); {len(wrong)} mismatches; "
          f"{len(outside)} outside-view verdicts; exit {clean.returncode}; load {_load()}")
    return doc, failures + [f"clean run: {m}" for m in wrong] + [
        f"clean run: the outside view: {reason}" for reason in outside]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _report(failures: list[str]) -> int:
    for line in failures:
        print("MISMATCH", line)
    print("ALL AS EXPECTED" if not failures else f"{len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
