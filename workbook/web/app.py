"""The local web app behind ``./check.sh serve`` (Starlette).

Safe by default: every request must name this server in its ``Host`` header (no DNS
rebinding) and carry a credential.  The URL the server printed hands the per-run token to
the page's script (in its fragment); the cookie it sets carries a separate reading value,
which lets a browser read pages and nothing more (cookies are scoped by host, not port, so
other local servers receive it).  Every change is a POST from the server's own origin with
the token itself in ``X-Workbook-Token`` (see ``Guard`` and the README).
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
import json
from dataclasses import asdict
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import parse_qs

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.responses import (HTMLResponse, JSONResponse, PlainTextResponse,
                                 RedirectResponse, Response, StreamingResponse)
from starlette.routing import Route

from workbook import manifest, progress, view
from workbook.render import shown_path
from workbook.run import Result
from workbook.web import html, pages
from workbook.web.runs import Runs

STATIC = Path(__file__).resolve().parent / "static"
PROBLEM = "{pid:str}"


def environment() -> Environment:
    env = Environment(loader=PackageLoader("workbook.web", "templates"),
                      autoescape=select_autoescape(["html"]), trim_blocks=True,
                      lstrip_blocks=True)
    return env


def describe(problem: manifest.Problem, result: Result) -> dict:
    """The final report for the page: the ``--json`` document and the result's view (the
    one the terminal draws), each panel's book section with its title and anchor on this
    page.  The page draws the view as it is."""
    chapter = pages.chapter(problem)
    shown = view.result_view(result, problem, recorded=True,
                             hints_seen=progress.hints_seen(problem.id),
                             again="run the checks again")
    panels = [{**asdict(p), "section_title": chapter.titles.get(p.section, p.section),
               "anchor": chapter.sections.get(p.section), **_run_shown(p, n)}
              for n, p in enumerate(shown.panels)]
    return {"result": result.to_json(), "passed": result.passed, "skeleton": result.skeleton,
            "line": shown.blocker or shown.verdict, "blocker": shown.blocker_kind,
            "blocker_output": shown.blocker_output,
            "rows": [asdict(r) for r in shown.rows], "diagnoses": panels,
            "done": bool(progress.entry(progress.load(), problem.id).get("done_at"))}


def _run_shown(p: view.Panel, n: int) -> dict:
    """A panel's failing run, step by step (the explorer's counterexample): the widget's
    HTML, and the message with its fixed-width table left out, since the widget shows it."""
    if not p.timeline:
        return {}
    table = p.timeline.get("text") or ""
    message = p.message.replace(table, "(the run, step by step: below)") if table else p.message
    return {"message": message, "timeline_html": html.counterexample(p.timeline, f"run-{n}")}


def describe_check(problem: manifest.Problem, result: Result, card: pages.Card) -> dict:
    """A recorded check as a page draws it: ``describe``, and when and where it ran, the
    status it leaves and whether the file changed since (``card``: the problem's progress
    now)."""
    last = card.last_check or {}
    return {**describe(problem, result), "at": last.get("at"), "source": last.get("source"),
            "key": list(progress.check_key({"last_check": last}) or []) or None,
            "last_line": card.last_line, "status": card.status, "state": card.state,
            "changed": card.changed}


#: Sent with every response (frames: both the old header and the CSP directive).
SECURITY_HEADERS = [(b"x-frame-options", b"DENY"),
                    (b"content-security-policy", b"frame-ancestors 'none'"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer")]


class Guard:
    """ASGI middleware: token, Host header, same-origin POST."""

    def __init__(self, app, *, token: str, port_of):
        self.app = app
        self.token = token
        # What the cookie carries: it lets a browser read pages, never change anything.
        # Cookies are scoped by host, not port, so every other server on 127.0.0.1 receives
        # it; a change needs the token itself, which the page's script keeps in this
        # origin's localStorage (scoped by port) and sends as X-Workbook-Token.
        self.reader = secrets.token_urlsafe(32)
        self.port_of = port_of  # the bound port is known only once the socket exists

    def cookie_name(self) -> str:
        return f"workbook_token_{self.port_of()}"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            # No other page may frame the workbook (a click inside a frame could open a
            # hint or mark a problem done), nor sniff a type, nor learn its addresses.
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  *SECURITY_HEADERS]}
            await send(message)
        return await self._guarded(scope, receive, send_with_headers)

    async def _guarded(self, scope, receive, send):
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        port = self.port_of()
        hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        if headers.get("host", "") not in hosts:
            return await PlainTextResponse("unknown Host header: this server answers only to "
                                           f"127.0.0.1:{port}", 421)(scope, receive, send)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        cookies = SimpleCookie()
        try:
            cookies.load(headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 - a malformed cookie header is just no cookie
            pass
        method = scope["method"]
        header = headers.get("x-workbook-token", "")
        reading = method in ("GET", "HEAD")
        given = [header, query.get("token", [""])[0]] if reading else [header]
        allowed = any(g and hmac.compare_digest(g, self.token) for g in given)
        if reading and not allowed and self.cookie_name() in cookies:
            allowed = hmac.compare_digest(cookies[self.cookie_name()].value, self.reader)
        if not allowed:
            return await PlainTextResponse(
                "forbidden: open the link that ./check.sh serve printed (it carries the "
                "token)", 403)(scope, receive, send)
        if not reading:
            origin = headers.get("origin")
            if origin not in {f"http://{h}" for h in hosts}:
                return await PlainTextResponse(
                    f"forbidden: a {method} must come from this server's own pages "
                    f"(Origin {origin or 'missing'})", 403)(scope, receive, send)
        if method == "GET" and "token" in query:
            # Set the reading cookie and hand the token to the page's script in the
            # fragment (never sent to a server), which keeps it and drops it from the bar.
            response = RedirectResponse(f"{scope['path']}#token={self.token}", 303)
            response.set_cookie(self.cookie_name(), self.reader, httponly=True,
                                samesite="strict", path="/")
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)


def create_app(*, token: str, port_of, mine: Path | None = None) -> Starlette:
    env = environment()

    def file_of(problem: manifest.Problem) -> Path:
        return pages.learner_file(problem, mine)

    def last_of(problem_id: str) -> dict | None:
        """The problem's last recorded check (the terminal's or a page's), as drawn."""
        problem = manifest.get(problem_id)
        data = progress.load()
        result = progress.last_result(problem_id, progress.entry(data, problem_id))
        if result is None:
            return None
        card = next(c for c in pages.cards(data, mine=mine) if c.id == problem_id)
        return describe_check(problem, result, card)

    def cards_of() -> list[dict]:
        return [c.live() for c in pages.cards(mine=mine)]

    runs = Runs(file_of, describe, last_of=last_of, cards_of=cards_of)

    def snapshot(problem_id: str | None) -> dict:
        """What a page that subscribes now is told first: the progress, and the problem's
        last recorded check."""
        now = {"cards": cards_of()}
        if problem_id is not None:
            now["last"] = last_of(problem_id)
        return now

    def urls() -> dict:
        return {"mode": "serve", "index_url": "/", "page_url": lambda pid: f"/{pid}",
                "asset": lambda name: f"/static/{name}"}

    def problem_of(request) -> manifest.Problem:
        pid = request.path_params["pid"]
        if pid not in manifest.problems():
            raise KeyError(pid)
        return manifest.get(pid)

    async def index(request):
        cards = pages.cards(mine=mine)
        page = env.get_template("index.html").render(cards=cards, all_cards=cards,
                                                     current=None, **urls())
        return HTMLResponse(page)

    async def problem_page(request):
        try:
            problem = problem_of(request)
        except KeyError:
            return PlainTextResponse("no such problem", 404)
        cards = pages.cards(mine=mine)
        card = next(c for c in cards if c.id == problem.id)
        chapter = await asyncio.to_thread(pages.chapter, problem)
        hints = await asyncio.to_thread(pages.hints, problem)
        ch = runs.channel(problem.id)
        last = await asyncio.to_thread(last_of, problem.id)
        data = {"problem": problem.id, "file": card.file, "hints_seen": card.hints_seen,
                "done": card.done, "watching": ch.watching, "last": last,
                "checkpoints": {cp.id: cp.title for cp in problem.checkpoints}}
        rows = {r["id"]: r for r in (last or {}).get("rows", [])}
        page = env.get_template("problem.html").render(
            card=card, all_cards=cards, current=problem.id, chapter=chapter, hints=hints,
            checkpoints=problem.checkpoints, reference_file=shown_path(problem.solution_file),
            reference_html=pages.reference(problem) if card.done else "",
            last=last, last_rows=rows, icons=view.ICONS, page_data=data, **urls())
        return HTMLResponse(page)

    async def events(request):
        try:
            problem = problem_of(request)
        except KeyError:
            return PlainTextResponse("no such problem", 404)

        return _stream(runs.channel(problem.id), lambda: snapshot(problem.id))

    async def everywhere(request):  # the pages of no problem: progress only
        return _stream(runs.everywhere, lambda: snapshot(None))

    async def run(request):
        try:
            problem = problem_of(request)
        except KeyError:
            return JSONResponse({"ok": False, "message": "no such problem"}, 404)
        ok, message = runs.start(problem.id)
        return JSONResponse({"ok": ok, "message": message}, 202 if ok else 409)

    async def watch(request):
        problem = problem_of(request)
        body = await _json(request)
        runs.set_watch(problem.id, bool(body.get("on")))
        return JSONResponse({"ok": True, "watching": runs.channel(problem.id).watching})

    async def open_hint(request):
        problem = problem_of(request)
        level = int(request.path_params["level"])
        if level not in (1, 2, 3):
            return JSONResponse({"ok": False, "message": "levels are 1, 2 and 3"}, 404)
        seen = progress.hints_seen(problem.id)
        if level > seen + 1:
            return JSONResponse({"ok": False, "message": f"open level {seen + 1} first"}, 409)
        hint = await asyncio.to_thread(pages.hint, problem, level)
        await asyncio.to_thread(progress.record_hint, problem.id, level)  # as ./check.sh hint
        return JSONResponse({"ok": True, "level": level, "html": hint.html,
                             "hints_seen": progress.hints_seen(problem.id)})

    async def mark_done(request):
        problem = problem_of(request)
        await asyncio.to_thread(progress.mark_done, problem.id, shown_path(file_of(problem)))
        return JSONResponse({"ok": True, "done": True, **pages.card(problem.id, mine).live()})

    async def undo_done(request):
        problem = problem_of(request)
        await asyncio.to_thread(progress.unmark_done, problem.id)
        return JSONResponse({"ok": True, "done": False, **pages.card(problem.id, mine).live()})

    async def reference(request):
        problem = problem_of(request)
        done = bool(progress.entry(progress.load(), problem.id).get("done_at"))
        if not done and request.query_params.get("anyway") != "1":
            return JSONResponse({"ok": False, "message": "not done yet: ask with anyway=1"},
                                403)
        return JSONResponse({"ok": True, "html": pages.reference(problem),
                             "file": shown_path(problem.solution_file)})

    async def status(request):
        return JSONResponse({"progress": progress.load(),
                             "cards": [asdict(c) for c in pages.cards(mine=mine)]})

    async def extra_page(request):  # the closing chapter
        name = request.url.path.strip("/")
        extra = await asyncio.to_thread(pages.extra_chapter, name)
        page = env.get_template("chapter.html").render(
            extra=extra, all_cards=pages.cards(mine=mine), current=name, **urls())
        return HTMLResponse(page)

    async def static(request):
        name = request.path_params["name"]
        if name == "pygments.css":
            return Response(html.pygments_css(), media_type="text/css")
        if not name.replace(".", "").replace("-", "").replace("_", "").isalnum():
            return PlainTextResponse("not found", 404)  # NUL, separators, odd bytes
        path = (STATIC / name).resolve()
        if path.parent != STATIC or not path.is_file():
            return PlainTextResponse("not found", 404)
        kind = {"css": "text/css", "js": "text/javascript"}.get(path.suffix[1:], "text/plain")
        return Response(path.read_bytes(), media_type=kind,
                        headers={"Cache-Control": "no-cache"})

    routes = [
        Route("/", index),
        Route("/static/{name:str}", static),
        Route("/api/status", status),
        Route("/events", everywhere),
        *(Route(f"/{name}", extra_page) for name in pages.EXTRA_TITLES),
        Route(f"/{PROBLEM}", problem_page),
        Route(f"/{PROBLEM}/events", events),
        Route(f"/{PROBLEM}/run", run, methods=["POST"]),
        Route(f"/{PROBLEM}/watch", watch, methods=["POST"]),
        Route(f"/{PROBLEM}/hint/{{level:int}}", open_hint, methods=["POST"]),
        Route(f"/{PROBLEM}/done", mark_done, methods=["POST"]),
        Route(f"/{PROBLEM}/undo", undo_done, methods=["POST"]),
        Route(f"/{PROBLEM}/reference", reference),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(_app):
        # A check run in the terminal, a save, a hint opened: every open page hears of it.
        runs.watch_progress([progress.path(), *(file_of(p) for p in
                                                manifest.problems().values())])
        yield
        runs.stop()

    app = Starlette(routes=routes, exception_handlers={KeyError: _not_found},
                    lifespan=lifespan)
    app.state.runs = runs
    return Guard(app, token=token, port_of=port_of)


def _stream(channel, snapshot) -> StreamingResponse:
    """A channel's events as server-sent events."""
    async def stream():
        async for event in channel.follow(snapshot):
            yield f"data: {json.dumps(event)}\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def _not_found(request, exc):
    return JSONResponse({"ok": False, "message": f"no such problem: {exc}"}, 404)


async def _json(request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
