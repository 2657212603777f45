"""Demo for return_before_first_yield_is_error.py (P04). Usage: .venv/bin/python tests/selftest/unseen/round2/p04/return_before_first_yield_is_error.demo.py [FILE]
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


mod, path = load("return_before_first_yield_is_error.py")
cache = {"k": 42}


@mod.coroutine
def get(key):
    if key in cache:
        raise mod.Return(cache[key])   # cache hit: done before the first yield
    yield mod.moment
    return None


f = get("k")
if not f.done():
    finish(1, "VIOLATION: a coroutine that raised Return before its first yield is not done")
if f.exception() is not None:
    finish(1, f"VIOLATION: raise Return(42) before the first yield failed the Future with {f.exception()!r}")
if f.result() != 42:
    finish(1, f"VIOLATION: result {f.result()!r} instead of 42")
finish(0, "OK: raise Return(42) before the first yield -> result 42")
