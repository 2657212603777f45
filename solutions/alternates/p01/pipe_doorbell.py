"""P01, another correct style: the doorbell is a byte in a pipe the loop watches (raw fds).

No asyncio.Event and no wait_for.  The wakeup that put() schedules writes one byte into a
non-blocking pipe, on the loop thread; while the consumer sleeps, a reader callback for
that pipe resolves the Future it sleeps on.  Arming empties the pipe.  One timer per sleep,
set at the deadline computed on entry, ends the wait.
"""
import asyncio
import collections
import os
import threading
import weakref


def _close(*fds):
    for fd in fds:
        os.close(fd)


class OutputSink:
    def __init__(self):
        self._items = collections.deque()
        self._lock = threading.Lock()  # guards _ringing, wakeups_scheduled and _loop
        self._ringing = False  # a wakeup is in flight
        self.wakeups_scheduled = 0
        self.after_empty_drain = None
        self._loop = None
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        weakref.finalize(self, _close, self._rfd, self._wfd)

    def bind_loop(self, loop=None):
        loop = loop if loop is not None else asyncio.get_running_loop()
        with self._lock:
            self._loop = loop  # the only thing put() needs: one store

    def _ring(self):  # on the loop thread
        try:
            os.write(self._wfd, b"\0")
        except BlockingIOError:  # the pipe is full: it is ringing already
            pass

    def _silence(self):  # on the loop thread: arm
        try:
            while os.read(self._rfd, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            self._ringing = False

    def put(self, item):
        self._items.append(item)
        with self._lock:
            loop = self._loop
            if self._ringing or loop is None:
                return
            self._ringing = True
            self.wakeups_scheduled += 1
        try:
            loop.call_soon_threadsafe(self._ring)
        except RuntimeError:
            pass

    def _take(self, n):
        out = []
        while self._items and len(out) < n:
            out.append(self._items.popleft())
        return out

    async def _sleep(self, loop, deadline):
        woken = loop.create_future()

        def wake():
            if not woken.done():
                woken.set_result(None)

        loop.add_reader(self._rfd, wake)
        timer = None if deadline is None else loop.call_at(deadline, wake)
        try:
            await woken
        finally:
            loop.remove_reader(self._rfd)
            if timer is not None:
                timer.cancel()

    async def get_batch(self, max_items=1024, timeout=None):
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            batch = self._take(max_items)
            if batch:
                return batch
            if self.after_empty_drain is not None:
                self.after_empty_drain()
            self._silence()
            batch = self._take(max_items)
            if batch:
                return batch
            if deadline is not None and loop.time() >= deadline:
                return []
            await self._sleep(loop, deadline)
