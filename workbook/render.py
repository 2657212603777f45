"""Small functions that turn results, hints and chapters into rich renderables."""
from __future__ import annotations

import shlex

from collections import Counter

from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from workbook import manifest, shown_path
from workbook.run import Result

ICONS = {"passed": ("✓", "green"), "failed": ("✗", "red"), "not_attempted": ("·", "dim")}


def result_view(result: Result, problem: manifest.Problem, *,
                recorded: bool = False, hints_seen: int | None = None) -> RenderableType:
    """A learner's report: the checklist, then one focused diagnosis per root cause."""
    head = Text.assemble((f"{problem.id.upper()} · {problem.title}", "bold"), "  ",
                         (shown_path(result.file), "cyan"))
    if result.import_error:
        return Group(head, Text(f"✗ {result.import_error}", style="red"))
    if result.skeleton:
        first = next(cp for cp in result.checkpoints if cp.kind == "core")
        return Group(head, Text(
            f"✗ {shown_path(result.file)} is still the skeleton: {first.message}. "
            f"Fill in its TODOs, then run ./check.sh {problem.id} again.", style="yellow"))
    parts: list[RenderableType] = [head, checklist(result)]
    for group in root_causes([cp for cp in result.checkpoints if cp.status == "failed"]):
        cause = group[0].cause or ""
        if cause.startswith("AttributeError: module") and "has no attribute" in cause:
            name = cause.split("has no attribute", 1)[1].split("@")[0].strip(" '\"")
            parts.append(Text(f"✗ {shown_path(result.file)} defines no `{name}` (misspelt?): "
                              f"{len(group)} checkpoint(s) cannot start", style="red"))
            continue
        parts.append(diagnosis(group, problem, seen=hints_seen))
    parts.append(verdict(result, problem, recorded=recorded))
    return Group(*parts)


def root_causes(failed: list) -> list[list]:
    """Failed checkpoints grouped by root cause (same exception at the same learner line,
    same stuck site, same message), in checklist order: one diagnosis per group."""
    groups: dict[str, list] = {}
    for cp in failed:
        key = cp.cause or (f"{cp.pitfall}|{cp.message}" if cp.message else cp.id)
        groups.setdefault(key, []).append(cp)
    return list(groups.values())


def checklist(result: Result) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 1))
    table.add_column(width=1)
    table.add_column()
    table.add_column(justify="right", style="dim")
    for cp in result.checkpoints:
        icon, style = ICONS[cp.status]
        title = Text(cp.title)
        if cp.kind == "extension":
            title.append(" (extension" + (", not attempted)" if cp.status == "not_attempted"
                                          else ")"), style="dim")
        for line in cp.notes:
            title.append(f"\n  {line}", style="dim")
        table.add_row(Text(icon, style=style), title, f"{cp.seconds:.2f}s")
    return table


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


def diagnosis(group, problem: manifest.Problem, *, seen: int | None = None) -> Panel:
    """One panel for a root cause: its message once, then every checkpoint it affects."""
    cps = group if isinstance(group, list) else [group]
    cp = cps[0]
    body = Text(cp.message or "failed")
    hint, section = problem.checkpoint(cp.id).hint, problem.checkpoint(cp.id).section
    if cp.pitfall:
        try:
            pit = problem.pitfall(cp.pitfall)
            body.append("\nLooks like: ", style="bold").append(pit.title)
            hint, section = pit.hint, pit.section
        except KeyError:
            body.append(f"\nLooks like: {cp.pitfall}")
    if len(cps) > 1:
        body.append(f"\nSame cause in {len(cps)} checkpoints:", style="bold")
        for c in cps:
            body.append(f"\n  · {c.title}")
    if seen is not None:
        hint = hint_to_read(hint, seen)
    body.append("\nRead: ", style="bold").append(
        f"hint level {hint} (./check.sh hint {problem.id} {hint}) · "
        f"book section “{section}” (./check.sh book {problem.id} --section {shlex.quote(section)})")
    title = cp.title if len(cps) == 1 else f"{cp.title} (+{len(cps) - 1} more)"
    return Panel(body, title=f"✗ {title_fit(title)}", title_align="left", border_style="red")


def verdict(result: Result, problem: manifest.Problem, *, recorded: bool = False) -> Text:
    core = [cp for cp in result.checkpoints if cp.kind == "core"]
    ext = [cp for cp in result.checkpoints if cp.kind == "extension"]
    core_passed = sum(cp.status == "passed" for cp in core)
    ext_passed = sum(cp.status == "passed" for cp in ext)
    tail = f" · {result.seconds:.1f}s"
    if result.incomplete:
        tail += " · the run did not finish"
    if result.passed:
        done = f" {problem.id} is marked done." if recorded else ""
        extra = f" and {ext_passed} of {len(ext)} extensions" if ext else ""
        return Text(f"All {len(core)} core checkpoints{extra} passed{tail}.{done}",
                    style="bold green")
    extra = f", {ext_passed}/{len(ext)} extensions" if ext else ""
    return Text(f"{core_passed}/{len(core)} core checkpoints{extra} passed{tail}.",
                style="bold red")


def repeat_view(results: list[Result], problem: manifest.Problem) -> RenderableType:
    failed_runs = sum(not r.passed for r in results)
    per_cp = Counter(cp.id for r in results for cp in r.checkpoints if cp.status == "failed")
    pitfalls = Counter(cp.pitfall for r in results for cp in r.checkpoints if cp.pitfall)
    table = Table(title=f"{problem.id} × {len(results)} runs")
    table.add_column("checkpoint")
    table.add_column("failed runs", justify="right")
    for cp in problem.checkpoints:
        n = per_cp.get(cp.id, 0)
        table.add_row(cp.title, Text(str(n), style="red" if n else "green"))
    seconds = sorted(r.seconds for r in results)
    style = "bold red" if failed_runs else "bold green"
    line = Text(f"{failed_runs} of {len(results)} runs failed · median run "
                f"{seconds[len(seconds) // 2]:.2f}s, slowest {seconds[-1]:.2f}s", style=style)
    parts: list[RenderableType] = [table, line]
    stuck = sum(cp.stuck for r in results for cp in r.checkpoints)
    parts.append(Text(f"stuck verdicts: {stuck}", style="red" if stuck else "dim"))
    if pitfalls:
        parts.append(Text("diagnoses: " + ", ".join(f"{k} ×{v}" for k, v in pitfalls.items())))
    return Group(*parts)


def summary_view(results: dict[str, Result]) -> Table:
    table = Table(title="All problems")
    for col in ("problem", "file", "checkpoints", "time", "result"):
        table.add_column(col)
    for pid, r in results.items():
        passed = sum(cp.status == "passed" for cp in r.checkpoints)
        state = ("passed", "green") if r.passed else (
            ("not implemented", "yellow") if r.skeleton else ("failed", "red"))
        if r.import_error:
            state = ("cannot import", "red")
        table.add_row(pid, shown_path(r.file), f"{passed}/{len(r.checkpoints)}",
                      f"{r.seconds:.1f}s", Text(state[0], style=state[1]))
    return table


def problems_view(progress: dict, *, with_progress: bool) -> Table:
    table = Table(title="Problems" if not with_progress else "Progress")
    for col in ("id", "title", "time", "difficulty", "checkpoints"):
        table.add_column(col)
    if with_progress:
        table.add_column("last check")
        table.add_column("hints seen")
        table.add_column("status")
    for p in manifest.problems().values():
        title = p.title if with_progress else f"{p.title} — {p.summary}"
        row = [p.id, title, f"{p.minutes} min", p.difficulty, str(len(p.checkpoints))]
        if with_progress:
            e = progress.get("problems", {}).get(p.id, {})
            last = e.get("last_check")
            row += [f"{last['passed']}/{last['total']} · {last['at'][5:16]}" if last else "—",
                    f"L{e['hints_seen']}" if e.get("hints_seen") else "—",
                    Text("done", style="green") if e.get("done_at") else Text("open", "dim")]
        table.add_row(*row)
    return table


def markdown_view(title: str, text: str) -> Panel:
    return Panel(Markdown(text), title=title, title_align="left")
