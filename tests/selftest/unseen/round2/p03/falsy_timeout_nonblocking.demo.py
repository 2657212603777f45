"""Demo for falsy_timeout_nonblocking.py (P03). Usage: .venv/bin/python tests/selftest/unseen/round2/p03/falsy_timeout_nonblocking.demo.py [FILE]
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


mod, path = load("falsy_timeout_nonblocking.py")
q = mod.BoundedBlockingQueue(1)
box = spawn(q.poll, None)       # None: wait as long as it takes
wait_until(lambda: box.get("done") or parked(q) >= 1)
if box.get("done"):
    finish(1, f"VIOLATION: poll(None) on an empty queue returned {box.get('value', box.get('error'))!r} "
              "at once instead of waiting")
q.put("x")
box["thread"].join(2)
if box.get("value") != "x":
    finish(1, f"VIOLATION: poll(None) then put('x'): poll gave {box.get('value', box.get('error'))!r}")
q2 = mod.BoundedBlockingQueue(1)
q2.put("a")
box2 = spawn(q2.offer, "b", None)
wait_until(lambda: box2.get("done") or parked(q2) >= 1)
if box2.get("done"):
    finish(1, f"VIOLATION: offer('b', None) on a full queue returned {box2.get('value')!r} at once")
q2.take()
box2["thread"].join(2)
if box2.get("value") is not True:
    finish(1, f"VIOLATION: offer('b', None) after a take returned {box2.get('value', box2.get('error'))!r}")
finish(0, "OK: poll(None) and offer(x, None) waited and then succeeded")
