"""Pitfall: blocking control sockets -- socketpair() ends are left in blocking mode.

Each press adds a byte.  If the loop is busy (or gone), the buffer fills up and the next
send() blocks the requesting thread -- the UI freezes on its own Cancel button.  On the
loop side a blocking recv() could sleep outside select().
"""
import socket
import threading

from solutions.p02_cancel_control import *  # noqa: F401,F403 - the rest is the reference
from solutions.p02_cancel_control import Control as _Reference


class Control(_Reference):
    def __init__(self) -> None:
        self.reader, self.writer = socket.socketpair()
        # WRONG: no setblocking(False) on either end.
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._claimed = False
        self._closed = False
