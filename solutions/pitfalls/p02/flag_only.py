"""Pitfall: flag only -- request_stop() records the state but sends no notification.

The Event is set, but the loop is asleep inside select(), waiting for sockets.  Nothing it
watches becomes ready, so it never runs the line that would read the flag: the Cancel
button "does nothing" until some dial happens to finish.
"""
from solutions.p02_cancel_control import *  # noqa: F401,F403 - the rest is the reference
from solutions.p02_cancel_control import Control as _Reference


class Control(_Reference):
    def request_stop(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("request_stop() after run() has finished with this Control")
            self._stop.set()
            # WRONG: no byte on the writer, so nothing wakes the select() of the loop.
