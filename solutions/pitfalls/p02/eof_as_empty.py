"""Pitfall: EOF treated as "empty" -- recv() returning b'' is read as "nothing there".

EAGAIN means "nothing for now"; b'' means the other end is gone for good.  A socket at EOF
stays readable, so the loop wakes at once, drains "nothing", and spins forever.
"""
from solutions.p02_cancel_control import *  # noqa: F401,F403 - the rest is the reference
from solutions.p02_cancel_control import Control as _Reference


class Control(_Reference):
    def drain(self) -> int:
        try:
            data = self.reader.recv(4096)
        except BlockingIOError:
            return 0
        return len(data)  # WRONG: b'' (EOF) becomes 0, as if the channel were just empty
