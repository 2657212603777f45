"""Test doubles for P01: a stand-in for the loop handed to ``bind_loop``."""
from __future__ import annotations

import threading
from typing import Any, Callable


class LoopWrapper:
    """Passed to ``bind_loop`` in place of the real loop.

    Counts ``call_soon_threadsafe`` calls, remembers the first callback (so a test can
    deliver spurious wakeups with it), and can pause the producer right after forwarding a
    wakeup (``after_forward``) to force an interleaving.  Everything else goes to the loop.
    """

    def __init__(self, loop) -> None:
        self._loop = loop
        self._lock = threading.Lock()  # guards calls and first_callback
        self.calls = 0
        self.first_callback: tuple[Callable[..., Any], tuple] | None = None
        self.after_forward: Callable[[], None] | None = None

    def call_soon_threadsafe(self, callback, *args, **kwargs):
        with self._lock:
            self.calls += 1
            if self.first_callback is None:
                self.first_callback = (callback, args)
        handle = self._loop.call_soon_threadsafe(callback, *args, **kwargs)
        if self.after_forward is not None:
            self.after_forward()
        return handle

    def spurious_wakeup(self) -> None:
        """Deliver the remembered wakeup callback once more, with nothing new queued."""
        callback, args = self.first_callback
        self._loop.call_soon_threadsafe(callback, *args)

    def __getattr__(self, name: str):
        return getattr(self._loop, name)


def lost_wakeup_pitfall(sink, wrapper: LoopWrapper, default: str | None) -> tuple[str | None, str]:
    """Name the likely cause when a consumer slept through a put from another thread."""
    if wrapper.calls == 0 and sink.wakeups_scheduled > 0:
        return "set_from_producer", (
            f"wakeups_scheduled is {sink.wakeups_scheduled} but the bound loop's "
            "call_soon_threadsafe was never called: setting the event from the producer "
            "thread does not wake a loop that sleeps in select()")
    if wrapper.calls == 0:
        return "asyncio_queue", (
            "put() never called the bound loop's call_soon_threadsafe, so nothing woke the "
            "loop sleeping in select() (asyncio objects are not thread-safe)")
    return default, (f"call_soon_threadsafe was called {wrapper.calls} time(s), "
                     f"wakeups_scheduled is {sink.wakeups_scheduled}")
