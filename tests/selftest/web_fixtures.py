"""A real ``./check.sh serve`` for the web tests: one per test module, on a free port, with
its own progress file and its own learner folder (never the repository's mine/)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from workbook import ROOT, manifest

CHROMIUM = os.environ.get("WORKBOOK_CHROMIUM", "/usr/bin/chromium")


def playwright():
    """Playwright's ``sync_playwright``; a skip when it or Chromium is missing, except under
    ``CI=true``, where that is a failure."""
    reason = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        reason = "Playwright is not installed (the 'dev' extra has it)"
    if reason is None and not Path(CHROMIUM).is_file():
        reason = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: the browser tests must run, but {reason}")
        pytest.skip(reason)
    return sync_playwright


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module that imports this fixture."""
    with playwright()() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, request):
    """A real ``./check.sh serve`` for the module that imports this fixture."""
    s = start(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))
    yield s
    stop_proc(s.proc)


@dataclass
class Server:
    proc: subprocess.Popen
    url: str          # as printed, with ?token=
    base: str         # http://127.0.0.1:PORT
    token: str
    port: int
    mine: Path
    progress: Path
    output: list[str]

    def env(self) -> dict:
        return {"WORKBOOK_PROGRESS": str(self.progress)}

    def learner(self, problem_id: str) -> Path:
        return self.mine / f"{manifest.get(problem_id).module}.py"

    def request(self, path: str, *, method: str = "GET", headers: dict | None = None,
                token: bool = True, data: bytes | None = None) -> tuple[int, str]:
        url = self.base + path
        headers = {**({"X-Workbook-Token": self.token} if token else {}), **(headers or {})}
        req = urllib.request.Request(url, method=method, headers=headers,
                                     data=data if data is not None else
                                     (b"{}" if method == "POST" else None))
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=10) as res:
                return res.status, res.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", "replace")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def start(tmp: Path) -> Server:
    mine = tmp / "mine"
    mine.mkdir(parents=True)
    for p in manifest.problems().values():
        shutil.copyfile(p.learner_file, mine / p.learner_file.name)
    progress = tmp / "progress.json"
    env = {**os.environ, "WORKBOOK_PROGRESS": str(progress), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbook", "serve", "--port", "0", "--no-open",
         "--mine", str(mine)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    output: list[str] = []
    found = threading.Event()

    def pump() -> None:
        for line in proc.stdout:
            output.append(line)
            if "http://" in line:
                found.set()

    threading.Thread(target=pump, daemon=True).start()
    if not found.wait(60):
        stop_proc(proc)
        raise RuntimeError("serve printed no URL within 60 s:\n" + "".join(output))
    url = re.search(r"http://\S+", "".join(output)).group(0)
    m = re.fullmatch(r"(http://127\.0\.0\.1:(\d+))/\?token=(\S+)", url)
    assert m, url
    server = Server(proc, url, m.group(1), m.group(3), int(m.group(2)), mine, progress, output)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the socket is bound before the URL is printed
        try:
            if server.request("/api/status")[0] == 200:
                return server
        except OSError:
            pass
        time.sleep(0.1)
    stop_proc(proc)
    raise RuntimeError("serve did not answer:\n" + "".join(output))


def stop_proc(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


def origin(server: Server) -> dict:
    """The headers of a same-origin POST, as the page's own script sends it."""
    return {"Origin": server.base, "Content-Type": "application/json"}


def run_from_page(page, *, timeout: float = 120) -> dict:
    """Click "Run checks" and wait for the run's result event; return it."""
    before = page.evaluate("window.__wb.events.filter(e => e.type === 'result').length")
    page.click("#run")
    page.wait_for_function(
        f"window.__wb.events.filter(e => e.type === 'result').length > {before}",
        timeout=timeout * 1000)
    events = page.evaluate("window.__wb.events")
    result = [e for e in events if e["type"] == "result"][-1]
    run = [e for e in events if e.get("run") == result["run"]]
    return {"result": result, "events": run}


def open_page(context, server: Server, path: str):
    """A new tab of ``context`` on ``path``, once its event stream is open."""
    pg = context.new_page()
    pg.goto(server.base + path)
    pg.wait_for_function("document.body.dataset.stream === 'open'")
    return pg
