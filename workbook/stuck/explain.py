"""The verdict's text: per learner thread where it is blocked, on what, who holds it, and
where it entered learner code; then what the problem's own hooks add."""
from __future__ import annotations

import threading
from typing import Callable, Iterable

from workbook.stuck import frames as fr
from workbook.stuck.code import code_only, is_kit, is_stdlib
from workbook.stuck.decide import deadlocked
from workbook.stuck.model import Snapshot, ThreadLook, Verdict
from workbook.stuck.procfs import SLEEP_CALLS

Hook = Callable[[Snapshot], list]


def diagnose(snap: Snapshot, what: str, *, is_learner: Callable[[str], bool],
             hooks: Iterable[Hook] = (), header: str = "") -> Verdict:
    """The panel text of a stuck check, and the learner lines that are its cause."""
    looks = snap.learner_threads()
    certain = deadlocked(snap) is not None
    # Locks taken by a bare acquire() count for naming the root cause, not for certainty.
    dead = deadlocked(snap, with_only=False)
    lines = [f"{what}: stuck -- " + (f"{header}:" if header else
                                     "every thread is blocked and nothing can wake one:")]
    sites = []
    for look in looks:
        lines += _describe(look, looks, is_learner)
        if look.learner is not None:
            sites.append(fr.site(look.learner))
    for hook in list(hooks):
        try:
            lines += [str(x) for x in hook(snap)]
        except Exception:  # noqa: BLE001 - an explanation must not break the verdict
            continue
    if len(lines) == 1:
        lines.append("  (no thread is inside the learner file: the threads wait for each other "
                     "in the harness)")
    if dead is not None:  # the root cause is the lock cycle, whoever else waits on it
        sites = [fr.site(look.learner) for look in dead.looks
                 if look.learner is not None and look.ident in dead.cycle]
    return Verdict(what, lines, tuple(sorted(set(sites))), cycle=certain)


def _describe(look: ThreadLook, looks: list[ThreadLook], is_learner) -> list[str]:
    name = look.name
    inner = look.learner
    if look.in_loop and inner is None:
        text = f"  thread '{name}': the event loop is asleep in select()"
        extra = [look.detail] if look.detail else []
        extra.append("no timer is due and no fd is ready: nothing will wake it")
        return [text + "; " + "; ".join(extra)]
    if inner is None:
        return []
    src = code_only(inner.f_code.co_filename, inner.f_lineno)
    verb = "is in" if look.state in ("moving", "timed") else "is blocked in"
    out = [f"  thread '{name}' {verb} {fr.qualname(inner)}() at {fr.site(inner)}: `{src}`"]
    if look.state == "asleep":
        out.append("    asleep in select(): no timer is due and no fd is ready"
                   + (f"; {look.detail}" if look.detail else ""))
    obj, text = fr.waited_object(look.frames, is_learner)
    if obj is not fr.MISSING and text:
        lock = id(fr.lock_of(obj))
        holders = []
        for other in looks:
            for h in other.held:
                if h.lock == lock:
                    who = "this same thread" if other is look else f"thread '{other.name}'"
                    holders.append(f"{who} took at line {h.first} in {h.where}()"
                                   f" (`{code_only(h.owner.f_code.co_filename, h.first)}`)")
        notified = any(f.f_code is threading.Condition.wait.__code__ for f in look.frames)
        if notified:
            line = f"    waits for a notify on `{text}` ({fr.kind(obj)})"
            line += (": its lock is held by " + "; and ".join(holders)
                     if holders else ", which no running thread will send")
        else:
            line = f"    waits for `{text}` ({fr.kind(obj)})"
            if holders:
                line += ", which " + "; and which ".join(holders)
        out.append(line)
    learner = [i for i, f in enumerate(look.frames) if is_learner(f.f_code.co_filename)]
    entry = look.frames[learner[-1]]
    caller = next((f for f in look.frames[learner[-1] + 1:]  # the list, never f_back again
                   if not is_stdlib(f.f_code.co_filename) and not is_kit(f.f_code.co_filename)),
                  None)
    came = (f", called from {fr.site(caller)}" if caller is not None
            else ", in a thread the test started")
    out.append(f"    entered learner code in {fr.qualname(entry)}() (line "
               f"{entry.f_code.co_firstlineno}){came}")
    return out


# -- threads that are slow, not stuck -------------------------------------------------------


def asleep_in_sleep(look: ThreadLook) -> bool:
    """The kernel says ``look``'s thread is in a sleep that ends by itself, at a learner line."""
    return (look.syscall is not None and look.syscall.name in SLEEP_CALLS
            and look.learner is not None)


def sleep_seconds(frame) -> float | None:
    """The seconds the ``sleep(...)`` call on ``frame``'s line asks for, when its argument
    is a number or a plain name holding one (read, never run: no learner code is called)."""
    import ast
    text = code_only(frame.f_code.co_filename, frame.f_lineno)
    try:
        tree = fr.parse(text.strip())
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or len(node.args) != 1:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name != "sleep":
            continue
        arg = node.args[0]
        value = arg.value if isinstance(arg, ast.Constant) else fr.evaluate(arg, frame)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return None


def slow_sentence(threads: list[tuple[str, int, int]], site: str,
                  seconds: float | None) -> str:
    """Threads (name, looks asleep, looks) that spent most of a wait in ``time.sleep`` at
    one learner line: slow, not stuck."""
    filename, _, line = site.rpartition(":")
    src = code_only(filename, int(line))
    each = f"; each call there takes ≥ {seconds * 1e3:.0f} ms" if seconds else ""
    seen, looks = sum(t[1] for t in threads), sum(t[2] for t in threads)
    names = ", ".join(f"'{name}'" for name, _, _ in threads)
    who = f"thread {names} is" if len(threads) == 1 else f"threads {names} are"
    return (f"{who} slow, not stuck: asleep in time.sleep at {site}: `{src}` at {seen} of "
            f"{looks} looks{each}")


def gil_sentence(name: str, site: str, used: float, elapsed: float, holder: str,
                 held: float, holder_site: str | None) -> str:
    """A thread that waited for the GIL through most of a wait, and who held it."""
    filename, _, line = site.rpartition(":")
    where = ""
    if holder_site is not None:
        hfile, _, hline = holder_site.rpartition(":")
        where = f", mostly at {holder_site}: `{code_only(hfile, int(hline))}`"
    return (f"thread '{name}' was waiting for the GIL at {site}: "
            f"`{code_only(filename, int(line))}`: ready to run Python but given "
            f"{used:.2f} s of CPU in {elapsed:.1f} s, while thread '{holder}' kept the "
            f"interpreter ({held:.1f} s of CPU{where}; a long call that never lets the GIL go "
            "starves every other thread)")
