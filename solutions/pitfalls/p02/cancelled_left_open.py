"""Pitfall: cancelled dials left open -- only finished dials are ever closed.

The loop closes each socket when its connect finishes and reasons that this covers
everything.  On a cancel (or a deadline) the unfinished dials are labelled and returned,
but their sockets stay open: run() owned them and nobody else will close them.
"""
import selectors
import time

from solutions.p02_cancel_control import *  # noqa: F401,F403 - the rest is the reference
from solutions.p02_cancel_control import DialResult, _outcome, _validate


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
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
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
        # WRONG: no "close every dial socket" here -- the unfinished ones stay open.
        control.close()
