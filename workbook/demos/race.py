"""Shared plumbing of the "measure your race" demos (``./check.sh demo pNN race``).

A race demo runs one mistake of a chapter many times with real threads and no forced
interleaving, next to the correct order, and prints how often the mistake bit.  Each trial
is bounded: a lost wakeup shows up as a wait that ran into its bound, never as a hung run.
The demos only report what they saw; they assert nothing about how often a race *should*
bite, because that depends on the interpreter, the machine and its load.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from typing import Callable

from rich.console import Console
from rich.table import Table

from workbook.errors import ArgumentParser

Variant = Callable[[int], int]  # runs n trials, returns in how many the mistake bit


def parser(prog: str, description: str, trials: int) -> argparse.ArgumentParser:
    p = ArgumentParser(prog=prog, description=description)
    p.add_argument("-n", "--trials", type=int, default=trials,
                   help=f"trials per variant (default {trials})")
    p.add_argument("--switch-interval", type=float, default=None, metavar="SECONDS",
                   help="sys.setswitchinterval for the run (default: the interpreter's, "
                        "0.005 s); smaller values hand the GIL over more often")
    return p


def machine() -> str:
    """One line: interpreter, GIL or free-threaded, CPUs, load, date -- what a figure needs."""
    gil = ""
    probe = getattr(sys, "_is_gil_enabled", None)
    if probe is not None:
        gil = ", GIL enabled" if probe() else ", free-threaded (no GIL)"
    try:
        load = f", load {os.getloadavg()[0]:.2f}"
    except OSError:
        load = ""
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"CPython {platform.python_version()}{gil} on {platform.system()} "
            f"{platform.machine()}, {os.cpu_count()} CPUs{load}, {day}")


def run(title: str, variants: list[tuple[str, Variant]], trials: int,
        switch_interval: float | None, console: Console | None = None,
        note: str = "") -> dict[str, int]:
    """Run every variant ``trials`` times, print one table, return {variant: bites}."""
    console = console or Console(highlight=False)
    old = sys.getswitchinterval()
    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    bites: dict[str, int] = {}
    seconds: dict[str, float] = {}
    try:
        for name, variant in variants:
            start = time.perf_counter()
            bites[name] = variant(trials)
            seconds[name] = time.perf_counter() - start
    finally:
        sys.setswitchinterval(old)
    table = Table(title=title, title_justify="left")
    table.add_column("variant")
    table.add_column("bit", justify="right")
    table.add_column("of", justify="right")
    table.add_column("rate", justify="right")
    table.add_column("time", justify="right")
    for name, _ in variants:
        table.add_row(name, str(bites[name]), str(trials),
                      f"{100 * bites[name] / max(trials, 1):.1f} %", f"{seconds[name]:.1f}s")
    console.print(table)
    interval = switch_interval if switch_interval is not None else old
    console.print(f"[dim]{machine()}; switch interval {interval:g} s"
                  + (f"; {note}" if note else "") + "[/dim]")
    return bites
