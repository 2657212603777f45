"""Shared pieces of the exposure scenarios (stdlib only: they also run under other Pythons).

A scenario is a function ``scenario(mod) -> str | None`` over the module under test (the
reference or a variant, loaded from a file): ``None`` when it behaved as the contract says,
otherwise one line saying what went wrong.  Every wait is bounded; helper threads are
daemons, so a scenario that finds a hang still ends.
"""
from __future__ import annotations

import importlib.util
import sys
import threading
import time
from pathlib import Path


class Broken(Exception):
    """Raised by a scenario (through ``expect``) when the module broke the contract."""


def expect(ok: object, message: str) -> None:
    if not ok:
        raise Broken(message)


def load(path: str | Path, name: str):
    """Import the file at ``path`` as module ``name`` (registered, as dataclasses need)."""
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class Outcome:
    """What a call made in a helper thread did: ``done``, then ``value`` or ``error``."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: object = None
        self.error: BaseException | None = None
        self.seconds = 0.0

    def wait(self, timeout: float) -> bool:
        return self.done.wait(timeout)


def in_thread(fn, *args, name: str = "scenario-helper", **kwargs) -> Outcome:
    """Call ``fn`` in a daemon thread; its outcome is filled in when it returns or raises."""
    out = Outcome()

    def body() -> None:
        started = time.monotonic()
        try:
            out.value = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported as the outcome
            out.error = exc
        finally:
            out.seconds = time.monotonic() - started
            out.done.set()

    t = threading.Thread(target=body, name=name, daemon=True)
    out.thread = t  # type: ignore[attr-defined]
    t.start()
    return out


def parked_in(thread: threading.Thread, names: tuple[str, ...], timeout: float = 2.0) -> bool:
    """Wait until ``thread``'s innermost frame is one of the functions ``names`` (used only
    to place a call at a known point of a scenario, never as a verdict)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident)
        if frame is not None and frame.f_code.co_name in names:
            return True
        time.sleep(0.005)
    return False


def main(scenarios: dict, argv: list[str]) -> int:
    """``python expose_pNN.py NAME PATH``: run scenario NAME on the file at PATH."""
    name, path = argv[1], argv[2]
    fn = scenarios[name]
    try:
        mod = load(path, Path(path).stem)
    except Exception as exc:  # noqa: BLE001 - a module that cannot be imported is broken
        print(f"BROKEN: the module does not import on Python {sys.version.split()[0]}: "
              f"{type(exc).__name__}: {exc}")
        return 1
    try:
        problem = fn(mod)
    except (Broken, AssertionError) as exc:
        problem = str(exc) or type(exc).__name__
    if problem:
        print(f"BROKEN: {problem}")
        return 1
    print("ok")
    return 0
