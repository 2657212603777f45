"""Demo: no item may be lost when the consumer takes a batch while a producer is between
loading the queue and appending to it.

Forcing: producer B runs put('b') under sys.setprofile; at the 'c_call' event for
deque.append (the deque object is already loaded, the append not yet done) it signals and
waits (bounded) until the consumer has taken a batch.  Then the consumer asks again."""
import asyncio, collections, importlib.util, os, sys, threading

HERE = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "swap_buffer_drain.py")
spec = importlib.util.spec_from_file_location("sink_under_test", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)

at_append, consumer_took = threading.Event(), threading.Event()


def profiler(frame, event, arg):
    if event == "c_call" and getattr(arg, "__name__", "") == "append" and not at_append.is_set():
        owner = getattr(arg, "__self__", None)
        if owner is None or isinstance(owner, (collections.deque, list)):
            at_append.set()
            consumer_took.wait(2.0)


async def main():
    s = mod.OutputSink(); s.bind_loop()
    s.put("a")

    def producer_b():
        sys.setprofile(profiler)
        try:
            s.put("b")
        finally:
            sys.setprofile(None)

    tb = threading.Thread(target=producer_b, daemon=True); tb.start()
    if not await asyncio.to_thread(at_append.wait, 2.0):
        return "demo: producer never reached deque.append"
    first = await asyncio.wait_for(s.get_batch(timeout=0), 1)
    consumer_took.set()
    await asyncio.to_thread(tb.join, 2.0)
    got = list(first)
    while len(got) < 2:
        more = await asyncio.wait_for(s.get_batch(timeout=0.3), 2)
        if not more:
            break
        got += more
    if got != ["a", "b"]:
        return f"VIOLATION: put 'a' then 'b', the consumer got {got!r} ('b' was lost)"
    return None

msg = asyncio.run(main())
if msg:
    print(msg); sys.exit(2 if msg.startswith("demo") else 1)
print("OK"); sys.exit(0)
