"""``./check.sh serve`` over plain HTTP: the guard (token, Host, same-origin POST), hints
recorded as ``./check.sh hint`` records them, the reference gated, one run per problem."""
from __future__ import annotations

import json

import pytest

from tests.selftest import web_fixtures
from tests.selftest.web_fixtures import origin, server  # noqa: F401 - a fixture
from tests.selftest.conftest import cli


def test_it_listens_on_loopback_only_and_prints_a_tokened_url(server):
    assert server.url.startswith("http://127.0.0.1:") and len(server.token) >= 20
    import subprocess
    ss = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True,
                        text=True)
    if ss.returncode == 0 and ss.stdout.strip():
        assert all("127.0.0.1:" in line for line in ss.stdout.strip().splitlines()), ss.stdout


@pytest.mark.parametrize("path", ["/", "/p01", "/static/app.js", "/p01/events", "/api/status"])
def test_requests_without_the_token_are_refused(server, path):
    status, body = server.request(path, token=False)
    assert status == 403 and "token" in body
    status, _ = server.request(path.replace("/p01/events", "/api/status"), token=True)
    assert status in (200, 303)


def _landing(server) -> tuple[str, str]:
    """The printed link's answer: (Location, Set-Cookie)."""
    import urllib.request
    opener = urllib.request.build_opener(web_fixtures._NoRedirect)
    try:
        opener.open(urllib.request.Request(server.url), timeout=10)
        raise AssertionError("expected a redirect")
    except urllib.error.HTTPError as exc:
        assert exc.code == 303
        return exc.headers["Location"], exc.headers["Set-Cookie"]


def _reader_cookie(server) -> str:
    cookie = _landing(server)[1]
    return cookie.split(";", 1)[0]  # name=value


def test_a_wrong_token_or_cookie_is_refused(server):
    status, _ = server.request("/", token=False, headers={"Cookie": f"workbook_token_"
                                                          f"{server.port}=nope"})
    assert status == 403
    status, _ = server.request("/", token=False, headers={"Cookie": _reader_cookie(server)})
    assert status == 200


@pytest.mark.parametrize("host", ["evil.example", f"evil.example:{1}", "127.0.0.1:1",
                                  "localhost.evil.example"])
def test_a_foreign_host_header_is_refused_even_with_the_token(server, host):
    status, body = server.request("/api/status", headers={"Host": host})
    assert status == 421 and "Host" in body


def test_the_link_sets_a_strict_reading_cookie_that_never_carries_the_token(server):
    location, cookie = _landing(server)
    assert "?" not in location and location.endswith(f"#token={server.token}")  # fragment only
    assert server.token not in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert cookie.startswith(f"workbook_token_{server.port}=")


def test_the_cookie_alone_reads_pages_but_changes_nothing(server):
    # Cookies are scoped by host, not port: another server on 127.0.0.1 receives this one.
    # What it can do with it: read pages; never open a hint, run a check or mark done.
    jar = {"Cookie": _reader_cookie(server), "Origin": f"http://127.0.0.1:{server.port}"}
    assert server.request("/p01", token=False, headers=jar)[0] == 200
    before = server.progress.read_text() if server.progress.exists() else None
    for path in ("/p01/done", "/p01/hint/1", "/p01/run", "/p01/undo", "/p01/watch"):
        status, body = server.request(path, method="POST", token=False, headers=jar)
        assert status == 403 and "token" in body, (path, status, body)
    after = server.progress.read_text() if server.progress.exists() else None
    assert before == after
    # ... nor can the token be taken from a page: no page the cookie reads contains it
    for path in ("/", "/p01", "/p04", "/static/app.js", "/api/status"):
        assert server.token not in server.request(path, token=False, headers=jar)[1], path


@pytest.mark.parametrize("headers", [{}, {"Origin": "http://evil.example"},
                                     {"Origin": "null"}, {"Origin": "http://127.0.0.1:1"}])
def test_a_post_from_another_origin_is_refused_and_changes_nothing(server, headers):
    before = server.progress.read_text() if server.progress.exists() else None
    for path in ("/p01/done", "/p01/hint/1", "/p01/run", "/p01/undo", "/p01/watch"):
        status, body = server.request(path, method="POST", headers=headers)
        assert status == 403 and "origin" in body.lower(), (path, status, body)
    after = server.progress.read_text() if server.progress.exists() else None
    assert before == after


def test_state_changes_are_post_only(server):
    for path in ("/p01/done", "/p01/hint/1", "/p01/run"):
        status, _ = server.request(path)
        assert status == 405


def test_hints_open_one_level_at_a_time_and_are_recorded_like_the_cli(server):
    status, body = server.request("/p02/hint/2", method="POST", headers=origin(server))
    assert status == 409 and "level 1 first" in body
    status, body = server.request("/p02/hint/1", method="POST", headers=origin(server))
    doc = json.loads(body)
    assert status == 200 and doc["hints_seen"] == 1 and "<" in doc["html"]
    out = cli("status", env=server.env())
    row = next(line for line in out.stdout.splitlines() if "p02" in line)
    assert "L1" in row
    # a level opened in the terminal shows as opened on the page
    assert cli("hint", "p02", "2", env=server.env()).returncode == 0
    status, page = server.request("/p02")
    assert status == 200 and 'data-hints-seen="2"' in page
    assert 'id="hint-L2-body">' in page and 'data-level="3"' in page


def test_the_reference_is_shown_only_when_done_or_asked_for_anyway(server):
    status, body = server.request("/p03/reference")
    assert status == 403
    status, body = server.request("/p03/reference?anyway=1")
    import html
    import re

    from workbook import manifest
    shown = html.unescape(re.sub(r"<[^>]+>", "", json.loads(body)["html"]))
    assert status == 200 and shown.strip() == manifest.get("p03").solution_file.read_text().strip()
    status, page = server.request("/p03")
    assert "Show it anyway" in page and "reference-warning" in page


def test_mark_done_and_undo_write_the_progress_file(server):
    assert server.request("/p04/done", method="POST", headers=origin(server))[0] == 200
    assert json.loads(server.progress.read_text())["problems"]["p04"]["done_at"]
    assert "done" in next(line for line in cli("status", env=server.env()).stdout
                          .splitlines() if "p04" in line)
    assert server.request("/p04/reference")[0] == 200
    assert server.request("/p04/undo", method="POST", headers=origin(server))[0] == 200
    assert "done_at" not in json.loads(server.progress.read_text())["problems"]["p04"]


def test_a_second_run_while_one_is_running_is_refused(server):
    first = server.request("/p03/run", method="POST", headers=origin(server))
    second = server.request("/p03/run", method="POST", headers=origin(server))
    assert first[0] == 202
    assert second[0] == 409 and "already running" in json.loads(second[1])["message"]


def test_stopping_the_server_stops_its_running_checks(tmp_path):
    import subprocess
    import time

    s = web_fixtures.start(tmp_path)
    try:
        assert s.request("/p03/run", method="POST", headers=origin(s))[0] == 202
        target = str(s.learner("p03"))

        def checks() -> list[str]:
            out = subprocess.run(["pgrep", "-f", "--", target], capture_output=True,
                                 text=True)
            return out.stdout.split()

        deadline = time.monotonic() + 20
        while not checks() and time.monotonic() < deadline:  # the run's pytest is up
            time.sleep(0.05)
        assert checks(), "the run never started"
    finally:
        web_fixtures.stop_proc(s.proc)
    deadline = time.monotonic() + 10
    while checks() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not checks(), "a check outlived the server"
    assert s.proc.returncode in (0, -15)  # uvicorn re-raises the SIGTERM it handled
