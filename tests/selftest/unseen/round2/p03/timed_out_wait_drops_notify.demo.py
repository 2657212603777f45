"""Demo for timed_out_wait_drops_notify.py (P03). Usage: .venv/bin/python tests/selftest/unseen/round2/p03/timed_out_wait_drops_notify.demo.py [FILE]
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


mod, path = load("timed_out_wait_drops_notify.py")
q = mod.BoundedBlockingQueue(1)
poller = spawn(q.poll, 0.3)
if not wait_until(lambda: parked(q) == 1):
    finish(2, "setup failed: poller did not park")
taker = spawn(q.take)
if not wait_until(lambda: parked(q) == 2):
    finish(2, "setup failed: taker did not park")
p_id = poller["thread"].ident

# The poller's timed wait expires; hold it before it retakes the lock, so that the put's
# notify() still finds it first in the wait-set (CPython removes a timed-out waiter only
# after it holds the lock again).
held, go = threading.Event(), threading.Event()
for c in conditions(q):
    orig = c._acquire_restore

    def gated(x, orig=orig):
        if threading.get_ident() == p_id and not go.is_set():
            held.set()
            go.wait(5)
        return orig(x)

    c._acquire_restore = gated

if not held.wait(3):
    finish(2, "setup failed: the poller's wait did not time out")
q.put("x")                      # notify() picks the first waiter: the (timed-out) poller
go.set()
poller["thread"].join(2)
taker["thread"].join(1.0)
pv, tv = poller.get("value"), taker.get("value")
if poller.get("done") and pv is None and not taker.get("done") and len(q) == 1:
    q.take()
    finish(1, "VIOLATION: the poller timed out with None although it was notified; the wake-up was "
              "spent and the parked taker sleeps on beside a queue holding 'x'")
if pv == "x" or tv == "x":
    if not taker.get("done"):
        q.put("release")
    finish(0, f"OK: 'x' was delivered (poll -> {pv!r}, take -> {tv if taker.get('done') else 'still waiting, queue empty'})")
finish(1, f"VIOLATION: unexpected outcome poll={poller}, take={taker}, len={len(q)}")
