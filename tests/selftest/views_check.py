"""The page and the terminal show the same panels: one comparison, used wherever a selftest
already holds a checked result (the reference, the skeleton, every variant; test_views.py
adds the import errors and a missing name)."""
from __future__ import annotations

import re

from rich.console import Console

from workbook import manifest, progress, render, view
from workbook.run import Result


def terminal_text(result: Result, problem: manifest.Problem) -> str:
    """What ``./check.sh pNN`` prints for ``result`` (wide: no wrapping inside panels)."""
    console = Console(width=400, record=True, highlight=False, color_system=None,
                      file=open("/dev/null", "w"))
    console.print(render.result_view(result, problem, recorded=True,
                                     hints_seen=progress.hints_seen(problem.id)))
    return console.export_text()


def terminal_panels(text: str) -> list[tuple[str, str]]:
    """(title, body) of every boxed panel in the terminal's text, in order."""
    panels, title, body = [], None, []
    for line in text.splitlines():
        if line.startswith("╭"):
            title = re.sub(r"^╭─ (.*?) ─*╮$", r"\1", line.rstrip())
            body = []
        elif line.startswith("╰") and title is not None:
            panels.append((title, "\n".join(body)))
            title = None
        elif title is not None:
            body.append(line.strip().removeprefix("│").removesuffix("│").strip())
    return panels


def assert_same_panels(result: Result, problem: manifest.Problem) -> None:
    """The panels of the page's data (which the page draws as they are) are the terminal's:
    the same count, order, titles, messages, pitfalls, hint levels and sections; the
    page's line is the terminal's verdict or blocking line."""
    from workbook.web import app  # the web extra
    page = app.describe(problem, result)
    text = terminal_text(result, problem)
    boxed = terminal_panels(text)
    shown = [d for d in page["diagnoses"] if d["kind"] == "diagnosis"]
    assert [t for t, _ in boxed] == [d["title"] for d in shown], (text, page["diagnoses"])
    for (title, body), d in zip(boxed, shown):
        flat = " ".join(body.split())
        message = d["message"]
        if d.get("timeline_html"):
            # A failing run an explorer found: the page steps through it in a widget (the
            # same steps the terminal's table has) in place of the table.
            table, steps = d["timeline"]["text"], d["timeline"]["steps"]
            assert "(the run, step by step: below)" in message, message
            message = message.replace("(the run, step by step: below)", table)
            assert d["timeline_html"].count('class="tl-step"') == len(steps), d["timeline_html"]
        assert " ".join(message.split()) in flat, (title, body, message)
        if d["looks_like"]:
            assert f"Looks like: {d['looks_like']}" in flat, (title, body)
        assert f"Read: hint level {d['hint']} " in flat and f"“{d['section']}”" in flat, body
        assert (f"Same cause in {len(d['same_cause'])} checkpoints" in flat) \
            == bool(d["same_cause"]), body
        # "Your output": the page folds all of each checkpoint's; the terminal shows an
        # excerpt of each, under the same label
        assert flat.count("Your output (printed by your code during") \
            == len(d["outputs"]), (body, d["outputs"])
        for i, out in enumerate(d["outputs"]):
            lines = view.OUTPUT_LINES if i == 0 else view.OUTPUT_LINES_MORE
            for line in view.output_excerpt(out["text"], lines):
                assert " ".join(line.split()) in flat, (line, body)
    for d in page["diagnoses"]:
        if d["kind"] == "missing":
            assert d["title"] in text, (text, d)
    if page["blocker"] == "import_error":  # the same lines, the caret in the same column
        assert page["diagnoses"] == [] and not boxed
        assert [ln.rstrip() for ln in text.rstrip().splitlines()[1:]] \
            == [ln.rstrip() for ln in page["line"].splitlines()], (text, page["line"])
    elif page["blocker"] == "skeleton":
        assert page["diagnoses"] == [] and not boxed
        head = page["line"].split(" Fill in its TODOs")[0]
        assert head in " ".join(text.split()), (text, page["line"])
    else:
        last = [ln.strip() for ln in text.splitlines() if ln.strip()][-1]
        assert last == page["line"], (text, page["line"])


def same_panels_if_served(result: Result, problem: manifest.Problem) -> None:
    """``assert_same_panels`` where the web extra is installed (the page exists)."""
    import importlib.util
    if importlib.util.find_spec("starlette") is not None:
        assert_same_panels(result, problem)
