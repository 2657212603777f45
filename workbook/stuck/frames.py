"""What a thread is doing, read from its frames: the stacks of every thread taken safely,
and the locks a learner line holds or waits for, found from its source and its locals.

Frames only ever *explain*: the detector decides from the kernel's view (``procfs``), and
uses what is found here only to name a lock cycle or a lock kept from its waiters.  Learner
code is never run from here (no property, no ``__eq__``): it could block the detector.
"""
from __future__ import annotations

import ast
import gc
import inspect
import linecache
import os
import re
import sys
import threading
import types
from typing import Any, Callable

from workbook.stuck.code import is_harness, is_stdlib, shown, source_line

#: Whether a file is the learner's: every function below that looks for learner frames is
#: given the detector's own predicate.
IsLearner = Callable[[str], bool]

def stack_of(frame) -> list:
    """Frames innermost first."""
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


_stacks_lock = threading.Lock()  # one walk at a time: the switch interval is process-wide


def run_hooked(fn: Callable[..., Any], *args: Any, trace: Any = None,
               profile: Any = None) -> Any:
    """``fn(*args)`` with a ``sys.settrace`` or ``sys.setprofile`` hook installed in the calling
    thread; the hook it had is put back after."""
    install, previous = ((sys.settrace, sys.gettrace()) if trace is not None
                         else (sys.setprofile, sys.getprofile()))
    install(trace if trace is not None else profile)
    try:
        return fn(*args)
    finally:
        install(previous)


class NoCollection:
    """The garbage collector held off for a block.  On 3.11 an allocation may start a
    collection, and a collection may run finalizers that let go of the GIL (a socket's
    ``close()`` does) or take the runtime's thread-list lock.  Inside ``sys._current_frames``
    (which holds that lock) this deadlocks (CPython gh-106883; 3.11.7 has it); inside a
    frame walk it lets the thread being walked move on and free the frames still to be read
    (a segfault).  Both were seen here, in runs where threads and sockets end by the dozen."""

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()


def current_frames() -> dict[int, Any]:
    """``sys._current_frames()`` with no collection inside it (see ``NoCollection``)."""
    with _stacks_lock, NoCollection():  # the lock: no other block turns collection back on
        return sys._current_frames()


def stacks(only: "set[int] | None" = None) -> dict[int, list]:
    """Every live thread's frames, innermost first, walked in one go while no other thread
    can run Python code: the switch interval is raised and nothing in the walk lets go of
    the GIL (no collection, see ``NoCollection``).  A thread that has left ``threading``'s
    table of active threads is tearing itself down and is left out."""
    with _stacks_lock:
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1.0)
        try:
            with NoCollection():
                frames = sys._current_frames()
                active = set(threading._active)  # noqa: SLF001 - read with the frames
                return {ident: stack_of(frame) for ident, frame in frames.items()
                        if ident in active and (only is None or ident in only)}
        finally:
            sys.setswitchinterval(interval)


def qualname(frame) -> str:
    code = frame.f_code
    name = getattr(code, "co_qualname", None)
    if name is None:
        self_obj = frame.f_locals.get("self")
        name = f"{type(self_obj).__name__}.{code.co_name}" if self_obj is not None \
            else code.co_name
    return name


def site(frame) -> str:
    return f"{shown(frame.f_code.co_filename)}:{frame.f_lineno}"



_ast_cache: dict[str, Any] = {}
#: Serialises the detector's own ``ast.parse`` calls.  CPython 3.11 keeps the AST
#: constructor's recursion depth per interpreter, not per thread (gh-106905), so two parses
#: at once can raise ``SystemError: AST constructor recursion depth mismatch``.
_parse_lock = threading.Lock()


def parse(text: str, mode: str = "exec"):
    """``ast.parse`` that never lets CPython's cross-thread depth bookkeeping (another thread
    parsing at the same moment, e.g. pytest formatting a traceback) fail a check: it retries,
    then reports the text as unreadable (``SyntaxError``), and the detector explains less."""
    for _ in range(3):
        with _parse_lock:
            try:
                return ast.parse(text, mode=mode)
            except SystemError:
                continue
    raise SyntaxError("could not be parsed just now")


def with_blocks(filename: str) -> list:
    """Every ``with`` statement of a file: (first line, last line, [item source], body start)."""
    if filename in _ast_cache:
        return _ast_cache[filename]
    blocks = []
    try:
        with open(filename, encoding="utf-8") as f:
            tree = parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.With, ast.AsyncWith)) and node.body:
                blocks.append((node.lineno, node.end_lineno or node.lineno,
                               [item.context_expr for item in node.items],
                               node.body[0].lineno))
    except (OSError, SyntaxError, ValueError):
        pass
    _ast_cache[filename] = blocks
    return blocks


def evaluate(node, frame):
    """The object a simple expression (names and attributes only) stands for in ``frame``."""
    if isinstance(node, ast.Name):
        if node.id in frame.f_locals:
            return frame.f_locals[node.id]
        return frame.f_globals.get(node.id, MISSING)
    if isinstance(node, ast.Attribute):
        base = evaluate(node.value, frame)
        if base is MISSING:
            return MISSING
        # Never run learner code from here: a property that takes the learner's lock would
        # block the detector itself (and the bounded wait it runs in) for good.
        try:
            value = inspect.getattr_static(base, node.attr)
        except AttributeError:
            return MISSING
        if isinstance(value, types.MemberDescriptorType):  # a __slots__ member: read in C
            try:
                return value.__get__(base, type(base))
            except AttributeError:
                return MISSING
        if hasattr(type(value), "__get__") and not isinstance(value, type):
            return MISSING  # a property or another descriptor: only running it would tell
        return value
    return MISSING


MISSING = object()


def lock_of(obj):
    """The lock that really is taken when ``obj`` is entered (a Condition's own lock)."""
    inner = getattr(obj, "_lock", None) if isinstance(obj, threading.Condition) else None
    return inner if inner is not None else obj


def held(frames: list, is_learner: IsLearner) -> list[tuple[Any, str, Any, int, bool]]:
    """Locks this thread holds through ``with`` blocks of learner code and through
    ``X.acquire()`` calls not yet released, innermost frame first: (lock, its source text,
    the frame, the line that took it, whether a ``with`` block took it)."""
    out = []
    released = [lock_of(f.f_locals.get("self")) for f in frames
                if f.f_code is threading.Condition.wait.__code__]  # wait() let go of these
    for frame in frames:
        if not is_learner(frame.f_code.co_filename):
            continue
        line = frame.f_lineno
        for first, last, items, body in with_blocks(frame.f_code.co_filename):
            if body <= line <= last:  # inside the block, past the with line itself
                for expr in items:
                    obj = evaluate(expr, frame)
                    if obj is not MISSING and not any(lock_of(obj) is r for r in released):
                        out.append((lock_of(obj), ast.unparse(expr), frame, first, True))
        out += [(*found, False) for found in acquired(frame, released)]
    return out


def acquired(frame, released: list) -> list:
    """Locks taken with ``X.acquire()`` earlier in this frame's function and not yet
    released by ``X.release()`` (read from the source lines above the current one)."""
    net: dict[str, tuple[int, int]] = {}
    filename = frame.f_code.co_filename
    for lineno in range(frame.f_code.co_firstlineno, frame.f_lineno):
        text = linecache.getline(filename, lineno)
        for expr, verb in re.findall(r"([A-Za-z_][\w.]*)\.(acquire|release)\(\)", text):
            count, at = net.get(expr, (0, 0))
            net[expr] = (count + 1, lineno) if verb == "acquire" else (count - 1, at)
    out = []
    for expr, (count, at) in net.items():
        if count <= 0:
            continue
        try:
            obj = evaluate(parse(expr, mode="eval").body, frame)
        except SyntaxError:
            continue
        if obj is not MISSING and not any(lock_of(obj) is r for r in released):
            out.append((lock_of(obj), expr, frame, at))
    return out


def waited_object(frames: list, is_learner: IsLearner):
    """(object, its source text) the innermost learner line waits on, when it can be read."""
    inner = next((f for f in frames if is_learner(f.f_code.co_filename)), None)
    if inner is None:
        return MISSING, None
    # Innermost non-learner frame that is a method of a sync primitive: its ``self``.
    for frame in frames:
        if frame is inner:
            break
        obj = frame.f_locals.get("self")
        if isinstance(obj, (threading.Condition, threading.Semaphore, threading.Event,
                            threading.Barrier, threading.Thread)):
            text = expr_on_line(inner)
            return obj, text
    for first, last, items, body in with_blocks(inner.f_code.co_filename):
        if first == inner.f_lineno:
            for expr in items:
                obj = evaluate(expr, inner)
                if obj is not MISSING:
                    return obj, ast.unparse(expr)
    text = expr_on_line(inner)
    if text:
        try:
            obj = evaluate(parse(text, mode="eval").body, inner)
        except SyntaxError:
            obj = MISSING
        return obj, text
    return MISSING, None


def expr_on_line(frame) -> str | None:
    """``self._lock`` in ``self._lock.acquire()`` / ``self._cond.wait()`` on a frame's line."""
    text = source_line(frame.f_code.co_filename, frame.f_lineno)
    match = re.search(r"([A-Za-z_][\w.]*)\.(acquire|wait|wait_for|join|get|put|select)\(", text)
    if match:
        return match.group(1)
    match = re.match(r"(?:async\s+)?with\s+([A-Za-z_][\w.]*)", text)
    return match.group(1) if match else None


def kind(obj) -> str:
    if isinstance(obj, threading.Condition):
        return "a Condition"
    if isinstance(obj, threading.Semaphore):
        return "a Semaphore"
    if isinstance(obj, threading.Event):
        return "an Event"
    if isinstance(obj, threading.Thread):
        return f"thread '{obj.name}' to end"
    name = type(obj).__name__
    return {"lock": "a Lock", "RLock": "an RLock", "_RLock": "an RLock"}.get(name, f"a {name}")


def lock_waited(frames: list, is_learner: IsLearner):
    """The lock a parked learner line waits to acquire (``with lock:`` or ``lock.acquire()``
    on that line), or None: a Condition.wait, an Event or a join is not a lock wait."""
    obj, _text = waited_object(frames, is_learner)
    if obj is MISSING or isinstance(obj, (threading.Event, threading.Semaphore,
                                          threading.Barrier, threading.Thread)):
        return None
    inner = next((f for f in frames if is_learner(f.f_code.co_filename)), None)
    if inner is None or not any(first == inner.f_lineno for first, *_ in
                                with_blocks(inner.f_code.co_filename)) and \
            ".acquire(" not in source_line(inner.f_code.co_filename, inner.f_lineno):
        return None
    return lock_of(obj)


def selector_frame(frames: list):
    """The innermost frame when it is a ``selectors`` ``select()``, else None."""
    if frames and frames[0].f_code.co_name == "select" and \
            frames[0].f_code.co_filename.endswith("selectors.py"):
        return frames[0]
    return None


def asyncio_loop(frames: list):
    """The asyncio loop whose ``_run_once`` is on this stack, if any."""
    for frame in frames:
        if frame.f_code.co_name == "_run_once" and \
                frame.f_code.co_filename.endswith(os.path.join("asyncio", "base_events.py")):
            return frame.f_locals.get("self")
    return None


def harness_bound(frames: list, is_learner: IsLearner) -> bool:
    """A timed wait in a threading primitive, called from harness code (a test's own bound
    such as ``event.wait(BOUND)``): its end is a deadline, not progress."""
    if not frames or not frames[0].f_code.co_filename.endswith("threading.py"):
        return False
    for frame in frames:
        filename = frame.f_code.co_filename
        if is_stdlib(filename):
            continue
        return is_harness(filename) and not is_learner(filename)
    return False
