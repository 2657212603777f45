"""P01, another correct style: closures, no threading.Lock, no asyncio.Event.

The methods are closures over local state made in __init__.  "No wakeup in flight" is the
presence of a single token in a deque: the producer that pops it (deque.pop is atomic)
owns the cycle, counts it and schedules the wakeup; the consumer puts the token back when
it arms.  The loop side rings by putting None in an asyncio.Queue that only the loop thread
touches; arming empties that queue first.  Deadlines use time.monotonic().
"""
import asyncio
import collections
import time


class OutputSink:
    def __init__(self):
        items = collections.deque()
        token = collections.deque([True], maxlen=1)  # present: no wakeup in flight
        scheduled = collections.deque()  # one entry per wakeup scheduled (atomic appends)
        bound = None  # (loop object, bell queue), published in one store
        self.after_empty_drain = None
        self._scheduled = scheduled

        def bind_loop(loop=None):
            nonlocal bound
            loop = loop if loop is not None else asyncio.get_running_loop()
            bound = (loop, asyncio.Queue())

        def put(item):
            items.append(item)
            target = bound
            if target is None:
                return
            try:
                token.pop()
            except IndexError:
                return  # someone else's wakeup is in flight
            scheduled.append(None)
            loop, bell = target
            try:
                loop.call_soon_threadsafe(bell.put_nowait, None)
            except RuntimeError:
                pass

        def take(n):
            out = []
            while len(out) < n:
                try:
                    out.append(items.popleft())
                except IndexError:
                    break
            return out

        async def get_batch(max_items=1024, timeout=None):
            if max_items < 1:
                raise ValueError("max_items must be >= 1")
            _, bell = bound
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                batch = take(max_items)
                if batch:
                    return batch
                if self.after_empty_drain is not None:
                    self.after_empty_drain()
                while not bell.empty():  # arm: forget rings of cycles gone by ...
                    bell.get_nowait()
                token.append(True)  # ... then let the next put ring again
                batch = take(max_items)
                if batch:
                    return batch
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return []
                try:
                    await asyncio.wait_for(bell.get(), left)
                except asyncio.TimeoutError:
                    pass

        self.bind_loop, self.put, self.get_batch = bind_loop, put, get_batch

    @property
    def wakeups_scheduled(self):
        return len(self._scheduled)
