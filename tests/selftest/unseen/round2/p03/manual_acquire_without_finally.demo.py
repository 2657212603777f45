"""Demo for manual_acquire_without_finally.py (P03). Usage: .venv/bin/python tests/selftest/unseen/round2/p03/manual_acquire_without_finally.demo.py [FILE]
Exit 1 + VIOLATION on the wrong file, exit 0 + OK on the reference.
"""
import importlib.util
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def load(default_name):
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, default_name)
    spec = importlib.util.spec_from_file_location("learner_p03_under_demo", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod, path


def finish(code, msg):
    print(msg, flush=True)
    os._exit(code)  # daemon helpers may still be parked on purpose


def wait_until(pred, timeout=2.0):
    """Poll a predicate (bounded); never used as proof by itself."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.002)
    return pred()


def conditions(q):
    return [v for v in vars(q).values() if isinstance(v, threading.Condition)]


def parked(q):
    """Threads registered as waiters in the queue's Conditions (CPython's Condition._waiters)."""
    return sum(len(c._waiters) for c in conditions(q))


def spawn(fn, *args):
    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001
            box["error"] = e
        box["done"] = True

    t = threading.Thread(target=run, daemon=True)
    t.start()
    box["thread"] = t
    return box


import signal

mod, path = load("manual_acquire_without_finally.py")


class Interrupted(Exception):
    pass


ran = threading.Event()


def handler(signum, frame):
    if not ran.is_set():        # raise once; a second pending signal is ignored
        ran.set()
        raise Interrupted()


signal.signal(signal.SIGUSR1, handler)
q = mod.BoundedBlockingQueue(1)
main_id = threading.get_ident()


def interrupter():
    if not wait_until(lambda: parked(q) >= 1, 3):
        return
    while not ran.is_set():
        signal.pthread_kill(main_id, signal.SIGUSR1)
        ran.wait(0.05)


threading.Thread(target=interrupter, daemon=True).start()
try:
    got = q.take()              # main thread parks on the empty queue
    finish(2, f"setup failed: take returned {got!r}")
except Interrupted:
    pass
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
box = spawn(lambda: (q.put("x"), q.take(), len(q)))
box["thread"].join(1.5)
if not box.get("done"):
    finish(1, "VIOLATION: after an interrupted take(), put/take/len from another thread block: "
              "the lock was left held")
if "error" in box:
    finish(1, f"VIOLATION: queue unusable after the interrupt: {box['error']!r}")
finish(0, "OK: the interrupt propagated out of take(), the queue is usable from another thread")
