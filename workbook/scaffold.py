"""``./check.sh new pNN NAME``: every file of a new problem, each a stub the selftest flags.

Writes the manifest entry, the skeleton, the reference, three hints, the chapter, the
acceptance set (one test, its contract table) and nothing else.  Every stub carries
``TODO(scaffold)``: the selftest's ``test_no_scaffold_placeholder_is_left`` lists the files
that still do, and the usual rows (the reference passes, an alternate exists, ...) fail until
the problem is written, so ``./check.sh selftest -k pNN`` shows what is left, rustlings-style.
"""
from __future__ import annotations

import re
from pathlib import Path

from workbook import ROOT, manifest, shown_path
from workbook.errors import ArgumentParser, UsageError

MARKER = "TODO(scaffold)"


def snake(name: str) -> str:
    """``RateLimiter`` -> ``rate_limiter``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def files(pid: str, name: str, root: Path = ROOT) -> dict[Path, str]:
    """The new problem's files and their stub text."""
    module = f"{pid}_{snake(name)}"
    first = f"{pid}.basic"
    test_file = f"test_{snake(name)}.py"
    test_name = f"test_a_{snake(name)}_can_be_made"
    upper = pid.upper()
    return {
        root / "workbook" / "problems" / f"{pid}.toml": f'''\
id = "{pid}"
title = "{name}"
summary = "{MARKER}: one line a learner reads on the card"
module = "{module}"
minutes = 45
difficulty = "medium"          # easy | medium | hard
time_limit = 90                # wall-clock limit (s) of one whole acceptance run

[[checkpoints]]
id = "{first}"
title = "{MARKER}: the sentence a learner sees in the checklist"
kind = "core"                  # core | extension
points = 100
hint = 1                       # the hint level a failure points to
section = "The design"         # the chapter section a failure points to
''',
        root / "mine" / f"{module}.py": f'''\
"""{upper} · {name}.  {MARKER}: what to build, in the words of the spec."""
from __future__ import annotations


class {name}:
    """{MARKER}: what it guarantees and which methods any thread may call."""

    def __init__(self) -> None:
        raise NotImplementedError("{name}.__init__")
''',
        root / "solutions" / f"{module}.py": f'''\
"""{upper} · {name}: the reference.  {MARKER}: short, typed, exemplary; say what each lock
guards and who notifies each condition."""
from __future__ import annotations


class {name}:
    def __init__(self) -> None:
        raise NotImplementedError("{MARKER}: the reference")
''',
        **{root / "hints" / pid / f"L{level}.md": f"{MARKER}: hint level {level} of {pid} "
           f"({('a nudge', 'the idea', 'the design, almost code')[level - 1]}).\n"
           for level in (1, 2, 3)},
        root / "book" / f"{module}.md": f'''\
# {upper} · {name}: {MARKER} a title that says what is learnt

| time | difficulty | you edit | check | hints |
| --- | --- | --- | --- | --- |
| 45 min | medium | `mine/{module}.py` | `./check.sh {pid}` | `./check.sh hint {pid}` (levels 1–3) |

{MARKER}: why this problem, where it sits in real code.

## The design

{MARKER}: the design, its invariants, a timeline of the race it avoids.

## Sources

- {MARKER}: the library pages the design rests on, e.g.
  [threading](https://docs.python.org/3/library/threading.html), and the CPython files read,
  at the tag read, e.g.
  [`Lib/threading.py`](https://github.com/python/cpython/blob/v3.13.0/Lib/threading.py).

## Map: checkpoints, pitfalls, sections

| checkpoint | what it proves | pitfalls that fail it | read |
| --- | --- | --- | --- |
| `{first}` | {MARKER} | — | [The design](#the-design) |
''',
        root / "tests" / pid / "__init__.py": "",
        root / "tests" / pid / test_file: f'''\
"""{upper}'s acceptance set: one test per sentence of the contract (CONTRACT.md)."""
from __future__ import annotations

import pytest


@pytest.mark.checkpoint("{first}")
def {test_name}(impl):
    impl.{name}()
    pytest.fail("{MARKER}: write this checkpoint's test")
''',
        root / "tests" / pid / "CONTRACT.md": f'''\
# {upper} contract

Every sentence of the spec and of the skeleton's docstrings, and the tests that fail when it
is broken.

| id | source | sentence | tests |
| --- | --- | --- | --- |
| C1 | skeleton: {name} | {MARKER}: the first sentence of the contract | {test_file}::{test_name} |
''',
    }


def scaffold(pid: str, name: str, root: Path = ROOT) -> list[Path]:
    """Write a new problem's stubs under ``root``; refuse to overwrite anything."""
    if not re.fullmatch(r"p\d\d", pid):
        raise UsageError(f"a problem id is p and two digits (p05), not {pid!r}")
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", name):
        raise UsageError(f"NAME is the class the learner writes, in CamelCase, not {name!r}")
    made = files(pid, name, root)
    taken = [shown_path(p) for p in made if p.exists()]
    if taken:
        raise UsageError(f"{pid} exists already: {', '.join(taken[:3])}")
    for path, text in made.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    manifest.load_problem(root / "workbook" / "problems" / f"{pid}.toml")  # it loads
    return list(made)


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="check.sh new",
                            description="Write the stubs of a new problem.")
    parser.add_argument("problem", help="its id, p and two digits (p05)")
    parser.add_argument("name", help="the class the learner writes (CamelCase)")
    args = parser.parse_args(argv)
    made = scaffold(args.problem, args.name)
    for path in made:
        print(f"  wrote {shown_path(path)}")
    print(f"\nEach file holds {MARKER} where the problem is still to be written; "
          f"`./check.sh selftest -k {args.problem}` lists what is left.\n"
          f"Then: pitfalls (solutions/pitfalls/{args.problem}/*.diff), at least one alternate "
          f"(solutions/alternates/{args.problem}/), and the spec. See docs/authoring.md.")
    return 0
