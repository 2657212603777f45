"""Demo: two producers racing on a freshly bound sink must schedule exactly one wakeup.

Forcing: producer A runs under sys.settrace; when it reaches the source line that stores
``_wakeup_in_flight = True`` in put(), it signals and waits (at most 0.5 s) until producer B's
put() has returned.  In a correct sink that line runs under the lock, so B waits for the lock
(the bounded wait then lets A go on); in a sink that tests the flag outside the lock, B sees
the flag still down and schedules its own wakeup.  call_soon_threadsafe calls are counted by a
loop wrapper."""
import asyncio, importlib.util, linecache, os, sys, threading

HERE = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "flag_checked_outside_lock.py")
spec = importlib.util.spec_from_file_location("sink_under_test", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
MARK = sys.argv[2] if len(sys.argv) > 2 else "_wakeup_in_flight = True"  # argv[2]: the flag-store line of another file
src = open(path).read()
if MARK not in src:
    print(f"demo cannot force this file: no line containing {MARK!r} (pass it as argv[2])"); sys.exit(2)

loop = asyncio.new_event_loop()
threading.Thread(target=loop.run_forever, daemon=True).start()


class CountingLoop:
    def __init__(self, real):
        self.real, self.calls, self.lock = real, 0, threading.Lock()

    def call_soon_threadsafe(self, cb, *args):
        with self.lock:
            self.calls += 1
        return self.real.call_soon_threadsafe(cb, *args)

    def __getattr__(self, name):
        return getattr(self.real, name)


wrapper = CountingLoop(loop)
s = mod.OutputSink()
s.bind_loop(wrapper)
a_at_store, b_done = threading.Event(), threading.Event()
put_code = mod.OutputSink.put.__code__
held = []


def tracer(frame, event, arg):
    if event == "call":
        return local if frame.f_code is put_code else None
    return None


def local(frame, event, arg):
    if event == "line" and not held:
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        if MARK in line:
            held.append(True)
            a_at_store.set()
            b_done.wait(0.5)
    return local


def producer_a():
    sys.settrace(tracer)
    try:
        s.put("a")
    finally:
        sys.settrace(None)


def producer_b():
    s.put("b")
    b_done.set()


ta = threading.Thread(target=producer_a, daemon=True); ta.start()
if not a_at_store.wait(2.0):
    print("demo could not reach the flag store in put()"); sys.exit(2)
tb = threading.Thread(target=producer_b, daemon=True); tb.start()
ta.join(3.0); tb.join(3.0)
if ta.is_alive() or tb.is_alive():
    print("VIOLATION: a producer's put() did not return within 3 s"); sys.exit(1)


async def collect():
    got = []
    while len(got) < 2:
        b = await s.get_batch(timeout=1.0)
        if not b:
            break
        got += b
    return got

got = asyncio.run_coroutine_threadsafe(collect(), loop).result(5)
if sorted(got) != ["a", "b"]:
    print(f"VIOLATION: items lost or duplicated: {got!r}"); sys.exit(1)
# both puts happened before the consumer's first arm: one wakeup cycle
if wrapper.calls != 1 or s.wakeups_scheduled != 1:
    print(f"VIOLATION: one wakeup cycle, but call_soon_threadsafe called {wrapper.calls} times "
          f"and wakeups_scheduled == {s.wakeups_scheduled}")
    sys.exit(1)
print("OK"); sys.exit(0)
