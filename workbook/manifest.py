"""Problem manifests: the single source of truth for every problem.

One TOML file per problem lives in ``workbook/problems/``.  Every path, title, checkpoint
and pitfall the harness, the tests and the selftest use is derived from it here.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from workbook import ROOT
from workbook.errors import ManifestError

PROBLEMS_DIR = Path(__file__).resolve().parent / "problems"
KINDS = ("core", "extension")
DIFFICULTIES = ("easy", "medium", "hard")
HINT_LEVELS = (1, 2, 3)


@dataclass(frozen=True)
class Checkpoint:
    id: str
    title: str
    kind: str
    points: int
    hint: int
    section: str


@dataclass(frozen=True)
class Pitfall:
    name: str
    title: str
    fails: tuple[str, ...]
    hint: int
    section: str
    may_also_fail: tuple[str, ...] = ()  # see Wrong


@dataclass(frozen=True)
class Wrong:
    """A single-sentence break of the contract (not a book pitfall), shipped as a diff."""
    name: str
    breaks: str                # the sentence of the spec or skeleton it breaks
    fails: tuple[str, ...]     # the checkpoints that must fail; every other one must pass
    #: ...but these, which may catch the mistake by chance (a latent deadlock that a stress
    #: test of many threads runs into on some runs): either outcome is right there.
    may_also_fail: tuple[str, ...] = ()


@dataclass(frozen=True)
class Problem:
    id: str
    title: str
    summary: str
    module: str
    minutes: int
    difficulty: str
    time_limit: float
    checkpoints: tuple[Checkpoint, ...]
    pitfalls: tuple[Pitfall, ...]
    wrongs: tuple[Wrong, ...] = ()

    # Derived paths -- the only place they are spelled out.
    @property
    def learner_file(self) -> Path:
        return ROOT / "mine" / f"{self.module}.py"

    @property
    def solution_file(self) -> Path:
        return ROOT / "solutions" / f"{self.module}.py"

    def pitfall_diff(self, name: str) -> Path:
        """A pitfall as a unified diff of the reference (format A)."""
        return ROOT / "solutions" / "pitfalls" / self.id / f"{name}.diff"

    def wrong_diff(self, name: str) -> Path:
        return ROOT / "solutions" / "wrong" / self.id / f"{name}.diff"

    @property
    def alternates_dir(self) -> Path:
        return ROOT / "solutions" / "alternates" / self.id

    def hint_file(self, level: int) -> Path:
        return ROOT / "hints" / self.id / f"L{level}.md"

    @property
    def chapter_file(self) -> Path:
        return ROOT / "book" / f"{self.module}.md"

    @property
    def tests_dir(self) -> Path:
        return ROOT / "tests" / self.id

    @property
    def demo_module(self) -> str:
        return f"workbook.demos.{self.id}"

    @property
    def bench_module(self) -> str:
        return f"workbook.bench.{self.id}"

    def checkpoint(self, checkpoint_id: str) -> Checkpoint:
        for cp in self.checkpoints:
            if cp.id == checkpoint_id:
                return cp
        raise KeyError(checkpoint_id)

    def pitfall(self, name: str) -> Pitfall:
        for p in self.pitfalls:
            if p.name == name:
                return p
        raise KeyError(name)

    def wrong(self, name: str) -> Wrong:
        for w in self.wrongs:
            if w.name == name:
                return w
        raise KeyError(name)

    @property
    def core(self) -> tuple[Checkpoint, ...]:
        return tuple(cp for cp in self.checkpoints if cp.kind == "core")

    @property
    def points(self) -> int:
        return sum(cp.points for cp in self.checkpoints)


def _require(data: dict, key: str, typ: type | tuple[type, ...], where: str):
    if key not in data:
        raise ManifestError(f"{where}: missing field {key!r}")
    value = data[key]
    if not isinstance(value, typ) or isinstance(value, bool) and typ is not bool:
        raise ManifestError(f"{where}: field {key!r} has the wrong type ({value!r})")
    return value


def _checkpoint(data: dict, problem_id: str, where: str) -> Checkpoint:
    cp = Checkpoint(
        id=_require(data, "id", str, where),
        title=_require(data, "title", str, where),
        kind=data.get("kind", "core"),
        points=_require(data, "points", int, where),
        hint=_require(data, "hint", int, where),
        section=_require(data, "section", str, where),
    )
    if not cp.id.startswith(problem_id + "."):
        raise ManifestError(f"{where}: checkpoint id {cp.id!r} must start with {problem_id}.")
    if cp.kind not in KINDS:
        raise ManifestError(f"{where}: kind must be one of {KINDS}, not {cp.kind!r}")
    if cp.hint not in HINT_LEVELS:
        raise ManifestError(f"{where}: hint must be 1, 2 or 3")
    return cp


def _may_also_fail(data: dict, checkpoint_ids: set[str], where: str) -> tuple[str, ...]:
    names = tuple(data.get("may_also_fail", ()))
    if set(names) - checkpoint_ids or set(names) & set(data.get("fails", ())):
        raise ManifestError(f"{where}: 'may_also_fail' must name other checkpoints of this "
                            f"problem than 'fails' does ({list(names)})")
    return names


def _pitfall(data: dict, checkpoint_ids: set[str], where: str) -> Pitfall:
    p = Pitfall(
        name=_require(data, "name", str, where),
        title=_require(data, "title", str, where),
        fails=tuple(_require(data, "fails", list, where)),
        hint=_require(data, "hint", int, where),
        section=_require(data, "section", str, where),
        may_also_fail=_may_also_fail(data, checkpoint_ids, where),
    )
    if not re.fullmatch(r"[a-z][a-z0-9_]*", p.name):
        raise ManifestError(f"{where}: pitfall name {p.name!r} must be a python identifier")
    unknown = set(p.fails) - checkpoint_ids
    if not p.fails or unknown:
        raise ManifestError(f"{where}: 'fails' must name checkpoints of this problem ({unknown})")
    return p


def _wrong(data: dict, checkpoint_ids: set[str], where: str) -> Wrong:
    w = Wrong(
        name=_require(data, "name", str, where),
        breaks=_require(data, "breaks", str, where),
        fails=tuple(_require(data, "fails", list, where)),
        may_also_fail=_may_also_fail(data, checkpoint_ids, where),
    )
    if not re.fullmatch(r"[a-z][a-z0-9_]*", w.name):
        raise ManifestError(f"{where}: wrong variant name {w.name!r} must be a python identifier")
    unknown = set(w.fails) - checkpoint_ids
    if not w.fails or unknown:
        raise ManifestError(f"{where}: 'fails' must name checkpoints of this problem ({unknown})")
    if not w.breaks.strip():
        raise ManifestError(f"{where}: 'breaks' must state the sentence the variant breaks")
    return w


def load_problem(path: Path) -> Problem:
    with path.open("rb") as f:
        data = tomllib.load(f)
    where = path.name
    pid = _require(data, "id", str, where)
    if path.stem != pid:
        raise ManifestError(f"{where}: id {pid!r} must match the file name")
    checkpoints = tuple(
        _checkpoint(c, pid, f"{where} checkpoint {i + 1}")
        for i, c in enumerate(data.get("checkpoints", []))
    )
    ids = [cp.id for cp in checkpoints]
    if not ids or len(set(ids)) != len(ids):
        raise ManifestError(f"{where}: checkpoint ids must exist and be unique")
    pitfalls = tuple(
        _pitfall(p, set(ids), f"{where} pitfall {i + 1}")
        for i, p in enumerate(data.get("pitfalls", []))
    )
    names = [p.name for p in pitfalls]
    if len(set(names)) != len(names):
        raise ManifestError(f"{where}: pitfall names must be unique")
    wrongs = tuple(
        _wrong(w, set(ids), f"{where} wrong {i + 1}")
        for i, w in enumerate(data.get("wrong", []))
    )
    wrong_names = [w.name for w in wrongs]
    if len(set(wrong_names)) != len(wrong_names):
        raise ManifestError(f"{where}: wrong variant names must be unique")
    difficulty = _require(data, "difficulty", str, where)
    if difficulty not in DIFFICULTIES:
        raise ManifestError(f"{where}: difficulty must be one of {DIFFICULTIES}")
    return Problem(
        id=pid,
        title=_require(data, "title", str, where),
        summary=_require(data, "summary", str, where),
        module=_require(data, "module", str, where),
        minutes=_require(data, "minutes", int, where),
        difficulty=difficulty,
        time_limit=float(_require(data, "time_limit", (int, float), where)),
        checkpoints=checkpoints,
        pitfalls=pitfalls,
        wrongs=wrongs,
    )


@lru_cache(maxsize=None)
def problems() -> dict[str, Problem]:
    """Every problem, keyed and ordered by id."""
    found = {}
    for path in sorted(PROBLEMS_DIR.glob("p*.toml")):
        problem = load_problem(path)
        found[problem.id] = problem
    return found


def get(problem_id: str) -> Problem:
    """The problem with this id; ``KeyError`` with a readable message otherwise."""
    try:
        return problems()[problem_id]
    except KeyError:
        known = ", ".join(problems()) or "none"
        raise KeyError(f"unknown problem {problem_id!r} (known: {known})") from None
