"""Demo for due_timeouts_after_callbacks.py (P04). Usage: .venv/bin/python tests/selftest/unseen/round2/p04/due_timeouts_after_callbacks.demo.py [FILE]
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
    spec = importlib.util.spec_from_file_location("learner_p04_under_demo", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod, path


def finish(code, msg):
    print(msg, flush=True)
    os._exit(code)  # a loop thread may still be asleep on purpose


def run_loop_in_main(loop, setup, limit=3.0):
    """Queue setup, plus a safety stop after `limit` seconds, and run the loop in this thread."""
    def arm():
        loop.call_later(limit, loop.stop)
        setup()
    loop.add_callback(arm)
    loop.start()


mod, path = load("due_timeouts_after_callbacks.py")
loop = mod.IOLoop()
order = []


def a():
    order.append("A")
    loop.call_later(0, order.append, "T")   # due now, but not when this turn began
    loop.add_callback(order.append, "C")
    loop.call_later(0.1, loop.stop)


run_loop_in_main(loop, lambda: loop.add_callback(a))
loop.close()
if order != ["A", "C", "T"]:
    finish(1, f"VIOLATION: a callback's call_later(0) ran in the same turn: order {order} "
              "(expected A, then C and T on the next turn)")
finish(0, f"OK: order {order}")
