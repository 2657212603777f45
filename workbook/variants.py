"""Pitfalls and wrong variants: the reference plus one small change, stored as a diff.

A shipped pitfall is ``solutions/pitfalls/pNN/NAME.diff`` and a wrong variant (a single
sentence of the contract broken) is ``solutions/wrong/pNN/NAME.diff``: a unified diff of the
reference ``solutions/<module>.py`` labelled ``a/solutions/<module>.py`` and
``b/solutions/<module>.py``.  Free text before the first ``---`` line explains the mistake.

The diff is applied when the variant is checked, so a variant can never drift from the
reference: it is written to a cached temporary file named ``<module>.py`` (diagnoses then
show a sensible path), and a diff that no longer applies fails with one clear line.
Parsing and applying are whatthepatch's; a hunk whose lines moved (the reference changed
above it) is applied by GNU patch with no fuzz, i.e. only where its context matches exactly.
"""
from __future__ import annotations

import difflib
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import whatthepatch
from whatthepatch.exceptions import WhatThePatchException

from workbook import ROOT, manifest
from workbook.errors import UsageError, VariantError

KINDS = ("pitfall", "wrong")


@dataclass(frozen=True)
class Variant:
    problem: manifest.Problem
    kind: str            # "pitfall" | "wrong"
    name: str
    source: Path         # the .diff
    summary: str         # the pitfall's title, or the sentence a wrong variant breaks
    fails: tuple[str, ...]
    may_also_fail: tuple[str, ...] = ()  # may catch it by chance: either outcome is right

    @property
    def failing(self) -> str:
        """What it must fail, and what it may also fail, in a few words."""
        maybe = f" · may also fail: {', '.join(self.may_also_fail)}" if self.may_also_fail \
            else ""
        return f"must fail: {', '.join(self.fails)}{maybe}"

    @property
    def label(self) -> str:
        return f"{self.problem.id} {self.kind} {self.name}"


def get(problem: manifest.Problem, kind: str, name: str) -> Variant:
    """The pitfall or wrong variant ``name`` of ``problem``; a UsageError naming the known
    ones otherwise."""
    if kind == "pitfall":
        known = {p.name: p for p in problem.pitfalls}
        if name in known:
            p = known[name]
            return Variant(problem, kind, name, problem.pitfall_diff(name), p.title, p.fails,
                           p.may_also_fail)
    elif kind == "wrong":
        known = {w.name: w for w in problem.wrongs}
        if name in known:
            w = known[name]
            return Variant(problem, kind, name, problem.wrong_diff(name), w.breaks, w.fails,
                           w.may_also_fail)
    else:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    raise UsageError(f"{problem.id} has no {kind} {name!r} "
                     f"(known: {', '.join(known) or 'none'})")


def pitfall_file(problem: manifest.Problem, name: str) -> Path:
    """A learner file of the pitfall, ready to check or import: the reference with the
    diff applied (a cached temporary ``<module>.py``)."""
    return materialize(get(problem, "pitfall", name))


def wrong_file(problem: manifest.Problem, name: str) -> Path:
    """A learner file of the wrong variant (the reference with its diff applied)."""
    return materialize(get(problem, "wrong", name))


def all_variants(problem: manifest.Problem) -> list[Variant]:
    """Every pitfall, then every wrong variant, in manifest order."""
    return ([get(problem, "pitfall", p.name) for p in problem.pitfalls]
            + [get(problem, "wrong", w.name) for w in problem.wrongs])


# -- reading a diff -------------------------------------------------------------------------

@dataclass(frozen=True)
class Parsed:
    explanation: str     # the free text above the diff (first line: a one-line summary)
    diff: str            # from the first '---' line to the end
    patch: object        # whatthepatch's diff record


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def parse(variant: Variant) -> Parsed:
    """Split the diff file into its explanation and its single-file diff, and check labels."""
    where = _shown(variant.source)
    try:
        text = variant.source.read_text("utf-8")
    except OSError as exc:
        raise VariantError(f"cannot read {where}: {exc.strerror}") from None
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("--- ")), None)
    if start is None:
        raise VariantError(f"{where} is not a unified diff (no '--- a/...' line)")
    explanation, diff = "".join(lines[:start]).strip(), "".join(lines[start:])
    try:
        patches = [p for p in whatthepatch.parse_patch(diff) if p.header or p.changes]
    except WhatThePatchException as exc:
        raise VariantError(f"{where} cannot be read as a diff: {exc}") from None
    want = f"solutions/{variant.problem.module}.py"
    if len(patches) != 1 or not patches[0].changes:
        raise VariantError(f"{where} must change exactly one file, {want}")
    header = patches[0].header
    if header is None or header.old_path != want or header.new_path != want:
        got = f"{header.old_path} / {header.new_path}" if header else "no labels"
        raise VariantError(f"{where} must be labelled a/{want} and b/{want} (it has {got})")
    return Parsed(explanation, diff, patches[0])


# -- applying it ----------------------------------------------------------------------------

def apply(variant: Variant) -> str:
    """The reference's text with the variant's diff applied."""
    parsed = parse(variant)
    reference = variant.problem.solution_file.read_text("utf-8")
    try:
        lines = whatthepatch.apply_diff(parsed.patch, reference)
    except WhatThePatchException as exact:
        moved = _apply_at_offset(variant, reference)
        if moved is None:
            hunk = getattr(exact, "hunk", None)
            raise VariantError(
                f"{_shown(variant.source)} no longer applies to "
                f"{_shown(variant.problem.solution_file)}"
                f"{f' (hunk {hunk})' if hunk else ''}: remake it from the current reference"
            ) from None
        return moved
    return "\n".join(lines) + "\n"


def _apply_at_offset(variant: Variant, reference: str) -> str | None:
    """GNU patch, no fuzz: hunks whose context matches exactly, found where they moved to."""
    program = shutil.which("patch")
    if program is None:
        return None
    with tempfile.TemporaryDirectory(prefix="workbook-patch-") as tmp:
        old, new = Path(tmp) / "old.py", Path(tmp) / "new.py"
        old.write_text(reference, "utf-8")
        proc = subprocess.run(
            [program, "--batch", "--forward", "--fuzz=0", "--silent", "--reject-file=-",
             "--no-backup-if-mismatch", "-o", str(new), "-i", str(variant.source), str(old)],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        if proc.returncode != 0 or not new.is_file():
            return None
        return new.read_text("utf-8")


def cache_dir() -> Path:
    uid = getattr(os, "getuid", lambda: "user")()
    return Path(tempfile.gettempdir()) / f"workbook-variants-{uid}"


def materialize(variant: Variant) -> Path:
    """A file named ``<module>.py`` holding the variant, ready for ``run_check``.

    Cached by content: the same reference and diff give the same file; a change to either
    gives a new one, so several checkouts can share the cache."""
    text = apply(variant)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    folder = cache_dir() / f"{variant.problem.id}-{variant.kind}-{variant.name}-{digest}"
    target = folder / f"{variant.problem.module}.py"
    if target.is_file() and target.read_text("utf-8") == text:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".part-", suffix=".py")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(tmp, target)  # atomic: a concurrent reader sees the old file or the new one
    return target


def refresh(variant: Variant) -> bool:
    """Rewrite the variant's diff against the current reference (explanation kept), after
    the reference changed above or around it.  Only possible while it still applies (its
    context matching exactly, maybe at an offset).  True if the file changed."""
    parsed = parse(variant)
    text = apply(variant)
    label = f"solutions/{variant.problem.module}.py"
    reference = variant.problem.solution_file.read_text("utf-8")
    body = "".join(difflib.unified_diff(reference.splitlines(True), text.splitlines(True),
                                        f"a/{label}", f"b/{label}"))
    new = (parsed.explanation + "\n\n" if parsed.explanation else "") + body
    old = variant.source.read_text("utf-8")
    if new == old:
        return False
    variant.source.write_text(new, "utf-8")
    return True


# -- showing it -----------------------------------------------------------------------------

def show(variant: Variant, console) -> None:
    """Print the variant: what it is, the explanation, then the change, highlighted."""
    from rich.markdown import Markdown
    from rich.rule import Rule
    from rich.syntax import Syntax

    console.print(Rule(f"{variant.label}", align="left"))
    console.print(f"[bold]{variant.summary}[/bold]")
    console.print(f"[dim]{variant.failing} · file: {_shown(variant.source)}[/dim]")
    parsed = parse(variant)
    apply(variant)  # say so at once if it no longer applies
    if parsed.explanation:
        console.print(Markdown(parsed.explanation))
    console.print(Syntax(parsed.diff.rstrip("\n"), "diff", theme="ansi_dark", word_wrap=True,
                         background_color="default"))


def alternates(problem: manifest.Problem) -> list[tuple[str, Path]]:
    """Every correct solution in another style, as (name, file to check): ``NAME.py`` as it
    is, and ``NAME.diff`` -- the reference with a small change (another selector, say), in
    the variants' format -- applied like a variant, so it follows the reference too."""
    found = sorted(problem.alternates_dir.glob("*.py")) + sorted(
        problem.alternates_dir.glob("*.diff"))
    return sorted(
        (path.stem, path if path.suffix == ".py" else
         materialize(Variant(problem, "alternate", path.stem, path, "", ())))
        for path in found)
