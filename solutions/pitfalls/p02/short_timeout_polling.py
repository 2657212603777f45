"""Pitfall: short-timeout polling -- select() wakes every 50 ms to look at the flag.

Cancel feels quick, but an idle loop now wakes twenty times a second for nothing, on every
machine that runs the tool, forever.  A wait with no timeout wakes only when something is
ready; the control byte makes "cancel" one of those things.
"""
import selectors
import time

from solutions.p02_cancel_control import *  # noqa: F401,F403 - the rest is the reference
from solutions.p02_cancel_control import DialResult, _outcome, _validate

POLL = 0.05


def run(dials, control, timeout=None):
    _validate(dials, control, timeout)
    control._claim()
    deadline = None if timeout is None else time.monotonic() + timeout
    results = {}
    sel = None
    try:
        sel = selectors.DefaultSelector()
        sel.register(control.reader, selectors.EVENT_READ, None)
        for d in dials:
            sel.register(d.sock, selectors.EVENT_WRITE, d)
        while len(results) < len(dials) and not control.stop_requested:
            # WRONG: never sleep longer than POLL, "to notice the flag in time".
            wait = POLL if deadline is None else min(POLL, max(0.0, deadline - time.monotonic()))
            for key, _ in sel.select(wait):
                if key.data is None:
                    control.drain()
                else:
                    results[key.data.name] = _outcome(key.data)
                    sel.unregister(key.data.sock)
                    key.data.sock.close()
            if deadline is not None and time.monotonic() >= deadline:
                break
        unfinished = "cancelled" if control.stop_requested else "timeout"
        return [results.get(d.name) or DialResult(d.name, unfinished) for d in dials]
    finally:
        if sel is not None:
            for key in list(sel.get_map().values()):
                sel.unregister(key.fileobj)
            sel.close()
        for d in dials:
            d.sock.close()
        control.close()
