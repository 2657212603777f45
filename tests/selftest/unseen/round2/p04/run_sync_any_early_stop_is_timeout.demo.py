"""Demo for run_sync_any_early_stop_is_timeout.py (P04). Usage: .venv/bin/python tests/selftest/unseen/round2/p04/run_sync_any_early_stop_is_timeout.demo.py [FILE]
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


mod, path = load("run_sync_any_early_stop_is_timeout.py")


@mod.coroutine
def main():
    mod.IOLoop.current().stop()   # something other than the timeout stops the loop
    yield mod.Future()            # never completed


for timeout in (5.0, None):
    loop = mod.IOLoop()
    t0 = time.monotonic()
    try:
        loop.run_sync(main, timeout=timeout)
        finish(1, "VIOLATION: run_sync returned although its Future never completed")
    except TimeoutError as e:
        finish(1, f"VIOLATION: loop stopped by the coroutine after {time.monotonic() - t0:.2f}s, "
                  f"timeout={timeout}: run_sync raised TimeoutError({e}) instead of RuntimeError")
    except RuntimeError:
        pass
    finally:
        loop.close()
finish(0, "OK: a loop stopped before the Future was done -> RuntimeError (with and without a timeout)")
