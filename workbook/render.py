"""Small functions that turn results, hints and chapters into rich renderables."""
from __future__ import annotations

from collections import Counter

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from workbook import manifest, shown_path, view
from workbook import progress as progress_mod
from workbook.run import Result

STYLES = {"passed": "green", "failed": "red", "not_attempted": "dim"}
#: Kept under their old names here: the view decides them.
root_causes, hint_to_read, title_fit = view.root_causes, view.hint_to_read, view.title_fit


def result_view(result: Result, problem: manifest.Problem, *,
                recorded: bool = False, hints_seen: int | None = None) -> RenderableType:
    """A learner's report: the checklist, then one focused diagnosis per root cause."""
    return draw(view.result_view(result, problem, recorded=recorded, hints_seen=hints_seen))


def draw(shown: view.ResultView) -> RenderableType:
    """The terminal's drawing of a result's view."""
    head = Text.assemble((shown.heading, "bold"), "  ", (shown.file, "cyan"))
    if shown.blocker:
        said: list[RenderableType] = [head, Text(
            shown.blocker, style="yellow" if shown.blocker_kind == "skeleton" else "red")]
        if shown.blocker_output:
            said.append(output_view(view.Output("", "", shown.blocker_output), alone=True,
                                    during="the import"))
        return Group(*said)
    parts: list[RenderableType] = [head, checklist(shown.rows)]
    parts += [panel_view(shown.problem, p) for p in shown.panels]
    parts.append(Text(shown.verdict, style="bold green" if shown.passed else "bold red"))
    return Group(*parts)


def checklist(rows: list[view.Row]) -> Table:
    table = Table(box=None, show_header=False, padding=(0, 1))
    table.add_column(width=1)
    table.add_column()
    table.add_column(justify="right", style="dim")
    for row in rows:
        title = Text(row.title)
        if row.label:
            title.append(f" {row.label}", style="dim")
        for line in row.notes:
            title.append(f"\n  {line}", style="dim")
        table.add_row(Text(row.icon, style=STYLES[row.status]), title, f"{row.seconds:.2f}s")
    return table


def live_checklist(problem: manifest.Problem, finished: dict, elapsed: float,
                   *, importing: bool) -> RenderableType:
    """The checklist while a check runs: a tick for each finished checkpoint, a spinner on
    the one running (the first unfinished one: the tests run in checklist order), the rest
    still to come."""
    from rich.spinner import Spinner

    table = Table(box=None, show_header=False, padding=(0, 1))
    table.add_column(width=1)
    table.add_column()
    table.add_column(justify="right", style="dim")
    running = None if importing else next(
        (cp.id for cp in problem.checkpoints if cp.id not in finished), None)
    for cp in problem.checkpoints:
        done = finished.get(cp.id)
        if done is not None:
            table.add_row(Text(view.ICONS[done.status], style=STYLES[done.status]),
                          Text(cp.title), f"{done.seconds:.2f}s")
        elif cp.id == running:
            table.add_row(Spinner("dots", style="cyan"), Text(cp.title, style="bold"), "")
        else:
            table.add_row(Text("·", style="dim"), Text(cp.title, style="dim"), "")
    status = Text(f"importing the file… {elapsed:.1f}s" if importing
                  else f"checking… {elapsed:.1f}s", style="dim")
    if importing:
        return Group(Spinner("dots", text=status, style="cyan"), table)
    return Group(table, status)


def panel_view(problem_id: str, panel: view.Panel) -> RenderableType:
    """One root cause: a red line for a missing name, else a panel with its message, what it
    looks like, the checkpoints it affects and where to read."""
    if panel.kind == "missing":
        return Text(panel.title, style="red")
    body = Text(panel.message)
    if panel.looks_like is not None:
        body.append("\nLooks like: ", style="bold").append(panel.looks_like)
    if panel.same_cause:
        body.append(f"\nSame cause in {len(panel.same_cause)} checkpoints:", style="bold")
        for title in panel.same_cause:
            body.append(f"\n  · {title}")
    hint_command, book_command = view.read_commands(problem_id, panel)
    body.append("\nRead: ", style="bold").append(
        f"hint level {panel.hint} ({hint_command}) · "
        f"book section “{panel.section}” ({book_command})")
    for i, out in enumerate(panel.outputs):  # the first in full, the others shorter
        body.append("\n").append_text(output_view(
            out, alone=len(panel.checkpoints) == 1,
            lines=view.OUTPUT_LINES if i == 0 else view.OUTPUT_LINES_MORE))
    return Panel(body, title=panel.title, title_align="left", border_style="red")


def output_view(out: view.Output, *, alone: bool, lines: int = view.OUTPUT_LINES,
                during: str | None = None) -> Text:
    """'Your output': what the learner's code printed, a few lines of it, each behind a bar
    so that nothing printed can pass for the checker's own lines."""
    during = during or ("this check" if alone else f"“{out.title}”")
    text = Text(f"Your output (printed by your code during {during}):", style="bold")
    for line in view.output_excerpt(out.text, lines):
        text.append("\n  │ ", style="dim").append(line, style="dim")
    return text


def diagnosis(group, problem: manifest.Problem, *, seen: int | None = None) -> RenderableType:
    """The panel of one root cause (``group``: a failed checkpoint or a list of them)."""
    cps = group if isinstance(group, list) else [group]
    return panel_view(problem.id, view.panel(cps, problem, seen=seen))


def verdict(result: Result, problem: manifest.Problem, *, recorded: bool = False) -> Text:
    return Text(view.verdict(result, problem, recorded=recorded),
                style="bold green" if result.passed else "bold red")


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


def pythons_view(runs: dict[str, Result]) -> Table:
    """One row per interpreter of a ``--pythons`` check."""
    table = Table(title="One check per Python")
    for col in ("Python", "checkpoints passed", "failed", "time"):
        table.add_column(col)
    for version, r in runs.items():
        failed = [cp.id for cp in r.checkpoints if cp.status == "failed"]
        passed = sum(cp.status == "passed" for cp in r.checkpoints)
        table.add_row(version, f"{passed}/{len(r.checkpoints)}",
                      Text(", ".join(failed) or "none", style="red" if failed else "green"),
                      f"{r.seconds:.1f}s")
    return table


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
    # Short headers and no squeezed column: at 80 columns every name is shown whole
    # (wrapped onto a second line if need be, never cut with "…").
    table.add_column("id", no_wrap=True)
    # The longest word of a title sets the column's floor, so a squeeze wraps between words
    # and never folds one ("BoundedBlockingQ|ueue" when the last check is on another day).
    longest_word = max(len(w) for p in manifest.problems().values() for w in p.title.split())
    table.add_column("title", overflow="fold", min_width=longest_word)
    if not with_progress:  # `status` is about progress: the size of a problem is in `list`
        table.add_column("time", no_wrap=True)
        table.add_column("level", no_wrap=True)
    table.add_column("checks", no_wrap=True, justify="right")
    if with_progress:
        table.add_column("last check", overflow="fold", max_width=11)
        table.add_column("hints", no_wrap=True)
        table.add_column("status", overflow="fold", max_width=16)
    for p in manifest.problems().values():
        title = p.title if with_progress else f"{p.title} — {p.summary}"
        row = [p.id, title] + ([] if with_progress else [f"{p.minutes} min", p.difficulty]) \
            + [str(len(p.checkpoints))]
        if with_progress:
            e = progress.get("problems", {}).get(p.id, {})
            last = e.get("last_check")
            state = progress_mod.status_text(e, learner_file(p))
            style = ("yellow" if progress_mod.last_failed(e) or "changed" in state
                     else "green" if e.get("done_at") else "dim")
            row += [_last_check(last) if last else "—",
                    f"L{e['hints_seen']}" if e.get("hints_seen") else "—",
                    Text(state if e.get("done_at") or "changed" in state else "open",
                         style=style)]
        table.add_row(*row)
    return table


def _last_check(last: dict) -> str:
    """'5/6 05:40' (today), '5/6 12-01 05:40' (another day), '(page)' when run there."""
    page = " (page)" if last.get("source") == "page" else ""
    return f"{last['passed']}/{last['total']} {progress_mod.when(last.get('at'))}{page}"


def learner_file(problem: manifest.Problem):
    """The learner's own file of ``problem`` (``WORKBOOK_MINE`` points tests elsewhere)."""
    import os
    from pathlib import Path
    mine = os.environ.get("WORKBOOK_MINE")
    return Path(mine) / problem.learner_file.name if mine else problem.learner_file


def markdown_view(title: str, text: str) -> Panel:
    """A hint in a panel, drawn like the book: ``<br>`` in a cell breaks the line and a
    table's long words fold instead of ending in an ellipsis."""
    from workbook.bookview import Markdown as BookMarkdown  # bookview is the heavier module

    return Panel(BookMarkdown(text), title=title, title_align="left")
