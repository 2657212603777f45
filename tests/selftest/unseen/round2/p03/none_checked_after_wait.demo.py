"""Demo for none_checked_after_wait.py (P03). Usage: .venv/bin/python tests/selftest/unseen/round2/p03/none_checked_after_wait.demo.py [FILE]
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


mod, path = load("none_checked_after_wait.py")
q = mod.BoundedBlockingQueue(1)
q.put("a")                      # full
box = spawn(q.put, None)        # must raise at once, before any locking/waiting
box["thread"].join(1.0)
if not box.get("done"):
    n = parked(q)
    q.take()                    # free the slot so the helper can finish
    box["thread"].join(1.0)
    finish(1, f"VIOLATION: put(None) on a full queue parked ({n} waiter(s)) instead of raising; "
              f"after a take it ended with {type(box.get('error')).__name__}")
if not isinstance(box.get("error"), (TypeError, ValueError)):
    finish(1, f"VIOLATION: put(None) on a full queue gave {box.get('error', box.get('value'))!r}")
finish(0, f"OK: put(None) on a full queue raised {type(box['error']).__name__} at once")
