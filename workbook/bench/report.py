"""The benchmark's report: one JSON document, a rich table, or Markdown tables (what the book's
Measurements quote), all drawn from the same document (``to_json``)."""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from workbook import manifest

if TYPE_CHECKING:
    from workbook.bench import Case, Row


def to_json(problem: manifest.Problem, args: argparse.Namespace, reps: int, env: dict,
            results: list[tuple[Case, list[Row]]], seconds: float) -> dict:
    return {
        "problem": problem.id, "title": problem.title,
        "file": str(Path(args.file).resolve()) if args.file else None,
        "quick": bool(args.quick), "repetitions": reps, "environment": env,
        "seconds": round(seconds, 2),
        "cases": [{
            "id": case.id, "title": case.title, "note": case.note, "primary": case.primary,
            "metrics": [{"key": m.key, "label": m.label, "unit": m.unit, "better": m.better,
                         "stat": m.stat} for m in case.metrics],
            "rows": [{"design": r.design.name, "kind": r.design.kind, "status": r.status,
                      "note": r.note or r.design.note, "values": r.values, "ratio": r.ratio}
                     for r in rows],
        } for case, rows in results],
    }


# -- the rich report -------------------------------------------------------------------------------

def fmt(value: float | None, digits: int = 3) -> str:
    """A figure with ``digits`` significant digits and a k/M suffix for large ones."""
    if value is None:
        return "—"
    for limit, unit, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if abs(value) >= limit:
            return _sig(value / unit, digits) + suffix
    return _sig(value, digits)


def _sig(value: float, digits: int) -> str:
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text and abs(value) < 1 else text


def fmt_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "—"
    if ratio >= 100:
        return f"{ratio:,.0f}×"
    if ratio < 0.1:
        return f"{_sig(ratio, 2)}×"
    return f"{ratio:.2f}×" if ratio < 10 else f"{ratio:.1f}×"


def show(problem: manifest.Problem, doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    console.print(Text.assemble((f"{problem.id.upper()} · {problem.title}", "bold"),
                                "  benchmark", (" (quick: figures mean little)", "yellow")
                                if doc["quick"] else ""))
    for case in doc["cases"]:
        table = Table(title=case["title"], title_justify="left", title_style="bold",
                      caption=case["note"] or None, caption_justify="left")
        table.add_column("design")
        metrics = case["metrics"]
        for m in metrics:
            table.add_column(f"{m['label']}\n({m['unit']})" if m["unit"] else m["label"],
                             justify="right")
        primary = next(m for m in metrics if m["key"] == case["primary"])
        table.add_column(f"{primary['label']}\n× reference", justify="right")
        notes = any(r["note"] for r in case["rows"])
        if notes:
            table.add_column("note", style="dim", overflow="fold")
        for row in case["rows"]:
            style = {"reference": "bold", "yours": "cyan"}.get(row["kind"])
            cells = [Text(row["design"], style=style or "")]
            for m in metrics:
                v = row["values"].get(m["key"])
                cells.append(Text("") if v is None else Text.assemble(
                    fmt(v["value"]), (_spread(v), "dim")))
            cells.append(Text(fmt_ratio(row["ratio"].get(case["primary"]))
                              if row["status"] == "measured" else ""))
            if notes:
                cells.append(Text(row["note"] or "",
                                  style="yellow" if row["status"] != "measured" else "dim"))
            table.add_row(*cells)
        console.print(table)
    env = doc["environment"]
    console.print(
        f"[dim]Median of {doc['repetitions']} alternating repetitions per design; ± is half "
        "the min–max range of the repetitions, as a % of the median (the range itself "
        "when wider). Ratios compare "
        "medians of this run.\n"
        f"{env['implementation']} {env['python']} on {env['platform']}, {env['cpu']}, "
        f"{env['cpus']} CPUs; load average {env['load_average']} before, "
        f"{env['load_average_after']} after; {doc['seconds']:.1f} s.\n"
        "A benchmark, not a test: nothing passes or fails on time.[/dim]")


def to_markdown(doc: dict) -> str:
    """The measured tables as Markdown, with the machine they were taken on."""
    out = []
    for case in doc["cases"]:
        metrics = case["metrics"]
        primary = next(m for m in metrics if m["key"] == case["primary"])
        head = ["design"] + [f"{m['label']} ({m['unit']})" if m["unit"] else m["label"]
                             for m in metrics] + [f"{primary['label']} × reference"]
        out += [f"**{case['title']}**", "", "| " + " | ".join(head) + " |",
                "|" + "---|" + "---:|" * (len(head) - 1)]
        for row in case["rows"]:
            if row["status"] != "measured":
                continue
            cells = [row["design"]]
            for m in metrics:
                v = row["values"].get(m["key"])
                cells.append("" if v is None else fmt(v["value"]) + _spread(v))
            cells.append(fmt_ratio(row["ratio"].get(case["primary"])))
            out.append("| " + " | ".join(cells) + " |")
        out += [""] + ([case["note"], ""] if case["note"] else [])
    env = doc["environment"]
    out.append(f"Measured with `./check.sh bench {doc['problem']}`: {env['implementation']} "
               f"{env['python']} on {env['platform']}, {env['cpu']} ({env['cpus']} CPUs, a "
               f"shared machine; load average {env['load_average'][0]} before the run, "
               f"{env['load_average_after'][0]} after). Median of {doc['repetitions']} "
               "alternating repetitions per design; ± is half the min–max range of the "
               "repetitions as a % of the median (the range itself when wider).")
    return "\n".join(out)


def _spread(value: dict) -> str:
    """± half the range as a % of the median; the range itself when that says nothing."""
    if value["n"] < 2:
        return ""
    if value["spread"] <= 0.5:
        return f" ±{value['spread'] * 100:.0f}%"
    return f" ({fmt(value['min'])}–{fmt(value['max'])})"
