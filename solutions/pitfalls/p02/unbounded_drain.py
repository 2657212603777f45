"""Pitfall: unbounded drain -- drain() reads until the channel is empty.

With requesters pressing faster than the loop reads, "until empty" may never come, and the
loop never gets back to the dials it is supposed to watch.  One bounded read per wakeup is
enough: what is left makes the next select() return at once.
"""
from solutions.p02_cancel_control import *  # noqa: F401,F403 - the rest is the reference
from solutions.p02_cancel_control import Control as _Reference


class Control(_Reference):
    def drain(self) -> int:
        total = 0
        while True:  # WRONG: no bound on how long this loop runs
            try:
                data = self.reader.recv(4096)
            except BlockingIOError:
                return total
            if not data:
                raise ConnectionError("control channel closed by the requesting side (EOF)")
            total += len(data)
