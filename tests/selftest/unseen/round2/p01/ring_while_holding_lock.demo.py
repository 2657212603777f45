"""Demo: while producer A is inside call_soon_threadsafe (held there by a loop wrapper),
producer B's put() must return at once (a wakeup is already in flight)."""
import asyncio, importlib.util, os, sys, threading

HERE = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "ring_while_holding_lock.py")
spec = importlib.util.spec_from_file_location("sink_under_test", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)

loop = asyncio.new_event_loop()
threading.Thread(target=loop.run_forever, daemon=True).start()
entered, release = threading.Event(), threading.Event()


class StallingLoop:
    """Forwards to the real loop; the first call_soon_threadsafe stalls until released."""
    def __init__(self, real):
        self.real, self.first = real, True

    def call_soon_threadsafe(self, cb, *args):
        if self.first:
            self.first = False
            entered.set()
            release.wait(3.0)
        return self.real.call_soon_threadsafe(cb, *args)

    def __getattr__(self, name):
        return getattr(self.real, name)


s = mod.OutputSink()
s.bind_loop(StallingLoop(loop))
ta = threading.Thread(target=s.put, args=("a",), daemon=True); ta.start()
if not entered.wait(2.0):
    print("demo: producer A never called call_soon_threadsafe"); sys.exit(2)
b_done = threading.Event()
tb = threading.Thread(target=lambda: (s.put("b"), b_done.set()), daemon=True); tb.start()
b_returned = b_done.wait(0.5)
release.set()
ta.join(3.0); tb.join(3.0)
if not b_returned:
    print("VIOLATION: producer B's put() blocked while producer A was inside "
          "call_soon_threadsafe (the call is made holding the sink's lock)")
    sys.exit(1)
got = asyncio.run_coroutine_threadsafe(s.get_batch(timeout=1.0), loop).result(3)
if got != ["a", "b"]:
    print(f"VIOLATION: expected ['a', 'b'], got {got!r}"); sys.exit(1)
print("OK"); sys.exit(0)
