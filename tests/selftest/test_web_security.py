"""What another local page or an odd address can do to ``./check.sh serve``: it cannot frame
the workbook (checked in headless Chromium: a click inside a frame once recorded a hint), and
a malformed static name is a 404, never a 500 with a traceback."""
from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request

import pytest

from tests.selftest import web_fixtures
from tests.selftest.web_fixtures import browser, server  # noqa: F401 - fixtures


def _headers(server, path: str, *, token: bool = True) -> tuple[int, dict]:
    req = urllib.request.Request(server.base + path,
                                 headers={"X-Workbook-Token": server.token} if token else {})
    opener = urllib.request.build_opener(web_fixtures._NoRedirect)
    try:
        with opener.open(req, timeout=10) as res:
            return res.status, {k.lower(): v for k, v in res.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}


@pytest.mark.parametrize("path,token", [("/", True), ("/p01", True), ("/static/app.js", True),
                                        ("/api/status", True), ("/", False)])
def test_every_response_forbids_framing(server, path, token):
    status, headers = _headers(server, path, token=token)
    assert status in (200, 403), status
    assert headers.get("x-frame-options") == "DENY", headers
    assert "frame-ancestors 'none'" in headers.get("content-security-policy", ""), headers


@pytest.mark.parametrize("name", ["app.js%00.txt", "app.js%00", "..%2Fapp.py", "%2e%2e",
                                  "app.js%0a", "%ff%fe"])
def test_an_odd_static_name_is_not_found_not_a_crash(server, name):
    status, body = server.request(f"/static/{name}")
    assert status == 404, (status, body[:300])
    assert "Traceback" not in body


class _FramingPage(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_GET(self):  # noqa: N802 - the http.server API
        body = (f'<html><body><iframe id="f" src="{self.target}" width="800" height="600">'
                f'</iframe></body></html>').encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_another_local_page_cannot_frame_the_workbook(server, browser):
    handler = type("Handler", (_FramingPage,), {"target": server.url})
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    page = browser.new_page()
    try:
        page.goto(f"http://127.0.0.1:{other.server_address[1]}/", timeout=15000)
        page.wait_for_load_state("load", timeout=15000)
        # A framed workbook would show its problem cards; a refused frame shows Chromium's
        # error page (or nothing), never the workbook's content.
        assert page.frame_locator("#f").locator("text=OutputSink").count() == 0
        child = [f for f in page.frames if f is not page.main_frame]
        assert all("127.0.0.1:" + str(server.port) not in (f.url or "")
                   or f.url.startswith("chrome-error") for f in child), [f.url for f in child]
    finally:
        page.close()
        other.shutdown()
