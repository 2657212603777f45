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

    A wakeup cycle runs from the put that schedules a wakeup to the moment the consumer
    gets ready to sleep again; at most one wakeup is scheduled per cycle.

    Attributes:
        wakeups_scheduled: starts at 0; +1 each time ``put`` schedules a wakeup
            (at most one per wakeup cycle).
        after_empty_drain: test hook, default None.  When set, ``get_batch`` calls it once
            it has found the queue empty, before the current wakeup cycle ends -- holding
            no lock, so the hook may call ``put`` (from any thread).  An item put by the
            hook is returned at once, and its put schedules no new wakeup.
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
        """Queue ``item``; callable from any thread, at any time, even while ``bind_loop``
        runs in another thread; never blocks on the consumer.

        Items of one producer come out in the order that producer put them.  Schedules a
        wakeup (through the bound loop's ``call_soon_threadsafe``, holding no lock while it
        calls) only if none is in flight, and counts it in ``wakeups_scheduled``.  A
        ``RuntimeError`` from a closed loop is ignored.
        """
        # TODO
        raise NotImplementedError("OutputSink.put")

    async def get_batch(self, max_items: int = 1024, timeout: float | None = None) -> list:
        """Return 1..max_items items, oldest first, as soon as any are available.

        Runs on the bound loop.  Returns ``[]`` only when ``timeout`` seconds pass with
        nothing available (``None``: wait forever; ``<= 0``: one non-blocking look).  The
        deadline is computed once, on entry: spurious wakeups neither end the wait early nor
        push it out.  An empty wait sleeps; it does not spin.  ``max_items < 1`` raises
        ``ValueError``.  Items beyond ``max_items`` stay queued and the next call returns
        them at once.
        """
        # TODO
        raise NotImplementedError("OutputSink.get_batch")
