"""Pitfall: request_stop() allowed after run() -- no lifecycle check.

Once run() has returned, the channel is closed and nobody will ever read a press.  Without
the check, a late press fails with whatever the closed socket happens to raise (EBADF), or,
in a race with close(), could even write into a descriptor number that now belongs to
another socket.
"""
from solutions.p02_cancel_control import *  # noqa: F401,F403 - the rest is the reference
from solutions.p02_cancel_control import Control as _Reference


class Control(_Reference):
    def request_stop(self) -> None:
        # WRONG: neither the lock nor the "closed" check.
        self._stop.set()
        try:
            self.writer.send(b"Q")
        except BlockingIOError:
            pass
