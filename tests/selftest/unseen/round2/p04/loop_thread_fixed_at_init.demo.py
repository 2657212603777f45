"""Demo for loop_thread_fixed_at_init.py (P04). Usage: .venv/bin/python tests/selftest/unseen/round2/p04/loop_thread_fixed_at_init.demo.py [FILE]
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


mod, path = load("loop_thread_fixed_at_init.py")
loop = mod.IOLoop()               # made on the main thread ...
asleep = threading.Event()
orig_select = loop._selector.select


def select(timeout=None):
    if timeout is None:           # about to sleep with nothing to do
        asleep.set()
    return orig_select(timeout)


loop._selector.select = select
worker = threading.Thread(target=loop.start, daemon=True)   # ... and run on another
worker.start()
if not asleep.wait(3):
    finish(2, "setup failed: the loop never went to sleep")
before = loop.wakeups_scheduled
loop.add_callback(loop.stop)      # the way another thread stops a loop
worker.join(2.0)
if worker.is_alive():
    finish(1, "VIOLATION: add_callback(loop.stop) from the main thread did not wake the loop running "
              f"on another thread (wakeups_scheduled {before} -> {loop.wakeups_scheduled}); it sleeps on")
if loop.wakeups_scheduled != before + 1:
    finish(1, f"VIOLATION: expected one waker write, wakeups_scheduled {before} -> {loop.wakeups_scheduled}")
loop.close()
finish(0, "OK: the sleeping loop on the worker thread woke for main's add_callback and stopped")
