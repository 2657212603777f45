"""P01 · OutputSink — batched wakeups from producer threads into an asyncio loop.

Your task: make ``put`` (any thread, never blocks) and ``get_batch`` (the asyncio consumer)
work together so that a burst of puts costs one cross-thread wakeup, and no item is ever
left sitting in the queue while the consumer sleeps.

Run ``./check.sh p01`` to check, ``./check.sh hint p01`` when stuck,
``./check.sh book p01`` for the chapter.
"""
from __future__ import annotations

import asyncio
import collections
import threading
from typing import Callable


class OutputSink:
    """Items go in from any thread with ``put``; one asyncio consumer takes them in batches.

    Attributes:
        wakeups_scheduled: starts at 0; +1 each time ``put`` schedules a wakeup
            (at most one per wakeup cycle).
        after_empty_drain: test hook, default None.  When set, ``get_batch`` calls it after
            a drain found nothing and before it re-arms -- holding no lock.
    """

    def __init__(self) -> None:
        self._items: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self.wakeups_scheduled = 0
        self.after_empty_drain: Callable[[], None] | None = None
        # TODO: the "wakeup in flight" flag, the bound loop and the asyncio.Event.

    def bind_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Attach the consumer's loop and create the ``asyncio.Event`` here.

        With no argument, use ``asyncio.get_running_loop()``.  Wakeups go through the given
        object's ``call_soon_threadsafe`` (tests may pass a wrapper of the real loop).
        Items put before ``bind_loop`` simply wait in the queue.
        """
        # TODO
        raise NotImplementedError("OutputSink.bind_loop")

    def put(self, item: object) -> None:
        """Queue ``item`` from any thread; never blocks on the consumer.

        Append first.  Then, under the short lock: if no wakeup is in flight, mark one in
        flight and count it in ``wakeups_scheduled``.  Outside the lock, call
        ``loop.call_soon_threadsafe(event.set)``; ignore the ``RuntimeError`` of a closed loop.
        """
        # TODO
        raise NotImplementedError("OutputSink.put")

    async def get_batch(self, max_items: int = 1024, timeout: float | None = None) -> list:
        """Return 1..max_items items, oldest first, as soon as any are available.

        Returns ``[]`` only when ``timeout`` seconds pass with nothing available
        (``None``: wait forever; ``<= 0``: one non-blocking look).  The deadline is computed
        once, on entry.  ``max_items < 1`` raises ``ValueError``.  Items beyond ``max_items``
        stay queued and the next call returns them at once.

        The loop: (1) drain -> non-empty: return.  (hook) call ``after_empty_drain()`` if set.
        (2) arm: ``event.clear()`` and, under the lock, mark "no wakeup in flight".
        (3) drain again -> non-empty: return.  (4) wait for the event, bounded by what is left
        of the deadline; back to (1).  No ``await`` between (2) and (3).
        """
        # TODO
        raise NotImplementedError("OutputSink.get_batch")
