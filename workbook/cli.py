"""``./check.sh`` — one small function per command, one Console.

Exit codes: 0 every core checkpoint (and every attempted extension) passed; 1 a checkpoint
failed or the file could not be imported; 2 usage error.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path


from workbook import ROOT, book_sections, manifest, progress, render, variants, view, watch
from workbook.errors import ArgumentParser, UsageError
from workbook.run import Result, run_check
from workbook.terminal import console, errors

COMMANDS = ("all", "list", "status", "hint", "book", "demo", "bench", "grade",
            "gradescope-bundle", "selftest", "mutate", "serve", "site", "new")


def _problem(problem_id: str) -> manifest.Problem:
    try:  # ids are lower case; `P01` means p01
        return manifest.get(problem_id.lower() if problem_id.lower() in manifest.problems()
                            else problem_id)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None


# -- checks ---------------------------------------------------------------------------------

def _check_parser(prog: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(prog=prog, description="Run a problem's acceptance set.")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--file", type=Path, help="check this file instead of mine/")
    which.add_argument("--solution", action="store_true", help="check the reference solution")
    which.add_argument("--pitfall", metavar="NAME", help="check a shipped pitfall of the book")
    which.add_argument("--wrong", metavar="NAME",
                       help="check a wrong variant (one sentence of the contract broken)")
    parser.add_argument("--show", action="store_true",
                        help="with --pitfall/--wrong: print the change instead of checking")
    parser.add_argument("--refresh", action="store_true",
                        help="with --pitfall/--wrong: rewrite the diff against the current "
                             "reference (while it still applies)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run the set N times and report how many runs failed")
    parser.add_argument("--watch", action="store_true",
                        help="check again each time the file is saved (Ctrl-C to leave)")
    parser.add_argument("--explore", type=float, metavar="SECONDS",
                        help="let the exploration checkpoint search this long")
    parser.add_argument("--pythons", action="store_true",
                        help="check under every supported Python found (3.10-3.13); a "
                             "checkpoint passes only if it passes on all of them")
    parser.add_argument("--seed", type=int, metavar="N",
                        help="draw the exploration's scenarios from this seed")
    parser.add_argument("--replay", metavar="TOKEN",
                        help="run the exploration scenario of a failure's replay token")
    return parser


def _exploration(problem: manifest.Problem, args: argparse.Namespace) -> None:
    """Hand --explore/--replay to the exploration checkpoint (through the environment
    of the check's pytest process)."""
    if args.explore is not None:
        from workbook.tuning import EXPLORE_TIMEOUT  # pytest-timeout's backstop there
        # room left for shrinking a counterexample (a few seconds) inside both limits
        limit = max(min(problem.time_limit - 30, EXPLORE_TIMEOUT - 10), 1)
        if not 0 < args.explore <= limit:
            raise UsageError(f"--explore takes seconds between 0 and {limit:g} (the "
                             f"exploration checkpoint may run {EXPLORE_TIMEOUT} s)")
        os.environ["WORKBOOK_EXPLORE_SECONDS"] = f"{args.explore:g}"
    if args.seed is not None:
        if args.seed < 0:
            raise UsageError("--seed takes a whole number of at least 0")
        os.environ["WORKBOOK_EXPLORE_SEED"] = str(args.seed)
    if args.replay:
        from workbook.explore.tokens import decode
        try:
            owner, _ = decode(args.replay)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if owner != problem.id:
            raise UsageError(f"this token replays a run of {owner}, not of {problem.id}")
        os.environ["WORKBOOK_EXPLORE_REPLAY"] = args.replay.strip()


def target_file(problem: manifest.Problem, args: argparse.Namespace) -> Path:
    if args.solution:
        return problem.solution_file
    variant = _variant(problem, args)
    if variant is not None:
        return variants.materialize(variant)
    path = args.file or problem.learner_file
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    return path


def _variant(problem: manifest.Problem, args: argparse.Namespace) -> variants.Variant | None:
    if args.pitfall:
        return variants.get(problem, "pitfall", args.pitfall)
    if args.wrong:
        return variants.get(problem, "wrong", args.wrong)
    return None


def cmd_check(problem_id: str, argv: list[str]) -> int:
    problem = _problem(problem_id)
    args = _check_parser(f"check.sh {problem_id}").parse_args(argv)
    if args.show or args.refresh:
        variant = _variant(problem, args)
        if variant is None:
            raise UsageError("--show and --refresh go with --pitfall NAME or --wrong NAME")
        if args.refresh:
            changed = variants.refresh(variant)
            console.print(f"{render.shown_path(variant.source)}: "
                          f"{'rewritten' if changed else 'already up to date'}")
        if args.show and not console.is_terminal:
            # piped (`--show > fix.diff`, `| git apply`): the stored file itself, unwrapped and
            # uncoloured; its explanation sits before the `---` line, where patch tools skip it
            variants.apply(variant)  # say so at once if it no longer applies
            sys.stdout.write(f"{variant.label} · {variant.failing} · "
                             f"{render.shown_path(variant.source)}\n\n"
                             + variant.source.read_text("utf-8"))
        elif args.show:
            variants.show(variant, console)
        return 0
    if args.repeat < 1:
        raise UsageError("--repeat needs a whole number of at least 1")
    target = target_file(problem, args)
    _exploration(problem, args)
    if args.watch:
        return watch.watch(problem, target)
    results = []
    if args.pythons:
        if args.repeat > 1:
            raise UsageError("--pythons checks once under each Python; leave out --repeat")
        from workbook import pythons
        combined, each = pythons.check(problem, target, _say(args))
        if not args.json:
            console.print(render.pythons_view(each))
        results.append(combined)
    for i in range(0 if args.pythons else args.repeat):
        live = console.is_terminal and not args.json and args.repeat == 1
        if args.repeat > 1 and not args.json and console.is_terminal:
            # a spinner, never a silent run: each of N runs takes seconds
            failed = sum(not r.passed for r in results)
            with console.status(f"run {i + 1}/{args.repeat}… ({failed} failed so far)"):
                results.append(run_check(problem, target))
            continue
        if args.repeat > 1 and not args.json:
            console.print(f"run {i + 1}/{args.repeat}…", end="\r")
        results.append(watch.live_check(problem, target) if live else run_check(problem, target))
    last = results[-1]
    learner = watch.is_learner_file(problem, target)  # only checks of mine/ change progress
    advice = watch.record(problem, last) if learner else None
    if args.json:
        doc = _json(results)
        if learner:  # added: the problem's status after this check, as `status` says it
            doc["status"] = progress.status_text(progress.entry(progress.load(), problem.id),
                                                 target)
        console.print_json(json.dumps(doc))
    elif args.repeat > 1:
        console.print(render.repeat_view(results, problem))
    else:
        watch.show(problem, last, learner, advice)
    return 0 if all(r.passed for r in results) else 1


def _say(args: argparse.Namespace):
    """A progress line printer, quiet under --json (stdout is one JSON document)."""
    if args.json:
        return lambda text: None
    return lambda text: console.print(text, style="dim")


def _json(results: list[Result]) -> dict:
    failed = [r for r in results if not r.passed]
    shown = failed[0] if failed else results[-1]
    doc = shown.to_json()
    # Added (every other key is as it was): one panel per root cause, as the terminal and
    # the page show them, and the one line that replaces them (an import error).
    problem = manifest.get(shown.problem)
    seen = view.result_view(shown, problem, hints_seen=progress.hints_seen(problem.id))
    doc["panels"] = [{"title": p.title, "message": p.message, "looks_like": p.looks_like,
                      "checkpoints": p.checkpoints, "hint": p.hint, "section": p.section,
                      "kind": p.kind, "outputs": [asdict(o) for o in p.outputs]}
                     for p in seen.panels]
    doc["blocker"] = seen.blocker
    if len(results) > 1:
        doc["runs"], doc["failed_runs"] = len(results), len(failed)
        doc["passed"] = not failed
        named = Counter(name for r in results
                        for name in {cp.pitfall for cp in r.checkpoints if cp.pitfall})
        doc["pitfall_runs"] = dict(named)  # in how many runs each pitfall was named
        doc["each_run"] = [{"seconds": round(r.seconds, 2),
                            "stuck": sum(cp.stuck for cp in r.checkpoints),
                            # an extension not attempted is not a failure
                            "failed": [cp.id for cp in r.checkpoints if cp.status == "failed"],
                            "import_error": r.import_error is not None} for r in results]
        doc["stuck_verdicts"] = sum(each["stuck"] for each in doc["each_run"])
    return doc


def cmd_all(argv: list[str]) -> int:
    parser = ArgumentParser(prog="check.sh all", description="Check every problem.")
    parser.add_argument("--solution", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pythons", action="store_true",
                        help="check each under every supported Python found")
    args = parser.parse_args(argv)
    results: dict[str, Result] = {}
    for problem in manifest.problems().values():
        target = problem.solution_file if args.solution else problem.learner_file
        if not target.is_file():
            raise UsageError(f"no such file: {target}")
        if args.pythons:
            from workbook import pythons
            results[problem.id], each = pythons.check(problem, target, _say(args))
            if not args.json:
                console.print(render.pythons_view(each))
            continue
        with console.status(f"checking {problem.id}…"):
            results[problem.id] = run_check(problem, target)
        if not args.solution:
            progress.record_check(problem.id, results[problem.id])
    if args.json:
        console.print_json(json.dumps({pid: r.to_json() for pid, r in results.items()}))
    else:
        console.print(render.summary_view(results))
    return 0 if all(r.passed for r in results.values()) else 1


# -- reading ------------------------------------------------------------------------------

def cmd_list(argv: list[str]) -> int:
    _no_args("list", argv)
    console.print(render.problems_view(progress.load(), with_progress=False))
    return 0


def cmd_status(argv: list[str]) -> int:
    _no_args("status", argv)
    console.print(render.problems_view(progress.load(), with_progress=True))
    return 0


def cmd_hint(argv: list[str]) -> int:
    parser = ArgumentParser(prog="check.sh hint",
                            description="Show the next unseen hint level.")
    parser.add_argument("problem")
    parser.add_argument("level", nargs="?", type=int, choices=(1, 2, 3))
    args = parser.parse_args(argv)
    problem = _problem(args.problem)
    seen = progress.hints_seen(problem.id)
    level = args.level or min(seen + 1, 3)
    path = problem.hint_file(level)
    if not path.is_file():
        raise UsageError(f"missing hint file {render.shown_path(path)}")
    console.print(render.markdown_view(f"{problem.id} · hint level {level} of 3",
                                       path.read_text("utf-8")))
    progress.record_hint(problem.id, level)
    if args.level is None and seen >= 3:
        console.print("[dim]You have seen every level; this is the last one again.[/dim]")
    elif level < 3:
        console.print(f"[dim]Next level: ./check.sh hint {problem.id}[/dim]")
    return 0


def cmd_book(argv: list[str]) -> int:
    parser = ArgumentParser(prog="check.sh book", description="Read a chapter.")
    parser.add_argument("problem", help="pNN, or 'designs' for the closing chapter")
    parser.add_argument("--answers", action="store_true", help="open every answer fold")
    parser.add_argument("--section", metavar="NAME",
                        help="show one section (fuzzy match on its title or anchor)")
    parser.add_argument("--no-pager", action="store_true",
                        help="print straight to the terminal (a pager is used on a TTY)")
    args = parser.parse_args(argv)
    if args.problem in book_sections.EXTRA:
        return _book_extra(args.problem, args)
    problem = _problem(args.problem)
    path = problem.chapter_file
    if not path.is_file():
        raise UsageError(f"missing chapter {render.shown_path(path)}")
    blocks = None
    if args.section:
        from workbook import chapters
        chapter = chapters.load(problem)
        blocks = chapter.section(_find_section(chapter, args.section).anchor)
    _print_book(_chapter_view(problem, answers=args.answers, blocks=blocks), args)
    return 0


def _print_book(view, args: argparse.Namespace) -> None:
    """A chapter is a thousand lines: on a terminal it goes through a pager (``$PAGER``, else
    ``less``, told to keep the colours), piped it is printed as it is."""
    if console.is_terminal and not args.no_pager:
        os.environ.setdefault("LESS", "-R")
        with console.pager(styles=True):
            console.print(view)
    else:
        console.print(view)


def _find_section(chapter, name: str):
    try:
        return book_sections.find(chapter, name)
    except book_sections.NoSection as exc:
        raise UsageError(str(exc)) from None


def _book_extra(name: str, args: argparse.Namespace) -> int:
    """A chapter that belongs to no problem (``book designs``)."""
    from workbook import bookview
    chapter = book_sections.load_extra(name)
    blocks = chapter.section(_find_section(chapter, args.section).anchor) if args.section else None
    _print_book(bookview.chapter_view(chapter, answers=args.answers, blocks=blocks), args)
    return 0


def _chapter_view(problem: manifest.Problem, *, answers: bool = False, blocks=None):
    """The chapter parsed into blocks (timelines, pitfall diffs, folds) for the terminal."""
    from workbook import bookview, chapters
    try:
        chapter = chapters.load(problem)
    except chapters.ChapterError as exc:
        raise UsageError(f"{render.shown_path(problem.chapter_file)}: {exc}") from None
    return bookview.chapter_view(chapter, answers=answers, blocks=blocks)


# -- commands that live in their own modules ----------------------------------------------

def _delegate(kind: str, module_name: str, argv: list[str]) -> int:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise UsageError(f"there is no '{kind}'{_available(module_name)}") from None
        raise
    return int(module.main(argv) or 0)


def _available(module_name: str) -> str:
    """' (there is: demo p02)' -- the sibling modules that do exist, for an error message."""
    package, _, _ = module_name.rpartition(".")
    found = [p.id for p in manifest.problems().values()
             if importlib.util.find_spec(f"{package}.{p.id}") is not None]
    kind = package.rsplit(".", 1)[-1].rstrip("s")
    return f" (there is: {', '.join(f'{kind} {pid}' for pid in found)})" if found else ""


def cmd_demo(argv: list[str]) -> int:
    if not argv:
        raise UsageError("usage: check.sh demo pNN")
    problem = _problem(argv[0])
    return _delegate(f"demo {problem.id}", problem.demo_module, argv[1:])


def cmd_bench(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        raise UsageError("usage: check.sh bench pNN [--file PATH] [--json]")
    problem = _problem(argv[0])
    return _delegate(f"bench {problem.id}", problem.bench_module, argv[1:])


def cmd_grade(argv: list[str]) -> int:
    return _delegate("grade", "workbook.grading.batch", argv)


def cmd_mutate(argv: list[str]) -> int:
    """Mutation testing of a reference (a developer command; needs the 'mutate' extra)."""
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        raise UsageError("usage: check.sh mutate pNN [--jobs N] [--sample K] [--json]")
    return _delegate("mutate", "workbook.mutate", argv)


def cmd_selftest(argv: list[str]) -> int:
    """The project's own test suite."""
    workers = []
    chosen = any(a.startswith(("-n", "--numprocesses")) for a in argv)  # the caller's count
    no_xdist = "no:xdist" in [a.removeprefix("-p") for a in argv]  # -p no:xdist, -pno:xdist
    if importlib.util.find_spec("xdist") is not None and not chosen and not no_xdist:
        # Two per core: most of a check is waiting, not computing (three per core measured
        # no faster on 2 cores: 533 s against 510-558 s, with more CPU spent).
        workers = ["-n", str(min(8, 2 * (os.cpu_count() or 1)))]
    command = [sys.executable, "-m", "pytest", str(ROOT / "tests" / "selftest"),
               "-p", "no:cacheprovider", *workers, *argv]
    return subprocess.call(command, cwd=ROOT)


def cmd_web(kind: str, argv: list[str]) -> int:
    """``serve`` / ``site``: the workbook in the browser (the ``web`` extra)."""
    try:
        return _delegate(kind, f"workbook.web.{'server' if kind == 'serve' else 'site'}", argv)
    except ModuleNotFoundError as exc:
        raise UsageError(f"'{kind}' needs the web extra ({exc.name} is missing): run it as "
                         f"./check.sh {kind}, which installs it") from None


def _no_args(name: str, argv: list[str]) -> None:
    if argv:
        raise UsageError(f"'{name}' takes no arguments")


HANDLERS = {"all": cmd_all, "list": cmd_list, "status": cmd_status, "hint": cmd_hint,
            "book": cmd_book, "demo": cmd_demo, "bench": cmd_bench, "grade": cmd_grade,
            "selftest": cmd_selftest, "mutate": cmd_mutate,
            "new": lambda argv: _delegate("new", "workbook.scaffold", argv),
            "serve": lambda argv: cmd_web("serve", argv), "site": lambda argv: cmd_web("site", argv),
            "gradescope-bundle": lambda argv: int(
                importlib.import_module("workbook.grading.bundle").main(argv))}


def _one_line(text: str, width: int = 80 - len("error: ")) -> str:
    """A usage error as one line that fits 80 columns."""
    from rich.markup import escape
    line = " ".join(text.split())
    if len(line) > width:
        line = line[:width - 1].rsplit(" ", 1)[0] + "…"
    return escape(line)


def usage() -> str:
    ids = " | ".join(manifest.problems())
    return (f"usage: check.sh ({ids}) [--file PATH | --solution | --pitfall NAME | "
            f"--wrong NAME] [--show] [--json] [--repeat N]\n       check.sh {{{','.join(COMMANDS)}}} ...")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        if command in HANDLERS:
            return HANDLERS[command](rest)
        if command in manifest.problems():
            return cmd_check(command, rest)
        if command.lower() in manifest.problems():  # `P01` is p01
            return cmd_check(command.lower(), rest)
        raise UsageError(f"unknown problem or command {command!r} (./check.sh --help lists them)")
    except UsageError as exc:
        first, *more = str(exc).split("\n")  # a first line, then lines kept whole
        errors.print(f"[red]error:[/red] {_one_line(first)}", markup=True, highlight=False,
                     soft_wrap=True)
        for line in more:
            errors.print(line, markup=False, highlight=False, soft_wrap=True)
        return 2
    except SystemExit as exc:  # argparse's own usage errors
        return int(exc.code or 0)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        return 130
