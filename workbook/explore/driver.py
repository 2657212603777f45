"""The problem-independent half of exploration: load a controlled copy of the learner's
module, draw scenarios (first a problem's systematic shapes, then Hypothesis from a fixed
seed), stop at the first counterexample, shrink it, replay a token, and the checkpoint's
test body.

A problem's explorer (``p03`` is the first) is a module with:

- ``PROBLEM`` (its id), ``DEFAULT_EXAMPLES``, ``DEFAULT_SEED``, ``SCHEDULES`` (schedule seeds
  per systematic scenario);
- ``run(module, scenario) -> Outcome``: one controlled run, judged;
- ``probe(module, report) -> bool``: whether the extensions are implemented (raises the
  learner's ``NotImplementedError`` when the core is not; may set ``report.uncontrolled``);
- ``strategy(extensions)`` (a Hypothesis strategy of scenarios), ``systematic(extensions)``
  (a list), ``candidates(scenario)`` (smaller or plainer scenarios, most promising first),
  ``reseed(scenario, seed)`` and ``from_data(fields)`` (a scenario from a token's fields);
- optionally ``pairs(extensions)`` (and ``triples(extensions)``): small scenarios of every
  pair (triple) of API calls, each run under *every* schedule with at most ``BOUND``
  preemptions (``bounded``) -- ``run`` then takes the ``choices`` of the schedule as a third
  argument; triples only when a search budget (``seconds``) is given; a problem whose runs
  have many points may set ``WALK = bounded.deviations`` (one deviation from the default
  schedule at each point, spread over the run) and its own ``PER_SCENARIO``, or choose
  both per scenario with ``walk(scenario) -> (WALK, PER_SCENARIO)``; a scenario whose
  ``ops`` is true (threads stopped inside lines) is walked by ``bounded.each_first``, at
  most ``PER_OPS_SCENARIO`` runs;
- ``load(path)``: its controlled copy of the learner's module (``driver.load`` with the
  stand-ins it needs: ``prims.patch`` for threading/time, more for sockets or selectors).

A scenario is a dataclass of plain data with a ``describe()`` sentence.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

from workbook.explore import bounded, onecpu, prims, tokens
from workbook.explore.sched import Event
from workbook.explore.timeline import as_timeline, render

#: Real seconds spent shrinking a counterexample before the smallest found so far is shown.
SHRINK_SECONDS = 4.0
#: Schedule seeds each shrinking candidate is tried with.
SHRINK_SCHEDULES = 8
#: Preemptions per systematic schedule of a pair or triple of calls (CHESS finds most
#: concurrency bugs within one or two), and the most schedules run per scenario.
BOUND = 1
PER_SCENARIO = 400
#: The runs of a scenario stopped inside lines (``ops``): one per way to leave the default
#: schedule once, and once from each schedule where another thread runs first.  Every
#: bytecode read is a point there, so walking every schedule with one preemption costs
#: more: measured on the references, 866 and 402 runs instead of 273 and 70 for P01's two
#: largest shapes (+2.0 s a check), 362 and 342 instead of 154 and 147 for P03's (+0.5 s).
#: No known mistake of P01-P03 needs the whole walk (the blind corpora's remaining misses
#: there break only on another Python).  P04's ``opcodes`` shapes are not ``ops``: they
#: keep the depth-first walk of ``PER_SCENARIO`` runs (all 156 of the first; the first 400
#: of 2884 of the second), which finds its unseen ``take_without_lock`` where single
#: deviations miss it.
PER_OPS_SCENARIO = 300

_LOADED: dict[tuple[str, str, float], Any] = {}
#: A graded run's exploration settings ``(replay token, seconds, seed)``, fixed by ``pin``
#: before the learner file is imported; None: read them from the environment when a check
#: runs (a learner's check: ``--replay``, ``--explore``, ``--seed``).
PINNED: tuple[str, str, str] | None = None


def pin(seed: str | None) -> None:
    """Fix the settings of a graded run now, before any learner code exists: the grader's
    seed, and no replay token or longer search (the environment is the submission's to
    change; a token set there would replay one harmless scenario instead of exploring)."""
    global PINNED
    PINNED = ("", "", seed or "")


def settings() -> tuple[str, str, str]:
    """``(replay token, seconds, seed)``: pinned, or as the environment says now."""
    if PINNED is not None:
        return PINNED
    return tuple(os.environ.get(f"WORKBOOK_EXPLORE_{name}", "")  # type: ignore[return-value]
                 for name in ("REPLAY", "SECONDS", "SEED"))


def seed_for(problem_id: str, seed: int | None = None) -> int | None:
    """The seed a check of ``problem_id`` explores from: ``seed`` if given, else
    ``WORKBOOK_EXPLORE_SEED``, else the problem explorer's default; None when the problem has
    no explorer (its check explores nothing, so no seed decides it)."""
    try:
        problem = importlib.import_module(f"workbook.explore.{problem_id}")
    except ModuleNotFoundError:
        return None
    if seed is not None:
        return seed
    return int(settings()[2] or problem.DEFAULT_SEED)


def load(path: str | os.PathLike, problem: str,
         patch: Callable[[dict[str, Any]], list[str]] = prims.patch) -> Any:
    """A private copy of the learner's module whose threading/time names (or whatever else
    ``patch`` replaces in its namespace) are controlled."""
    path = str(Path(path).resolve())
    key = (problem, path, os.stat(path).st_mtime)
    if key in _LOADED:
        return _LOADED[key]
    name = f"_explored_{problem}_{len(_LOADED)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    module.__dict__["_explore_patched"] = patch(module.__dict__)
    _LOADED[key] = module
    return module


@dataclass
class Outcome:
    """One controlled run of one scenario, judged."""
    scenario: Any
    owner: str  # the problem id
    problem: str | None = None  # what went wrong, None when the run is explained
    events: list[Event] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    uncontrolled: str = ""  # why the run could not be controlled, if it could not
    error: BaseException | None = None  # the constructor (or the harness) raised this
    undecided: bool = False

    def message(self) -> str:
        tok = tokens.encode(self.owner, self.scenario)
        return (f"Exploration found a run that breaks the contract: {self.problem}\n\n"
                f"Scenario: {self.scenario.describe()}\n\n"
                f"{render(self.events, self.names)}\n\n"
                f"Replay this exact run: ./check.sh {self.owner} --replay {tok}\n"
                f"(or: WORKBOOK_EXPLORE_REPLAY={tok} ./check.sh {self.owner})")

    def timeline(self) -> dict:
        """The run step by step for a page (``workbook.timelines``' structure), with the
        part of ``message`` that draws it as a table (``text``)."""
        return {**as_timeline(self.events, self.names, self.scenario.describe()),
                "text": render(self.events, self.names)}


@dataclass
class Report:
    runs: int = 0
    calls: int = 0
    seconds: float = 0.0
    first_after: float | None = None  # seconds to the first counterexample
    found: Outcome | None = None
    uncontrolled: str = ""
    extensions: bool = True


class _Stop(Exception):
    """The time budget of ``explore(seconds=...)`` is spent."""


class _Found(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.problem)
        self.outcome = outcome


def walk_of(problem: ModuleType, sc: Any) -> tuple[Callable[..., Any], int]:
    """How ``sc``'s schedules are walked: the problem's ``walk(sc)`` if it has one; single
    deviations for a scenario stopped inside lines; else the problem's ``WALK`` and
    ``PER_SCENARIO`` (default: every schedule within the bound)."""
    if hasattr(problem, "walk"):
        return problem.walk(sc)
    if getattr(sc, "ops", False):
        return bounded.each_first, PER_OPS_SCENARIO
    return (getattr(problem, "WALK", bounded.schedules),
            getattr(problem, "PER_SCENARIO", PER_SCENARIO))


def core_ran(out: Outcome, report: Report) -> bool:
    """The common end of a problem's ``probe``: the learner's ``NotImplementedError`` is
    raised (the core is not written yet); a run that left the scheduler's control is noted
    in ``report``.  True when the probe ran under control."""
    if isinstance(out.error, NotImplementedError):
        raise out.error
    if out.uncontrolled:
        report.uncontrolled = out.uncontrolled
        return False
    return True


def explore(problem: ModuleType, path: str | os.PathLike, *, examples: int | None = None,
            seed: int | None = None, seconds: float | None = None) -> Report:
    """Run ``problem``'s systematic scenarios, then draw up to ``examples`` more (or for
    ``seconds``) from ``seed``; stop at the first counterexample and shrink it."""
    with onecpu.kept():  # thousands of runs in a row: the controller stays on one CPU
        return _explore(problem, path, examples, seed, seconds)


def _explore(problem: ModuleType, path: str | os.PathLike, examples: int | None,
             seed: int | None, seconds: float | None) -> Report:
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hseed

    examples = problem.DEFAULT_EXAMPLES if examples is None else examples
    seed = problem.DEFAULT_SEED if seed is None else seed
    module = problem.load(path)
    report = Report()
    started = time.monotonic()
    report.extensions = problem.probe(module, report)
    if report.uncontrolled:
        report.seconds = time.monotonic() - started
        return report
    found: list[Outcome] = []

    def judged(out: Outcome) -> bool:
        """Count a run; True when the search ends with it."""
        report.runs += 1
        if out.error is not None:
            raise out.error
        if out.uncontrolled:
            report.uncontrolled = out.uncontrolled
            return True
        if out.problem:
            report.first_after = time.monotonic() - started
            found.append(out)
            return True
        return False

    @settings(max_examples=max(examples, 1) if seconds is None else 10**9, deadline=None,
              database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False,
              print_blob=False, verbosity=Verbosity.quiet)
    @hseed(seed)
    @given(problem.strategy(report.extensions))
    def prop(sc: Any) -> None:
        report.calls += 1
        if report.uncontrolled or found:
            return
        if seconds is not None and time.monotonic() - started > seconds:
            raise _Stop  # the search budget is spent (generation only: it ends the search)
        if judged(problem.run(module, sc)) and found:
            raise _Found(found[0])

    def bounded_runs(shapes: Any, until: float | None) -> bool:
        """Every schedule of each scenario within the bound; True when the search ends."""
        for sc in shapes:
            walk, limit = walk_of(problem, sc)
            for out in walk(lambda ch: problem.run(module, sc, ch), BOUND, limit):
                if judged(out):
                    return True
            if until is not None and time.monotonic() > until:
                return False
        return False

    done = False
    for sc in problem.systematic(report.extensions):  # first the shapes chance rarely draws
        for k in range(problem.SCHEDULES):
            done = judged(problem.run(module, problem.reseed(sc, sc.seed + k)))
            if done:
                break
        if done:
            break
    if not done and hasattr(problem, "pairs"):
        done = bounded_runs(problem.pairs(report.extensions), None)
    if not done and seconds and hasattr(problem, "triples"):
        done = bounded_runs(problem.triples(report.extensions), started + seconds / 2)
    if not done and (examples > 0 or seconds):
        try:
            with _drawn_from_the_seed_alone():
                prop()
        except _Stop:
            pass
        except BaseException:  # noqa: BLE001 - _Found, or Hypothesis's note that its replay passed
            if not found:  # (the replay returns at once once something is found)
                raise
    if found:
        report.found = shrink(problem, module, found[0], report)
    report.seconds = time.monotonic() - started
    return report


@contextlib.contextmanager
def _drawn_from_the_seed_alone() -> Iterator[None]:
    """Hypothesis (6.131 on) mixes literal numbers and strings found in the source of every
    local module loaded into its draws -- the harness's, and the learner's own file: a seed
    could then be a number from the learner's code, and an edit to one constant would change
    which scenarios are explored.  To find them it parses each module once per process (a
    fresh graded run: 0.18 s of CPU, about 6 % of it) and keeps what it found in
    ``./.hypothesis/constants``, a file for every version of every module.  An exploration
    draws from its seed alone.  (This replaces a private function; a Hypothesis without it
    has no such constants to leave out.)"""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
        found = providers._get_local_constants
    except (ImportError, AttributeError):
        yield
        return
    providers._get_local_constants = Constants  # called with nothing: an empty set of each
    try:
        yield
    finally:
        providers._get_local_constants = found


def shrink(problem: ModuleType, module: Any, out: Outcome, report: Report,
           seconds: float = SHRINK_SECONDS, schedules: int = SHRINK_SCHEDULES) -> Outcome:
    """The smallest failing scenario reachable from ``out`` by the problem's candidates (each
    tried under a few schedule seeds), within ``seconds``."""
    end = time.monotonic() + seconds
    best = out
    improved = True
    while improved and time.monotonic() < end:
        improved = False
        for cand in problem.candidates(best.scenario):
            if time.monotonic() > end:
                break
            for k in range(schedules):
                trial = cand if k == 0 else problem.reseed(cand, k - 1)
                got = problem.run(module, trial)
                report.runs += 1
                if got.problem and not got.uncontrolled and got.error is None:
                    best, improved = got, True
                    break
            if improved:
                break
    return best


def replay(problem: ModuleType, path: str | os.PathLike, text: str) -> Outcome:
    owner, data = tokens.decode(text)
    if owner != problem.PROBLEM:
        raise ValueError(f"this token replays a run of {owner}, not of {problem.PROBLEM}")
    try:
        sc = problem.from_data(data)
    except TypeError as exc:
        raise ValueError(f"the replay token is damaged ({exc})") from None
    return problem.run(problem.load(path), sc)


def uncontrolled_message(why: str) -> str:
    """The exploration checkpoint's failure when a run left the explorer's control: not a
    counterexample, and not a pass either (a search that could not run proves nothing)."""
    return ("Exploration could not check your code, so this checkpoint cannot pass: " + why +
            ".\nThe explorer runs your threads one at a time and has to see every place where "
            "one of them waits, to decide who goes next; a thread waiting anywhere else cannot "
            "be given its turn, so nothing a run showed would say more than luck does. Let "
            "your threads wait only on what the explorer controls (named above).")


def check(problem: ModuleType, path: str | os.PathLike) -> None:
    """The body of a problem's exploration checkpoint: replay ``WORKBOOK_EXPLORE_REPLAY`` if
    set, else explore (``WORKBOOK_EXPLORE_SECONDS`` long if set, from the seed
    ``WORKBOOK_EXPLORE_SEED`` if set, else the problem's default); fail with the shrunk
    counterexample's timeline and token, or with why a run left the explorer's control."""
    from workbook.testkit import fail, note

    text, seconds_text, _ = settings()
    text = text.strip()
    if text:
        outcome = replay(problem, path, text)
        if outcome.error is not None:
            raise outcome.error
        if outcome.problem:
            fail(outcome.message(), timeline=outcome.timeline())
        if outcome.uncontrolled:
            fail(uncontrolled_message(outcome.uncontrolled))
        note("the replayed scenario ran and broke nothing: " + outcome.scenario.describe())
        return
    seconds = float(seconds_text or 0) or None
    seed = seed_for(problem.PROBLEM)
    report = explore(problem, path, seconds=seconds, seed=seed)
    if report.found is not None:
        fail(report.found.message(), timeline=report.found.timeline())
    if report.uncontrolled:
        fail(uncontrolled_message(report.uncontrolled))
    note(f"explored {report.runs} scenarios in {report.seconds:.1f} s (seed {seed}): none "
         "breaks the contract")
