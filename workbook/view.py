"""One view of a checked result, for every place that shows it.

``result_view`` decides what a learner is shown after a check: the checklist rows, one panel
per root cause (failed checkpoints grouped by the cause's identity: the same exception at the
same learner line, the same stuck site, the same pitfall and message) and the verdict line,
or the single line that replaces them all (an import error, an untouched skeleton).  The
terminal (``workbook.render``, rich) and the page (``workbook.web``, Jinja and ``app.js``)
only draw it: neither decides anything of its own.
"""
from __future__ import annotations

import shlex
import unicodedata
from dataclasses import asdict, dataclass, field

from workbook import manifest, shown_path
from workbook.run import CheckpointResult, Result

ICONS = {"passed": "✓", "failed": "✗", "not_attempted": "·"}


@dataclass(frozen=True)
class Row:
    """One line of the checklist."""
    id: str
    title: str
    kind: str             # "core" | "extension"
    status: str           # "passed" | "failed" | "not_attempted"
    icon: str
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """What follows the title: '(extension)' or '(extension, not attempted)'."""
        if self.kind != "extension":
            return ""
        return "(extension, not attempted)" if self.status == "not_attempted" else "(extension)"


@dataclass(frozen=True)
class Output:
    """What the learner's code printed during one failed checkpoint ("Your output", as
    exercism shows it): the learner's data, drawn as plain text under that label and never
    as the checker's words (control characters are shown as escapes, so a printed colour
    code or carriage return cannot redraw the report)."""
    checkpoint: str
    title: str
    text: str


@dataclass(frozen=True)
class Panel:
    """One root cause: its message once, then every checkpoint it affects.

    ``kind`` is "diagnosis" (a message, what it looks like, where to read) or "missing" (the
    file defines no name the tests need: one line, ``title``, and nothing else)."""
    kind: str
    title: str                          # the heading, "✗ ..." (fitted to a panel's title)
    checkpoints: list[str]              # the ids, in checklist order
    message: str = ""
    looks_like: str | None = None       # the pitfall's title (or its bare name if unknown)
    pitfall: str | None = None
    same_cause: list[str] = field(default_factory=list)  # titles, when more than one
    hint: int = 1                       # the hint level to read
    section: str = ""                   # the book section to read (as the manifest names it)
    outputs: list[Output] = field(default_factory=list)  # what the learner's code printed
    timeline: dict | None = None        # the failing run step by step, where one was found


@dataclass(frozen=True)
class ResultView:
    problem: str
    heading: str                 # "P01 · OutputSink"
    file: str                    # the checked file, as shown
    passed: bool
    blocker: str | None          # the one line shown instead of everything below, or None
    blocker_kind: str | None     # "import_error" | "skeleton"
    rows: list[Row]
    panels: list[Panel]
    verdict: str
    blocker_output: str = ""     # what the file printed while it was imported (made safe)

    def to_json(self) -> dict:
        return asdict(self)


def root_causes(failed: list[CheckpointResult]) -> list[list[CheckpointResult]]:
    """Failed checkpoints grouped by root cause, in checklist order: one diagnosis per
    group.  A cause's identity is the harness's cause where it found one (the same
    exception at the same learner line, the same stuck site, the same slowness: certain),
    else the pitfall named (its checks word the same mistake each in their own way), else
    the message itself."""
    groups: dict[str, list[CheckpointResult]] = {}
    for cp in failed:
        key = (f"cause {cp.cause}" if cp.cause else
               f"pitfall {cp.pitfall}" if cp.pitfall else
               f"message {cp.message}" if cp.message else cp.id)
        groups.setdefault(key, []).append(cp)
    return list(groups.values())


def shown_output(text: str) -> str:
    """Printed output made safe to show: every control or format character but newline and
    tab becomes its escape (``\\x1b``, ``\\r``, ``\\u202e``)."""
    return "".join(ch if ch in "\n\t" or not unicodedata.category(ch).startswith("C")
                   else ch.encode("unicode_escape").decode("ascii") for ch in text)


#: The terminal shows at most this many lines of a checkpoint's output (the page folds all),
#: fewer for each further checkpoint of the same panel.
OUTPUT_LINES, OUTPUT_LINES_MORE, OUTPUT_WIDTH = 8, 4, 160


def output_excerpt(text: str, lines: int = OUTPUT_LINES, width: int = OUTPUT_WIDTH) -> list[str]:
    """The lines of an output the terminal shows: all of a short one, else the first two
    and the last ones with a line saying how many were left out between; each line cut to
    ``width``."""
    all_lines = text.rstrip("\n").split("\n")
    if len(all_lines) > lines:
        head = 2 if lines > 4 else 1
        tail = lines - head - 1
        left = len(all_lines) - head - tail
        all_lines = all_lines[:head] + [f"… {left} more lines (all of them: on the page, "
                                        f"or in --json) …"] + all_lines[-tail:]
    return [ln if len(ln) <= width else ln[:width - 1] + "…" for ln in all_lines]


def hint_to_read(level: int, seen: int) -> int:
    """The next hint level not opened yet, but never past the level the checkpoint names
    (from unopened L1 a diagnosis points to L1, not straight to L3)."""
    return max(1, min(level, seen + 1))


def title_fit(text: str, width: int = 72) -> str:
    """``text`` shortened at a word boundary (with an ellipsis) to fit a panel title."""
    if len(text) <= width:
        return text
    cut = text[:width - 1].rsplit(" ", 1)[0].rstrip(" ,;:—-")
    return cut + "…"


def result_view(result: Result, problem: manifest.Problem, *, recorded: bool = False,
                hints_seen: int | None = None,
                again: str | None = None) -> ResultView:
    """What to show for ``result``.  ``recorded``: the check marked the problem done when it
    passed; ``hints_seen``: the hint levels opened so far (None: point at the level each
    checkpoint names); ``again``: how to run the check again, for the skeleton's line."""
    file = shown_path(result.file)
    again = again or f"run ./check.sh {problem.id} again"
    blocker = kind = None
    printed = ""
    if result.import_error:
        blocker, kind = f"✗ {result.import_error}", "import_error"
        printed = shown_output(next((cp.output for cp in result.checkpoints if cp.output), ""))
    elif result.skeleton:
        first = next(cp for cp in result.checkpoints if cp.kind == "core")
        blocker, kind = (f"✗ {file} is still the skeleton: {first.message}. "
                         f"Fill in its TODOs, then {again}."), "skeleton"
    rows = [Row(cp.id, cp.title, cp.kind, cp.status, ICONS[cp.status], cp.seconds,
                list(cp.notes)) for cp in result.checkpoints]
    panels = [] if blocker else [
        panel(group, problem, file=file, seen=hints_seen)
        for group in root_causes([cp for cp in result.checkpoints if cp.status == "failed"])]
    return ResultView(problem.id, f"{problem.id.upper()} · {problem.title}", file,
                      result.passed, blocker, kind, rows, panels,
                      verdict(result, problem, recorded=recorded), printed)


def panel(group: list[CheckpointResult], problem: manifest.Problem, *, file: str = "",
          seen: int | None = None) -> Panel:
    """The panel of one root cause (``group``: its failed checkpoints, in checklist order)."""
    cp = group[0]
    ids = [c.id for c in group]
    cause = getattr(cp, "cause", None) or ""
    if cause.startswith("AttributeError: module") and "has no attribute" in cause:
        name = cause.split("has no attribute", 1)[1].split("@")[0].strip(" '\"")
        return Panel("missing", f"✗ {file} defines no `{name}` (misspelt?): "
                                f"{len(group)} checkpoint(s) cannot start", ids)
    declared = problem.checkpoint(cp.id)
    hint, section, looks_like = declared.hint, declared.section, None
    if cp.pitfall:
        try:
            pit = problem.pitfall(cp.pitfall)
            hint, section, looks_like = pit.hint, pit.section, pit.title
        except KeyError:  # not a book pitfall: the rule of the contract it breaks, or the
            try:          # name in words (never a raw id)
                looks_like = "breaking the rule: " + problem.wrong(cp.pitfall).breaks
            except KeyError:
                looks_like = cp.pitfall.replace("_", " ")
    if seen is not None:
        hint = hint_to_read(hint, seen)
    more = f" (+{len(group) - 1} more)" if len(group) > 1 else ""  # kept whole when fitted
    outputs = [Output(c.id, c.title, shown_output(c.output)) for c in group
               if getattr(c, "output", None)]
    timeline = next((c.timeline for c in group if getattr(c, "timeline", None)), None)
    return Panel("diagnosis", f"✗ {title_fit(cp.title, 72 - len(more))}{more}", ids, cp.message or "failed",
                 looks_like, cp.pitfall, [c.title for c in group] if len(group) > 1 else [],
                 hint, section, outputs, timeline)


def read_commands(problem_id: str, panel: Panel) -> tuple[str, str]:
    """The terminal commands that show the panel's hint and book section."""
    return (f"./check.sh hint {problem_id} {panel.hint}",
            f"./check.sh book {problem_id} --section {shlex.quote(panel.section)}")


def verdict(result: Result, problem: manifest.Problem, *, recorded: bool = False) -> str:
    """The last line: how many core checkpoints (and extensions) passed, how long it took."""
    core = [cp for cp in result.checkpoints if cp.kind == "core"]
    ext = [cp for cp in result.checkpoints if cp.kind == "extension"]
    core_passed = sum(cp.status == "passed" for cp in core)
    ext_passed = sum(cp.status == "passed" for cp in ext)
    tail = f" · {result.seconds:.1f}s"
    if result.incomplete:
        tail += " · the run did not finish"
    if result.passed:
        done = f" {problem.id} is marked done." if recorded else ""
        attempted = [cp for cp in ext if cp.status != "not_attempted"]
        extra = f" and {ext_passed} of {len(attempted)} attempted extensions" if attempted \
            else ""
        unattempted = (f" ({len(ext) - len(attempted)} extension"
                       f"{'s' if len(ext) - len(attempted) > 1 else ''} not attempted)"
                       if len(attempted) < len(ext) else "")
        return f"All {len(core)} core checkpoints{extra} passed{unattempted}{tail}.{done}"
    extra = f", {ext_passed}/{len(ext)} extensions" if ext else ""
    return f"{core_passed}/{len(core)} core checkpoints{extra} passed{tail}."
