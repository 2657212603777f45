"""Demo for offer_deadline_checked_before_room.py (P03). Usage: .venv/bin/python tests/selftest/unseen/round2/p03/offer_deadline_checked_before_room.demo.py [FILE]
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


mod, path = load("offer_deadline_checked_before_room.py")
q = mod.BoundedBlockingQueue(2)
ok = q.offer("a")               # timeout=0 on an empty queue: must succeed
if ok is not True:
    finish(1, f"VIOLATION: offer('a') with timeout=0 on an empty queue of capacity 2 returned {ok!r}")
got = q.poll()
if got != "a":
    finish(1, f"VIOLATION: poll() with timeout=0 on a queue holding 'a' returned {got!r}")
finish(0, "OK: non-blocking offer on a queue with room succeeded; poll() returned it")
