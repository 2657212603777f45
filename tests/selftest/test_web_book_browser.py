"""The book on the page, in headless Chromium (Playwright, system Chromium, --no-sandbox; the
same setup as ``test_web_browser``): in the static site and in ``serve`` every code block is
rendered once (no ``<pre>`` inside a ``<pre>``, no ``div.highlight`` inside a ``<code>``) at
the same font size as its ``<pre>``; footnote references are links to notes that exist, and
no ``[^label]`` is printed; the closing chapter is a page of both, linked from the
navigation; and the hints open without JavaScript (``<details>``), in the static site and
in ``serve``, where only the page's script records an opening.
"""
from __future__ import annotations

import pytest

from tests.selftest import web_fixtures
from tests.selftest.conftest import cli
from tests.selftest.web_fixtures import browser, server  # noqa: F401 - fixtures
from workbook import manifest

NESTED = "pre pre, code pre, code div.highlight, pre div.highlight, div.highlight div.highlight"
PAGES = [*manifest.problems(), "designs"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("book-site") / "site"
    done = cli("site", str(out))
    assert done.returncode == 0, done.stderr
    return out


def _check_book_page(pg, name: str) -> None:
    assert pg.locator("pre.highlight").count() > 0, f"{name}: no code block"
    assert pg.locator(NESTED).count() == 0, f"{name}: a code block inside a code block"
    sizes = pg.evaluate("""() => [...document.querySelectorAll('pre.highlight')].map(p => {
        const c = p.querySelector('code');
        return [getComputedStyle(p).fontSize, c ? getComputedStyle(c).fontSize : null];
    })""")
    assert all(pre == code for pre, code in sizes), f"{name}: code shrunk inside its pre"
    text = pg.locator("article.chapter").inner_text()
    assert "[^" not in text, f"{name}: a raw footnote marker"
    refs = pg.locator("article.chapter sup.footnote-ref a")
    targets = [refs.nth(i).get_attribute("href") for i in range(refs.count())]
    if name != "designs":
        assert targets, f"{name}: the chapter's footnotes are not links"
    for href in targets:
        assert href.startswith("#") and pg.locator(f"[id='{href[1:]}']").count() == 1, href
        back = pg.locator(f"[id='{href[1:]}'] a.footnote-backref")
        assert back.count() == 1 and pg.locator(
            f"[id='{back.get_attribute('href')[1:]}']").count() == 1, href
    shown = [i for i in range(refs.count()) if refs.nth(i).is_visible()]  # not in a fold
    if shown:  # a reference jumps to its note
        refs.nth(shown[0]).click()
        assert pg.evaluate("location.hash") == targets[shown[0]]


def test_the_static_site_renders_code_once_footnotes_as_links_and_the_closing_chapter(
        browser, site):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    for name in PAGES:
        pg.goto((site / f"{name}.html").as_uri())
        _check_book_page(pg, name)
    pg.goto((site / "p01.html").as_uri())
    pg.click("nav >> text=Designs")
    assert pg.url.endswith("/designs.html")
    assert "four designs" in pg.locator("h1").inner_text().lower()
    assert pg.locator("article.chapter h2, article.chapter h3").count() >= 4
    assert not errors
    context.close()


def test_the_static_hints_open_without_javascript(browser, site):
    context = browser.new_context(java_script_enabled=False)
    pg = context.new_page()
    pg.goto((site / "p03.html").as_uri())
    for level in (1, 2, 3):
        assert pg.locator(f"#hint-L{level}-body").is_hidden()
    pg.click("#hint-L3 summary")  # no JavaScript: nothing orders the levels, nothing is dead
    assert pg.locator("#hint-L3-body").is_visible()
    assert "notify" in pg.locator("#hint-L3-body").inner_text()
    pg.click("#hint-L1 summary")
    assert pg.locator("#hint-L1-body").is_visible()
    assert pg.locator("button.reveal").count() == 0  # no button that needs a script
    context.close()


def test_copy_buttons_copy_the_code(browser, site):
    context = browser.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    pg = context.new_page()
    pg.goto((site / "p03.html").as_uri())
    has_clipboard = pg.evaluate("!!navigator.clipboard")
    if not has_clipboard:
        pytest.skip("no Clipboard API on file:// pages in this Chromium")
    blocks = pg.locator("article.chapter .code-wrap")
    assert blocks.count() == pg.locator("article.chapter pre.highlight").count() > 0
    first = next(blocks.nth(i) for i in range(blocks.count()) if blocks.nth(i).is_visible())
    button = first.locator("button.copy")
    button.click()
    button.filter(has_text="Copied").wait_for(timeout=10_000)
    copied = pg.evaluate("navigator.clipboard.readText()")
    assert copied.strip() and copied.strip() == first.locator("pre code").inner_text().strip()
    context.close()


def test_serve_renders_the_book_alike_and_serves_the_closing_chapter(browser, server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.goto(server.url)
    for name in PAGES:
        pg.goto(f"{server.base}/{name}")
        _check_book_page(pg, name)
    pg.goto(f"{server.base}/p02")
    pg.click("nav >> text=Designs")
    pg.wait_for_url("**/designs")
    assert "four designs" in pg.locator("h1").inner_text().lower()
    context.close()


def _hints_seen(server, problem_id: str) -> int:
    import json
    if not server.progress.exists():
        return 0
    doc = json.loads(server.progress.read_text("utf-8"))
    return int(doc.get("problems", {}).get(problem_id, {}).get("hints_seen", 0))


def test_serve_hints_open_without_javascript_and_are_recorded_only_with_it(browser, server):
    # Without JavaScript: every level is a fold the browser opens; nothing is recorded,
    # since recording needs the token that only the page's script holds (README).
    context = browser.new_context(java_script_enabled=False)
    pg = context.new_page()
    pg.goto(server.url)  # the printed link: it sets the reading cookie
    pg.goto(f"{server.base}/p04")
    assert pg.locator("section.hint button.open-hint:visible").count() == 0  # none dead
    assert "records nothing" in pg.locator("#hints").inner_text()  # the <noscript> note
    for level in (3, 1):  # no script: nothing orders the levels, nothing is dead
        assert pg.locator(f"#hint-L{level}-body").is_hidden()
        pg.click(f"#hint-L{level} summary")
        assert pg.locator(f"#hint-L{level}-body").inner_text().strip()
    assert _hints_seen(server, "p04") == 0
    context.close()
    # With it: buttons, in order, each opening recorded; the folds' text is gone from the DOM.
    context = browser.new_context()
    pg = context.new_page()
    pg.goto(server.url)
    pg.goto(f"{server.base}/p04")
    assert pg.locator("section.hint details.hint-fold").count() == 0
    assert pg.locator("#hint-L1-body").is_hidden() and not pg.locator(
        "#hint-L1-body").inner_text().strip()
    assert pg.locator("#hint-L2 button.open-hint").is_disabled()
    pg.click("#hint-L1 button.open-hint")
    pg.locator("#hint-L1-body").wait_for(state="visible")
    assert pg.locator("#hint-L1-body").inner_text().strip()
    assert _hints_seen(server, "p04") == 1
    assert pg.locator("#hint-L2 button.open-hint").is_enabled()
    context.close()
