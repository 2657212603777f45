"""Pitfall: notify before state -- the byte goes out before the Event is set.

The loop can wake on the byte, drain it, look at the flag (still False) and go back to
sleep.  The Event set a moment later comes with no byte, so that cancel is lost.
"""
from solutions.p02_cancel_control import *  # noqa: F401,F403 - the rest is the reference
from solutions.p02_cancel_control import Control as _Reference


class Control(_Reference):
    def request_stop(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("request_stop() after run() has finished with this Control")
            try:
                self.writer.send(b"Q")  # WRONG: notification first ...
            except BlockingIOError:
                pass
            self._stop.set()            # ... state second
