"""Benchmarks: what each design costs, measured side by side in one run.

``./check.sh bench pNN [--file PATH] [--json] [--quick] [--reps N]`` runs the module
``workbook.bench.pNN``.  Each module describes a few *cases* (one scenario each, such as
"4 producers -> 1 consumer") and the *designs* to run through them: the reference
solution, the learner's file, wrong-but-working variants from ``solutions/pitfalls/``
and real libraries ("peers").  This package does the rest the same way for every problem:

* alternating runs: every repetition measures every design once, in a rotated order,
  so a burst of load on the machine lands on all of them rather than on one;
* several repetitions; the figure shown is the median, the spread (half the min-max
  range, as a percentage of the median) says how much the repetitions disagreed;
* ratios against the reference, taken from medians of the same run;
* a missing peer library, a learner file that is still the skeleton, or a design that
  hangs is reported in its row and the run goes on;
* a rich table, or with ``--json`` one JSON document:

  {"problem", "title", "file", "quick", "repetitions", "seconds",
   "environment": {"python", "implementation", "platform", "machine", "cpu", "cpus",
                   "load_average", "load_average_after"},
   "cases": [{"id", "title", "note", "primary",
              "metrics": [{"key", "label", "unit", "better": "higher"|"lower", "stat"}],
              "rows": [{"design", "kind": "reference"|"yours"|"design"|"pitfall"|"peer",
                        "status": "measured"|"missing"|"failed", "note",
                        "values": {metric key: {"value", "min", "max", "spread", "n"}},
                        "ratio": {metric key: value / the reference's value, or null}}]}]}

  ``value`` is the median over repetitions (or, for latencies, the ``stat`` over every
  sample pooled); ``min``/``max`` are the extremes of the per-repetition figures and
  ``spread`` is half their range divided by ``value``.

A benchmark is not a test: nothing here passes or fails on time.  Figures depend on the
machine and on its load; ratios measured in one run are what to compare.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import itertools
import json
import os
import platform
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from workbook import ROOT, manifest, testkit
from workbook.errors import UsageError
from workbook.bench.report import fmt, fmt_ratio, show, to_json, to_markdown  # noqa: F401 - re-exported

#: Seconds after which one measurement counts as hung (its design is then dropped).
#: Generous: a measurement takes well under a second, but the box may be heavily loaded.
LIMIT = max(4 * testkit.BOUND, 10.0)

#: Row kinds, in the order rows are listed.
KINDS = ("reference", "yours", "design", "pitfall", "peer")


class Missing(Exception):
    """A design cannot be measured here (an optional peer library is not installed)."""


class Hung(Exception):
    """A measurement did not finish within ``LIMIT`` seconds."""


# -- loading files and peers ----------------------------------------------------------------

_loaded = itertools.count()


def load_file(path: str | Path) -> Any:
    """Import a learner, reference, pitfall or alternate file as a fresh module.

    Each call gives a new module object (its own globals), so two designs never share
    state.  Pitfall files import ``solutions.*``: the repository root goes on sys.path."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    path = Path(path).resolve()
    name = f"_bench_{path.stem}_{next(_loaded)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def need(package: str) -> Any:
    """Import an optional peer library, or raise ``Missing`` saying how to get it."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise Missing(f"{package} is not installed ({exc.__class__.__name__}); "
                      f"it comes with the bench extra: pip install -e '.[bench]'") from None


# -- what a benchmark module declares ---------------------------------------------------------

@dataclass(frozen=True)
class Metric:
    """One column: a figure computed from what each repetition returned.

    ``source`` names the key a measurement returns.  A float per repetition gives the
    median over repetitions; a list of samples per repetition (latencies) is pooled, and
    ``stat`` ("median" or "p99") is taken over the pool."""

    key: str
    label: str
    unit: str
    better: str  # "higher" | "lower"
    source: str = ""
    stat: str = "median"
    scale: float = 1.0
    digits: int = 3  # significant digits shown

    @property
    def src(self) -> str:
        return self.source or self.key


@dataclass
class Design:
    """A row: something to measure.  ``load()`` returns what ``Case.measure`` receives."""

    name: str
    kind: str
    load: Callable[[], Any]
    note: str = ""
    # Set by get(); `error` also by run_case once the design has hung.
    loaded: Any = field(default=None, init=False, repr=False)
    error: str | None = field(default=None, init=False)
    missing: bool = field(default=False, init=False)

    def get(self) -> Any:
        """What ``load()`` returned (loaded once); None with ``error`` set if it failed."""
        if self.loaded is None and self.error is None:
            try:
                self.loaded = self.load()
            except Missing as exc:
                self.error, self.missing = str(exc), True
            except NotImplementedError:
                self.error = "not implemented yet (NotImplementedError)"
            except Exception as exc:  # noqa: BLE001 - a learner file may raise anything
                self.error = f"could not be loaded: {type(exc).__name__}: {exc}"
        return self.loaded


@dataclass
class Case:
    """One scenario.  ``measure(obj, design)`` runs it once for one design and returns
    ``{source: float or list of floats}``; it may raise ``NotImplementedError``, ``Hung``
    or anything a broken design raises."""

    id: str
    title: str
    metrics: list[Metric]
    primary: str  # the metric key whose ratio against the reference is shown
    designs: list[Design]
    measure: Callable[[Any, Design], dict]
    note: str = ""
    warmup: Callable[[Any, Design], Any] | None = None


# -- running -----------------------------------------------------------------------------------

@dataclass
class Row:
    design: Design
    status: str = "measured"  # measured | missing | failed
    note: str = ""
    samples: list[dict] = field(default_factory=list)
    values: dict[str, dict] = field(default_factory=dict)
    ratio: dict[str, float | None] = field(default_factory=dict)


def run_in_thread(fn: Callable[[], Any], limit: float = LIMIT, *, what: str) -> Any:
    """Call ``fn()`` in a daemon thread; raise ``Hung`` if it is not back within ``limit``.

    A design that deadlocks cannot be stopped from outside; its daemon thread is left
    behind and the design is dropped from the rest of the run."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"bench {what}", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        raise Hung(f"{what} did not finish within {limit:g} s (hung or deadlocked?)")
    if "error" in box:
        raise box["error"]
    return box.get("result")


class Crew:
    """Worker threads of one scenario (producers, consumers), started together.

    ``wait()`` returns once every one of them has finished, and raises the first exception
    any of them raised (a learner's ``put`` may raise) instead of waiting for threads that
    now never will.  ``on_error`` lets the scenario interrupt its own waiting side too
    (cancel the consumer's task, stop a loop).  Threads are daemons: a deadlocked one is
    left behind and ``wait()`` raises ``Hung``."""

    def __init__(self, targets: list[Callable[[], None]],
                 on_error: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()  # guards _left and errors
        self._left = len(targets)
        self.errors: list[BaseException] = []
        # Set by the last thread to finish, or by the first one that fails.
        self._over = threading.Event()
        self._on_error = on_error
        self._threads = [threading.Thread(target=self._run, args=(t,), daemon=True)
                         for t in targets]

    def _run(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - handed to wait()/check()
            with self._lock:
                self.errors.append(exc)
            self._over.set()
            if self._on_error is not None:
                try:
                    self._on_error()
                except Exception:  # noqa: BLE001 - the error above is the one to report
                    pass
        finally:
            with self._lock:
                self._left -= 1
                if self._left == 0:
                    self._over.set()

    def start(self) -> "Crew":
        for t in self._threads:
            t.start()
        return self

    def wait(self, limit: float = LIMIT, *, what: str = "a worker thread") -> None:
        if not self._over.wait(limit):
            raise Hung(f"{what} was still blocked after {limit:g} s "
                       "(a lost wakeup or a deadlock?)")
        self.check()

    def check(self) -> None:
        with self._lock:
            if self.errors:
                raise self.errors[0]


def sustain(once: Callable[[], dict], min_seconds: float) -> dict:
    """Call ``once()`` until the ``"seconds"`` it reports add up to ``min_seconds``.

    ``once`` returns additive totals (``{"seconds": ..., "items": ...}``); the sums come
    back.  A fast design then runs long enough for the clock to mean something, while a
    slow one still runs its scenario just once."""
    totals: dict = {}
    while True:
        for key, value in once().items():
            totals[key] = totals.get(key, 0) + value
        if totals.get("seconds", 0) >= min_seconds:
            return totals


def _stat(values: list[float], stat: str) -> float:
    if stat == "median":
        return statistics.median(values)
    if stat == "p99":
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    raise ValueError(stat)


def _aggregate(case: Case, row: Row) -> None:
    for m in case.metrics:
        per_rep = [s[m.src] for s in row.samples if m.src in s]
        if not per_rep:
            continue
        if isinstance(per_rep[0], list):
            pooled = [x for rep in per_rep for x in rep]
            if not pooled:
                continue
            centre = _stat(pooled, m.stat)
            spots = [_stat(rep, m.stat) for rep in per_rep if rep]
            count = len(pooled)
        else:
            centre = statistics.median(per_rep)
            spots = per_rep
            count = len(per_rep)
        lo, hi = min(spots), max(spots)
        spread = (hi - lo) / 2 / abs(centre) if centre else 0.0
        row.values[m.key] = {"value": centre * m.scale, "min": lo * m.scale,
                             "max": hi * m.scale, "spread": spread, "n": count}


def run_case(case: Case, reps: int, progress: Callable[[str], None]) -> list[Row]:
    rows = [Row(d) for d in case.designs]
    live: list[Row] = []
    for row in rows:
        obj = row.design.get()
        if row.design.error is not None:
            row.status = "missing" if row.design.missing else "failed"
            row.note = row.design.error
            continue
        if case.warmup is not None:
            try:
                case.warmup(obj, row.design)
            except Exception as exc:  # noqa: BLE001 - a broken design must not stop the run
                _failed(case, row, exc)
                continue
        live.append(row)
    for rep in range(reps):
        shift = rep % len(live) if live else 0
        for row in live[shift:] + live[:shift]:  # alternate: a rotated order every round
            if row.status != "measured":
                continue
            progress(f"{case.id}: {row.design.name} ({rep + 1}/{reps})")
            try:
                row.samples.append(case.measure(row.design.get(), row.design))
            except Exception as exc:  # noqa: BLE001 - a broken design must not stop the run
                _failed(case, row, exc)
    for row in rows:
        if row.status == "measured":
            _aggregate(case, row)
    ref = next((r for r in rows if r.design.kind == "reference" and r.status == "measured"), None)
    for row in rows:
        for m in case.metrics:
            mine = row.values.get(m.key, {}).get("value")
            base = ref.values.get(m.key, {}).get("value") if ref else None
            row.ratio[m.key] = mine / base if mine is not None and base else None
    return rows


def _failed(case: Case, row: Row, exc: BaseException) -> None:
    row.status = "failed"
    row.samples.clear()
    if isinstance(exc, NotImplementedError):
        row.note = "not implemented yet (NotImplementedError)"
    elif isinstance(exc, Hung):
        row.note = str(exc)
        # Its threads may still be stuck holding locks: later cases do not run it again.
        row.design.error = f"skipped: it hung in {case.id!r} ({exc})"
    else:
        row.note = f"raised {type(exc).__name__}: {exc}"


# -- the command line ----------------------------------------------------------------------------

def parse(problem: manifest.Problem, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"check.sh bench {problem.id}",
        description=f"Benchmark of {problem.id} ({problem.title}): the reference against "
                    "other designs and real libraries, measured side by side.")
    parser.add_argument("--file", help="your solution to measure too "
                        f"(default: mine/{problem.module}.py, if it is implemented)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--markdown", action="store_true",
                        help="print Markdown tables (what the book's Measurements quote)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and 2 repetitions: checks that it runs, figures mean little")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per design")
    args = parser.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        raise UsageError("--reps must be at least 1")
    if args.file is not None and not Path(args.file).is_file():
        raise UsageError(f"no such file: {args.file}")
    return args


def learner_design(problem: manifest.Problem, args: argparse.Namespace,
                   adapt: Callable[[Any], Any] = lambda module: module) -> Design:
    """The row for ``--file`` (or ``mine/``): the learner's own solution."""
    path = Path(args.file) if args.file else problem.learner_file
    return Design(f"yours: {_shown(path)}", "yours", lambda: adapt(load_file(path)))


def file_design(path: Path, name: str, kind: str,
                adapt: Callable[[Any], Any] = lambda module: module, note: str = "") -> Design:
    return Design(name, kind, lambda: adapt(load_file(path)), note)


def environment() -> dict:
    """Where the figures were taken: they mean little without it."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": platform.platform(terse=True), "machine": platform.machine(),
            "cpu": cpu, "cpus": os.cpu_count(), "load_average": load}


def run_bench(problem_id: str, argv: list[str],
              build: Callable[[manifest.Problem, argparse.Namespace], list[Case]], *,
              default_reps: int = 5) -> int:
    """The whole command: parse, build the cases, run them, print table or JSON.

    Returns 0 when every case measured the reference, else 1."""
    problem = manifest.get(problem_id)
    args = parse(problem, argv)
    reps = args.reps or (2 if args.quick else default_reps)
    env = environment()
    started = time.perf_counter()
    cases = build(problem, args)
    progress = _progress(not (args.json or args.markdown))
    results = []
    try:
        for case in cases:
            results.append((case, run_case(case, reps, progress)))
    finally:
        progress(None)
    env["load_average_after"] = environment()["load_average"]
    seconds = time.perf_counter() - started
    doc = to_json(problem, args, reps, env, results, seconds)
    if args.json:
        print(json.dumps(doc, indent=2))
    elif args.markdown:
        print(to_markdown(doc))
    else:
        show(problem, doc)
    ok = all(any(r.design.kind == "reference" and r.status == "measured" for r in rows)
             for _, rows in results)
    return 0 if ok else 1


def _progress(enabled: bool) -> Callable[[str | None], None]:
    """One transient status line on stderr while a long run goes on."""
    if not enabled or not sys.stderr.isatty():
        return lambda text: None

    def show(text: str | None) -> None:
        sys.stderr.write("\r\033[K" + (f"measuring {text}…" if text else ""))
        sys.stderr.flush()
    return show


def _shown(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
