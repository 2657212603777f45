"""Pitfall: the caller's sockets closed on invalid input -- ownership taken too early.

The validation sits inside the try whose finally closes everything.  A call that is
rejected (say, two dials with the same name) still closes the caller's sockets, which the
caller rightly expects to keep using: run() only owns what it has accepted.
"""
import selectors
import time

from solutions.p02_cancel_control import *  # noqa: F401,F403 - the rest is the reference
from solutions.p02_cancel_control import DialResult, _outcome, _validate


def run(dials, control, timeout=None):
    results = {}
    sel = None
    try:
        _validate(dials, control, timeout)  # WRONG: inside the try that closes everything
        control._claim()
        deadline = None if timeout is None else time.monotonic() + timeout
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
        for d in dials:
            if hasattr(d, "sock"):
                d.sock.close()
        if hasattr(control, "close"):
            control.close()
