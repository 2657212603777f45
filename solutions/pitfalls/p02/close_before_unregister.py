"""Pitfall: close before unregister -- sockets are closed first, unregistered afterwards.

After close() the descriptor number is free; the kernel may hand it to the next socket the
process opens while the selector still has the old entry under that number.  The selectors
documentation asks for unregister() first, then close().
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
                    key.data.sock.close()          # WRONG: closed ...
                    sel.unregister(key.data.sock)  # ... then unregistered
            if deadline is not None and time.monotonic() >= deadline:
                break
        unfinished = "cancelled" if control.stop_requested else "timeout"
        return [results.get(d.name) or DialResult(d.name, unfinished) for d in dials]
    finally:
        for d in dials:          # WRONG: every socket closed first ...
            d.sock.close()
        control.close()
        if sel is not None:      # ... and only then unregistered
            for key in list(sel.get_map().values()):
                sel.unregister(key.fileobj)
            sel.close()
