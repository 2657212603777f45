"""Demo for notify_only_when_was_empty.py (P03). Usage: .venv/bin/python tests/selftest/unseen/round2/p03/notify_only_when_was_empty.demo.py [FILE]
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


mod, path = load("notify_only_when_was_empty.py")
q = mod.BoundedBlockingQueue(2)
t1 = spawn(q.take)
if not wait_until(lambda: parked(q) == 1):
    finish(2, "setup failed: T1 did not park")
t2 = spawn(q.take)
if not wait_until(lambda: parked(q) == 2):
    finish(2, "setup failed: T2 did not park")

# Hold the first thread that is woken "at the door": after its wait returned, before it retakes
# the lock (Condition.wait calls self._acquire_restore for a plain Lock).
held, go = threading.Event(), threading.Event()
state = {"armed": True}
for c in conditions(q):
    orig = c._acquire_restore

    def gated(x, orig=orig):
        if state["armed"]:
            state["armed"] = False
            held.set()
            go.wait(5)
        return orig(x)

    c._acquire_restore = gated

q.put("a")                      # notifies one taker (T1), which stops at the door
if not held.wait(2):
    finish(2, "setup failed: nobody was woken by put('a')")
q.put("b")                      # the woken taker has not run yet: queue holds a, b
go.set()
t1["thread"].join(2); t2["thread"].join(2)
got = sorted(str(b.get("value")) for b in (t1, t2) if b.get("done"))
if got != ["a", "b"]:
    left = len(q)
    finish(1, f"VIOLATION: two parked takers, two puts; takers got {got}, one taker still asleep "
              f"with {left} item(s) queued")
finish(0, "OK: both parked takers got an item (a, b)")
