"""Demo for remove_timeout_breaks_heap.py (P04). Usage: .venv/bin/python tests/selftest/unseen/round2/p04/remove_timeout_breaks_heap.demo.py [FILE]
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


mod, path = load("remove_timeout_breaks_heap.py")
loop = mod.IOLoop()
order = []


def setup():
    handles = {}
    for ms in (10, 50, 20, 60, 70, 30, 40):
        handles[ms] = loop.call_later(ms / 1000, order.append, ms)
    loop.remove_timeout(handles[10])
    loop.call_later(0.3, loop.stop)


loop.add_callback(setup)          # the heap must hold exactly these entries, in this order
loop.start()
loop.close()
if order != [20, 30, 40, 50, 60, 70]:
    finish(1, f"VIOLATION: timeouts at 10..70 ms with the 10 ms one removed fired in the order {order}")
finish(0, f"OK: timeouts fired in deadline order {order}, the removed one never")
