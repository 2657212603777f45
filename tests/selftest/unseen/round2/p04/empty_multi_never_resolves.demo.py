"""Demo for empty_multi_never_resolves.py (P04). Usage: .venv/bin/python tests/selftest/unseen/round2/p04/empty_multi_never_resolves.demo.py [FILE]
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


mod, path = load("empty_multi_never_resolves.py")


@mod.coroutine
def main():
    r = yield []
    d = yield {}
    return r, d


loop = mod.IOLoop()
try:
    res = loop.run_sync(main, timeout=1.0)
except TimeoutError:
    finish(1, "VIOLATION: `yield []` / `yield {}` never resumed the coroutine (run_sync timed out)")
finally:
    loop.close()
if res != ([], {}):
    finish(1, f"VIOLATION: yield [] / yield {{}} gave {res!r}")
finish(0, "OK: yield [] -> [], yield {} -> {}")
