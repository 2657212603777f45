"""``./check.sh site OUT_DIR``: the whole book as static HTML an instructor can host anywhere.

The same templates and chapter rendering as ``serve``, the closing chapter included; hints
sit in ``<details>`` folds (with JavaScript one level at a time), answers in folds,
timelines step through; instead of a run button each
page names the command to run.  No progress, no token, no server.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from workbook import manifest
from workbook.render import shown_path
from workbook.web import html, pages
from workbook.web.app import STATIC, environment
from workbook.errors import ArgumentParser


def build(out: Path) -> list[Path]:
    """Write the site into ``out``; the files written, index first."""
    env = environment()
    out.mkdir(parents=True, exist_ok=True)
    (out / "static").mkdir(exist_ok=True)
    for name in ("style.css", "app.js"):
        shutil.copyfile(STATIC / name, out / "static" / name)
    (out / "static" / "pygments.css").write_text(html.pygments_css(), "utf-8")
    urls = {"mode": "static", "index_url": "index.html", "page_url": lambda pid: f"{pid}.html",
            "asset": lambda name: f"static/{name}"}
    cards = pages.cards({"problems": {}})
    for c in cards:  # no learner here: nothing is "next"
        c.next = False
    written = [out / "index.html"]
    written[0].write_text(env.get_template("index.html").render(
        cards=cards, all_cards=cards, current=None, **urls), "utf-8")
    for problem in manifest.problems().values():
        card = next(c for c in cards if c.id == problem.id)
        page = env.get_template("problem.html").render(
            card=card, all_cards=cards, current=problem.id, chapter=pages.chapter(problem),
            hints=pages.hints(problem),
            checkpoints=problem.checkpoints, reference_file=shown_path(problem.solution_file),
            reference_html="", page_data={}, **urls)
        path = out / f"{problem.id}.html"
        path.write_text(page, "utf-8")
        written.append(path)
    for name in pages.EXTRA_TITLES:  # the closing chapter
        path = out / f"{name}.html"
        path.write_text(env.get_template("chapter.html").render(
            extra=pages.extra_chapter(name), all_cards=cards, current=name, **urls), "utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="check.sh site",
                            description="Write the book as static HTML.")
    parser.add_argument("out", type=Path, metavar="OUT_DIR")
    args = parser.parse_args(argv)
    written = build(args.out)
    print(f"wrote {len(written)} pages and their assets to {args.out}/ "
          f"(open {args.out / 'index.html'})", file=sys.stdout)
    return 0
