"""P03 · BoundedBlockingQueue: one lock, two conditions.

Your file. Fill in every ``# TODO`` and remove the ``raise NotImplementedError`` lines.
Run ``./check.sh p03`` to see which checkpoints pass.

Rules of the exercise:
- Build it from ``threading`` primitives. No ready-made blocking queue underneath: not
  ``queue.Queue``, ``queue.SimpleQueue``, ``asyncio.Queue`` or a ``multiprocessing`` queue.
- A thread that has to wait sleeps until it is woken, with the lock released: it never
  spins, never polls, never sleeps while holding the lock. The checks judge this from
  behaviour (a waiting thread uses no CPU; other threads can still use the queue), not from
  which primitive you wait on.
- ``offer``, ``poll`` and ``shutdown`` are follow-up extensions. Leave them raising
  ``NotImplementedError`` until the core passes; they are then reported "not attempted".
"""

from __future__ import annotations

import threading  # noqa: F401  (you will need it)
import time  # noqa: F401  (for the offer/poll deadline)
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["BoundedBlockingQueue", "ShutDown"]


class ShutDown(Exception):
    """Raised by put/offer after shutdown(), and by take/poll once a shut-down queue is empty.

    (Extension. Nothing to change here.)
    """


class BoundedBlockingQueue(Generic[T]):
    """A FIFO queue holding at most ``capacity`` items, safe for many producers and consumers.

    ``put`` waits while the queue is full, ``take`` waits while it is empty. Items leave in
    the order their puts completed; none is lost, returned twice, or returned before an
    earlier one.
    """

    def __init__(self, capacity: int) -> None:
        """Create an empty queue.

        ``capacity`` must be an ``int`` greater than 0; ``bool`` is not accepted.
        Otherwise raise ``TypeError`` or ``ValueError`` (the usual split: ``TypeError``
        for a wrong type, ``ValueError`` for a value <= 0).
        """
        # TODO: validate capacity, then set up the state and what guards it. Write the
        #       invariants that tie your fields together as comments here.
        raise NotImplementedError("BoundedBlockingQueue.__init__")

    @property
    def capacity(self) -> int:
        """The maximum number of queued items (read-only)."""
        # TODO
        raise NotImplementedError("BoundedBlockingQueue.capacity")

    def __len__(self) -> int:
        """The number of items queued right now (a snapshot, read under the lock)."""
        # TODO
        raise NotImplementedError("BoundedBlockingQueue.__len__")

    def put(self, item: T) -> None:
        """Append ``item`` at the tail, waiting while the queue is full.

        ``None`` is rejected with ``TypeError`` (or ``ValueError``) before any locking:
        ``poll`` uses ``None`` to mean "no item".
        If an exception is raised while waiting (a signal handler interrupting the main
        thread, say), it propagates, the queue is left unchanged and the lock is released;
        no other waiting thread is left asleep because of it.
        """
        # TODO
        raise NotImplementedError("BoundedBlockingQueue.put")

    def take(self) -> T:
        """Remove and return the oldest item, waiting while the queue is empty.

        The queue keeps no reference to the item it returns. An exception raised while
        waiting propagates, as in ``put``, and nothing is taken.
        """
        # TODO
        raise NotImplementedError("BoundedBlockingQueue.take")

    # ---- extensions (follow-up questions), checked separately ----

    def offer(self, item: T, timeout: float | None = 0.0) -> bool:
        """Like ``put``, but give up after ``timeout`` seconds and return ``False``.

        ``timeout=0`` never blocks; ``None`` waits as long as it takes (then returns
        ``True``). Otherwise the call gives up ``timeout`` seconds after it started (by the
        monotonic clock), however often it is woken meanwhile. Return ``True`` once the item
        is queued. ``None`` is refused as in ``put``. After ``shutdown()`` raise ``ShutDown``.
        """
        # TODO (extension)
        raise NotImplementedError("BoundedBlockingQueue.offer")

    def poll(self, timeout: float | None = 0.0) -> T | None:
        """Like ``take``, but give up after ``timeout`` seconds and return ``None``.

        Same timeout rules as ``offer``. On a shut-down queue: return the remaining items,
        then raise ``ShutDown`` once it is empty.
        """
        # TODO (extension)
        raise NotImplementedError("BoundedBlockingQueue.poll")

    def shutdown(self, immediate: bool = False) -> None:
        """Shut the queue down, with the semantics of Python 3.13's ``queue.Queue.shutdown``.

        Afterwards ``put``/``offer`` raise ``ShutDown``; ``take``/``poll`` return the items
        still queued and raise ``ShutDown`` once the queue is empty. With
        ``immediate=True`` the queued items are discarded first. Every thread blocked in
        put/take/offer/poll must wake up and observe the new state.
        """
        # TODO (extension)
        raise NotImplementedError("BoundedBlockingQueue.shutdown")
