"""The page shows what is true now (issue 23.4, 23.5, 23.6), in headless Chromium: the last
recorded check of a problem, from the terminal or a page, with its time, its source and
"file changed since", never the last page run replayed as if it were new; a check run in
the terminal reaches an open page; "done" with a failing check after it says so; a diagnosis
opens the hint it names in place; the learner's output is folded under its label; the hints
are a few key presses away; the watch label reads as one line at 375 px."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.selftest import web_fixtures
from tests.selftest.conftest import cli
from tests.selftest.test_captured_output import FAKE, printing_file
from tests.selftest.web_fixtures import browser, server  # noqa: F401 - fixtures
from workbook import manifest

P01 = manifest.get("p01")
ALL_CORE = f"All {len(P01.core)} core checkpoints passed"
FAILED_DONE = "done, but the last check failed"


@pytest.fixture(scope="module")
def context(browser, server):
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    first = ctx.new_page()
    first.goto(server.url)  # the printed link: the cookie, and the token for the script
    first.close()
    yield ctx
    ctx.close()


def terminal_check(server, pid: str = "p01", *extra: str):
    """``./check.sh pNN`` on the server's learner file, as the learner's own check (it is
    recorded in the same progress file the page reads)."""
    return cli(pid, "--file", str(server.learner(pid)), *extra,
               env={**server.env(), "WORKBOOK_MINE": str(server.mine)})


def nav_mark(page, pid: str) -> dict:
    return page.evaluate("""(pid) => {
        const m = document.querySelector(`header.site li[data-problem="${pid}"] .done-mark`);
        return {shown: !m.hidden, text: m.textContent, label: m.getAttribute('aria-label')};
    }""", pid)


def run_events(page) -> list[str]:
    return [e["type"] for e in page.evaluate("window.__wb.events")
            if e["type"] in ("start", "checkpoint", "result")]


def test_a_terminal_check_reaches_the_open_page_and_a_fresh_page_shows_it_not_a_replay(
        context, server):
    page = web_fixtures.open_page(context, server, "/p01")
    assert page.locator("#last-check").inner_text().startswith("Not checked yet")
    skeleton = web_fixtures.run_from_page(page)["result"]  # a check on the page first
    assert "still the skeleton" in skeleton["line"] and skeleton["source"] == "page"
    assert "on this page" in page.locator("#last-check").inner_text()
    # ... then the reference, checked in the terminal: the open page shows it, no reload
    shutil.copyfile(P01.solution_file, server.learner("p01"))
    marker = page.evaluate("window.__marker = 1")  # noqa: F841 - gone after a reload
    assert terminal_check(server).returncode == 0
    page.wait_for_function(
        "window.__wb.events.some(e => e.type === 'last' && e.source === 'terminal')",
        timeout=20_000)
    assert page.evaluate("window.__marker") == 1
    assert page.locator("#verdict").inner_text().startswith(ALL_CORE)
    line = page.locator("#last-check").inner_text()
    assert "in the terminal" in line and f"{len(P01.checkpoints)} of {len(P01.checkpoints)} checkpoints passed" in line, line
    assert page.locator('#checklist li[data-status="passed"]').count() == len(P01.checkpoints)
    assert page.locator(".diagnosis").count() == 0
    page.wait_for_function(
        "!document.querySelector('header.site li[data-problem=p01] .done-mark').hidden")
    assert nav_mark(page, "p01") == {"shown": True, "text": "✓", "label": "done"}
    assert page.locator("#status").inner_text().startswith("done")
    # A fresh page shows the last check (the terminal's), with its time and source: the
    # page's own skeleton run is not replayed as if it were current.
    fresh = web_fixtures.open_page(context, server, "/p01")
    assert run_events(fresh) == [], fresh.evaluate("window.__wb.events")
    assert fresh.locator("#verdict").inner_text().startswith(ALL_CORE)
    assert "in the terminal" in fresh.locator("#last-check").inner_text()
    assert "still the skeleton" not in fresh.locator("#checks").inner_text()
    # A save: "file changed since", on the open page as it happens and on a fresh one
    with server.learner("p01").open("a") as f:
        f.write("\n# an edit after the check\n")
    page.wait_for_function("document.getElementById('last-check').classList"
                           ".contains('changed')", timeout=20_000)
    assert "The file changed since" in page.locator("#last-check").inner_text()
    fresh.reload()
    assert "The file changed since" in fresh.locator("#last-check").inner_text()
    assert "file changed since" in fresh.locator("#status").inner_text()  # as `status` says
    page.close()
    fresh.close()


def test_done_then_a_failing_check_says_so_everywhere_never_done_beside_the_skeleton(
        context, server):
    undo = server.request("/p01/undo", method="POST", headers=web_fixtures.origin(server))
    assert undo[0] == 200, undo  # whatever another test of the module left
    page = web_fixtures.open_page(context, server, "/p01")
    index = web_fixtures.open_page(context, server, "/")
    page.click("#mark-done")  # done (a pass would do the same: test_web_browser.py)
    for pg in (page, index):
        pg.wait_for_function("!document.querySelector('header.site li[data-problem=p01] "
                             ".done-mark').hidden", timeout=20_000)
    assert nav_mark(page, "p01")["text"] == "✓"
    shutil.copyfile(P01.learner_file, server.learner("p01"))  # the skeleton: it fails
    result = web_fixtures.run_from_page(page)["result"]
    assert result["skeleton"] and result["state"] == "done_failed"
    status = page.locator("#status").inner_text()
    assert status.startswith(FAILED_DONE) and status != "done", status
    assert "Nothing implemented yet." in page.locator("#run-status").inner_text()
    assert "stays marked done" in page.locator("#run-status").inner_text()
    assert nav_mark(page, "p01") == {"shown": True, "text": "✓!", "label": FAILED_DONE}
    assert page.locator("#card").get_attribute("class").split().count("is-failed") == 1
    # the same words in the terminal's status and in --json
    row = next(line for line in cli("status", env=server.env()).stdout.splitlines()
               if " p01 " in f" {line} ")
    assert "done, but the" in row, row
    doc = json.loads(terminal_check(server, "p01", "--json").stdout)
    assert doc["status"].startswith(FAILED_DONE), doc["status"]
    # the open index, its card and mark included, without a reload, and a fresh page
    index.wait_for_function("document.querySelector('header.site li[data-problem=p01] "
                            ".done-mark').textContent === '✓!'", timeout=20_000)
    assert nav_mark(index, "p01")["label"] == FAILED_DONE
    card = index.locator('li.card[data-problem="p01"] dd.status').inner_text()
    assert card.startswith(FAILED_DONE), card
    fresh = web_fixtures.open_page(context, server, "/p02")
    assert nav_mark(fresh, "p01")["label"] == FAILED_DONE
    page.click("#undo-done")  # and back: every open page's mark goes
    for pg in (page, index, fresh):
        pg.wait_for_function("document.querySelector('header.site li[data-problem=p01] "
                             ".done-mark').hidden", timeout=20_000)
    for pg in (page, index, fresh):
        pg.close()


def test_a_diagnosis_opens_the_hint_it_names_in_place_and_the_output_is_folded(
        context, server, tmp_path):
    shutil.copyfile(printing_file(tmp_path), server.learner("p01"))
    page = web_fixtures.open_page(context, server, "/p01")
    result = web_fixtures.run_from_page(page)["result"]
    panel = page.locator(".diagnosis").first
    # "Your output": folded, labelled as the learner's, escaped (no element from print)
    fold = panel.locator("details.learner-output").first
    assert fold.count() == 1 and fold.get_attribute("open") is None
    assert fold.locator("summary").inner_text().startswith("Your output: what your code printed")
    fold.locator("summary").click()
    text = fold.locator("pre").inner_text()
    assert "put 1" in text and f"\\x1b[32m{FAKE}" in text and "<img src=x" in text
    assert page.locator("#diagnoses img").count() == 0
    assert FAKE not in page.locator("#verdict").inner_text()
    # the hint link names the next level not opened (1: none is) and opens it in place
    seen = json.loads(server.progress.read_text())["problems"]["p01"].get("hints_seen", 0)
    level = result["diagnoses"][0]["hint"]
    assert level == seen + 1
    link = panel.locator("a.hint-link")
    assert link.inner_text() == f"hint level {level}"
    link.click()
    page.locator(f"#hint-L{level}-body").wait_for(state="visible")
    assert page.locator(f"#hint-L{level}-body").inner_text().strip()
    assert json.loads(server.progress.read_text())["problems"]["p01"]["hints_seen"] == level
    page.wait_for_function(f"document.getElementById('hint-L{level}-body')"
                           ".contains(document.activeElement)")
    page.close()


def _focused(page) -> str:
    return page.evaluate("document.activeElement ? document.activeElement.textContent.trim()"
                         " : ''")


@pytest.mark.parametrize("width", [1440, 375])
def test_open_l1_on_p04_is_a_few_key_presses_away(browser, server, width):
    ctx = browser.new_context(viewport={"width": width, "height": 900})
    page = ctx.new_page()
    page.goto(server.url)
    page.goto(server.base + "/p04")
    tabs = 0
    while not _focused(page).startswith("Skip to the hints") and tabs < 10:
        page.keyboard.press("Tab")
        tabs += 1
    page.keyboard.press("Enter")
    while not _focused(page).startswith("Open L1") and tabs < 10:
        page.keyboard.press("Tab")
        tabs += 1
    assert _focused(page).startswith("Open L1"), _focused(page)
    print(f"\n{width}px: {tabs} Tab presses and one Enter to 'Open L1' on p04")
    assert tabs <= 4
    page.goto(server.base + "/p04")  # the checks likewise
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert _focused(page) == "Skip to the checks"
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    assert _focused(page) == "Run checks"
    ctx.close()


def test_the_watch_label_reads_as_a_line_at_375_px(browser, server):
    ctx = browser.new_context(viewport={"width": 375, "height": 900})
    page = ctx.new_page()
    page.goto(server.url)
    page.goto(server.base + "/p03")
    # Each word of the label, in reading order: on the same line to the right of the one
    # before, or on a line below it. Side-by-side columns break that order (a word of the
    # first column's second line comes before the top of the next column).
    boxes = page.evaluate("""() => {
        const label = document.querySelector('label.watch');
        const out = [];
        const walker = document.createTreeWalker(label, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          for (const m of node.textContent.matchAll(/\\S+/g)) {
            const r = document.createRange();
            r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
            const b = r.getClientRects()[0];
            if (b) out.push({word: m[0], x: b.left, y: b.top, h: b.height});
          }
        }
        return out;
    }""")
    assert len(boxes) >= 4, boxes
    for before, after in zip(boxes, boxes[1:]):
        same_line = abs(after["y"] - before["y"]) < before["h"] / 2
        assert (same_line and after["x"] > before["x"]) or after["y"] > before["y"] + 1, \
            (before, after, boxes)
    ctx.close()


def test_an_explorers_failing_run_steps_through_on_the_page_its_cells_as_text(
        context, server, monkeypatch):
    # A recorded check whose exploration failed (issue 24.4): the diagnosis draws the run
    # as the book's step-through widget, not as a fixed-width table; what the learner's
    # code said (a source line, a repr) is shown as text, never as markup.
    from workbook import progress
    from workbook.run import CheckpointResult, Result
    p03 = manifest.get("p03")
    table = "step   time  T1 | T2\n   1   0.00  calls take() |"
    hostile = "<img src=x onerror=\"window.__owned=1\"> returns <b>obj1</b>"
    timeline = {"title": "capacity 1; T1: take(); T2: put(obj)", "actors": ["setup", "T1", "T2"],
                "state": ["time"], "text": table, "cut": 0,
                "steps": [{"label": "1", "do": ["", "calls take()", ""], "state": ["0"],
                           "note": ""},
                          {"label": "2", "do": ["", "", hostile], "state": ["0.5"],
                           "note": ""}]}
    cps = [CheckpointResult(cp.id, cp.title, cp.kind, "passed") for cp in p03.checkpoints]
    explore = next(cp for cp in cps if cp.id == "p03.explore")
    explore.status = "failed"
    explore.message = f"Exploration found a run that breaks the contract: x\n\n{table}\n\nReplay"
    explore.timeline = timeline
    learner = server.learner("p03")
    learner.write_text(p03.solution_file.read_text())
    monkeypatch.setenv("WORKBOOK_PROGRESS", str(server.progress))
    progress.record_check("p03", Result("p03", str(learner), cps))
    page = web_fixtures.open_page(context, server, "/p03")
    fig = page.locator(".diagnosis figure.timeline")
    fig.wait_for(state="visible", timeout=20_000)
    assert "T1 | T2" not in page.locator(".diagnosis .message").inner_text()
    assert page.locator(".diagnosis figure.timeline .tl-pos").inner_text() \
        == "Step 1 of 2: 1"
    page.locator(".diagnosis figure.timeline .tl-next").click()
    assert page.locator(".diagnosis figure.timeline .tl-pos").inner_text() \
        == "Step 2 of 2: 2"
    now = page.locator(".diagnosis figure.timeline .tl-now").inner_text()
    assert hostile in now, now  # the learner's text, shown as it is
    assert page.locator(".diagnosis figure.timeline img").count() == 0
    assert page.evaluate("window.__owned") is None
    page.close()
