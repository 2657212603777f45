"""Pitfall: cancelled dials mislabelled -- every early exit is reported as "timeout".

The UI then tells the user the endpoints were too slow, when in fact the user pressed
Cancel.  "cancelled" is its own outcome: the dial was not given the chance to finish.
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
        # WRONG: a cancel and a deadline are reported the same way.
        return [results.get(d.name) or DialResult(d.name, "timeout") for d in dials]
    finally:
        if sel is not None:
            for key in list(sel.get_map().values()):
                sel.unregister(key.fileobj)
            sel.close()
        for d in dials:
            d.sock.close()
        control.close()
