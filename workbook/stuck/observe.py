"""One look at the process: for every thread that could make progress, what the kernel says
it is doing (``procfs``), turned into the plain data ``decide`` reads (``model``), with the
locks its learner lines hold or wait for (``frames``) and whether a sleeping selector or
asyncio loop has anything due."""
from __future__ import annotations

import select
import threading
import time
from typing import Any, Protocol

from workbook.stuck import frames as fr
from workbook.stuck.decide import classify
from workbook.stuck.model import Held, Snapshot, ThreadLook
from workbook.stuck.procfs import (SELECT_CALLS, children_alive, kernel_state,
                                   thread_cpu_seconds, thread_syscall)


class Session(Protocol):
    """What a look needs to know of the detector's session (``detector.Detector``)."""
    watchers: dict[int, float]
    watchers_lock: Any
    excluded: set[int]
    background: dict[int, threading.Thread]  # id(thread) -> thread, of earlier checks
    guards: set
    guards_lock: Any

    def is_learner(self, filename: str) -> bool: ...


def fds_ready(selector) -> bool:
    """True if an fd registered with ``selector`` is ready now (a wakeup is on its way)."""
    try:
        keys = list(selector.get_map().values())
    except Exception:  # noqa: BLE001 - a closed or foreign selector: cannot tell
        return True
    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    for key in keys:
        mask = (select.POLLIN if key.events & 1 else 0) | (select.POLLOUT if key.events & 2
                                                           else 0)
        try:
            poller.register(key.fd, mask)
        except (OSError, ValueError):
            continue
    try:
        return any(not ev & select.POLLNVAL for _, ev in poller.poll(0))
    except OSError:
        return True


def _locks(look: ThreadLook, session: Session) -> None:
    """Fill in the locks ``look``'s learner frames hold and, when parked, the one it waits
    to acquire: plain ids for ``decide``."""
    learner = session.is_learner
    look.held = tuple(Held(id(lock), text, first, fr.qualname(frame), frame, with_block)
                      for lock, text, frame, first, with_block in fr.held(look.frames, learner))
    if look.state == "parked":
        lock = fr.lock_waited(look.frames, learner)
        if lock is not None:
            look.waits_for = id(lock)
            look.waits_reentrant = "RLock" in type(lock).__name__


def look_at(thread: threading.Thread, frames: list, deadline: float,
            session: Session) -> ThreadLook:
    """One thread, at this moment."""
    cpu = thread_cpu_seconds(thread)
    kstate = kernel_state(thread)
    call = thread_syscall(thread)
    read_at = time.monotonic()
    inner = frames[0] if frames else None
    learner = next((f for f in frames if session.is_learner(f.f_code.co_filename)), None)
    look = ThreadLook(thread.ident, thread.name, cpu, kstate, call, "moving",
                      position=(id(inner.f_code) if inner else None,
                                inner.f_lineno if inner else None),
                      in_learner=learner is not None,
                      thread=thread, frames=frames, learner=learner, read_at=read_at)
    _classify(look, thread, frames, deadline, session)
    _locks(look, session)
    return look


def _classify(look: ThreadLook, thread: threading.Thread, frames: list, deadline: float,
              session: Session) -> None:
    selector = fr.selector_frame(frames)
    ready = False
    if selector is not None and look.kstate == "S" and look.syscall is not None \
            and look.syscall.name in SELECT_CALLS:
        # The selector object is the learner's own (its registered fds), never its locals.
        ready = fds_ready(selector.f_locals.get("self"))
        loop = fr.asyncio_loop(frames)
        if not ready and loop is not None and not getattr(loop, "_stopping", False):
            _classify_asyncio(look, loop, deadline, session)
            return
    look.state, look.detail = classify(
        look.kstate, look.syscall, selector=selector is not None, fds_ready=ready,
        began=getattr(thread, "began", None), deadline=deadline,
        harness_bound=fr.harness_bound(frames, session.is_learner),
        learner=look.learner is not None)


def _classify_asyncio(look: ThreadLook, loop, deadline: float, session: Session) -> None:
    look.loop, look.in_loop = loop, True
    try:
        ready = len(loop._ready)
        timers = [h for h in list(loop._scheduled) if not h.cancelled()]
        now_loop, now = loop.time(), time.monotonic()
    except Exception:  # noqa: BLE001 - not the asyncio we know
        look.loop_ready = bool(getattr(loop, "_ready", None))
        look.detail = "an event loop we cannot read"
        return
    look.loop_ready = ready
    with session.guards_lock:
        guard_handles = {id(g.handle) for g in session.guards if g.loop is loop}
    due = [h for h in timers if id(h) not in guard_handles
           and h.when() - now_loop + now < deadline]
    if ready:
        # asyncio never sleeps with callbacks ready (it selects with timeout 0 then): these
        # were queued from another thread without waking it.  Only an unrelated timer could
        # run them -- a lost wakeup, whatever timer may come.
        look.state = "asleep"
        look.guard_only = False
        look.detail = (f"{ready} callback(s) ready but the loop was not woken (queued from "
                       "another thread without call_soon_threadsafe?)")
        return
    if due:
        look.state = "timed"
        look.detail = f"a timer due in {max(0.0, due[0].when() - now_loop):.2f} s"
        return
    look.state = "asleep"
    look.guard_only = any(id(h) in guard_handles for h in timers)
    look.detail = ""


def take_snapshot(session: Session, me: int, deadline: float) -> Snapshot:
    """A look at every thread that could move (not the caller ``me``, the harness's own
    threads, other waits or threads of earlier checks), why the check could still move, and
    whether another bounded wait ends sooner."""
    stacks = fr.stacks()
    with session.watchers_lock:
        watchers = dict(session.watchers)
    sooner = any(ident != me and their_deadline < deadline and ident in stacks
                 for ident, their_deadline in watchers.items())
    why = "another bounded wait ends sooner" if sooner else ""
    looks = []
    for thread in threading.enumerate():
        ident = thread.ident
        if ident is None:
            # Started but not running yet (in threading's limbo, where ``start()`` waits for
            # it): it will run, so the check can still move.  Its parent, parked in
            # ``start()``, is not stuck -- on a loaded machine that wait can last seconds.
            why = why or f"thread '{thread.name}' is starting"
            continue
        if ident == me or ident in session.excluded or ident in watchers:
            continue
        if session.background.get(id(thread)) is thread:
            continue
        look = look_at(thread, stacks.get(ident, []), deadline, session)
        if look.state in ("moving", "timed") and not why:
            why = f"thread '{thread.name}': {look.detail or look.state}"
        looks.append(look)
    # Whether a child process is alive is read only when nothing else could move (the
    # detector reads it for a hog about to be called too): a look must stay cheap.
    children = not why and children_alive()
    if children:
        why = "a child process is alive"
    return Snapshot(looks, time.monotonic(), why, sooner, children)
