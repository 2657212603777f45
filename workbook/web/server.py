"""``./check.sh serve [--port N] [--no-open]``: the workbook as a local web app."""
from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import webbrowser
from pathlib import Path
from workbook.errors import ArgumentParser

DEFAULT_PORT = 8765


def _bind(port: int, explicit: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        if explicit:
            sock.close()
            raise
        sock.bind(("127.0.0.1", 0))  # the default port is taken: any free one
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


def _can_open_browser() -> bool:
    if os.environ.get("CI"):
        return False
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY")
                                                  or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="check.sh serve",
                            description="Read, reveal hints and run checks in the browser.")
    parser.add_argument("--port", type=int, help=f"port on 127.0.0.1 (default {DEFAULT_PORT}, "
                                                 "or any free one if that is taken; 0: any)")
    parser.add_argument("--no-open", action="store_true", help="do not open a browser")
    parser.add_argument("--mine", type=Path, metavar="DIR",
                        help="check the learner files in DIR instead of mine/ (for tests)")
    args = parser.parse_args(argv)
    import uvicorn

    from workbook.web.app import create_app

    try:
        sock = _bind(DEFAULT_PORT if args.port is None else args.port, args.port is not None)
    except OSError as exc:
        print(f"check.sh serve: cannot listen on 127.0.0.1:{args.port}: {exc.strerror}",
              file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(18)
    app = create_app(token=token, port_of=lambda: port,
                     mine=args.mine.resolve() if args.mine else None)
    url = f"http://127.0.0.1:{port}/?token={token}"
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    print(f"The workbook is at {url}\n(only this machine can reach it; Ctrl-C stops it)",
          flush=True)
    if not args.no_open and _can_open_browser():
        threading.Timer(0.5, webbrowser.open, args=(url,)).start()
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    return 0
