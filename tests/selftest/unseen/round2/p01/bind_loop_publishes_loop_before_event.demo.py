"""Demo: a producer's put() that lands while bind_loop() is creating the asyncio.Event must
not raise, and its item must be returned by the consumer.

Forcing: the module's ``asyncio`` name is replaced by a proxy whose ``Event`` factory first
runs ``put('x')`` in another thread (joined with a bound), then builds the real Event.  So the
put lands exactly inside bind_loop, at the call that creates the Event."""
import asyncio, importlib.util, os, sys, threading

HERE = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    HERE, "bind_loop_publishes_loop_before_event.py")
spec = importlib.util.spec_from_file_location("sink_under_test", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)

errors = []
sink_box = []


class AsyncioProxy:
    def __getattr__(self, name):
        return getattr(asyncio, name)

    def Event(self, *a, **kw):
        def producer():
            try:
                sink_box[0].put("x")
            except BaseException as e:  # noqa: BLE001 -- we report it
                errors.append(e)
        t = threading.Thread(target=producer, daemon=True)
        t.start(); t.join(2.0)
        if t.is_alive():
            errors.append(RuntimeError("put() blocked for 2 s while bind_loop ran"))
        return asyncio.Event(*a, **kw)


mod.asyncio = AsyncioProxy()


async def main():
    s = mod.OutputSink(); sink_box.append(s)
    s.bind_loop()
    if errors:
        return f"VIOLATION: put() racing bind_loop raised {errors[0]!r}"
    try:
        got = await asyncio.wait_for(s.get_batch(timeout=0.5), 1.0)
    except Exception as e:  # noqa: BLE001
        return f"VIOLATION: get_batch after the racing put raised {e!r}"
    if got != ["x"]:
        return f"VIOLATION: the item put during bind_loop came back as {got!r}"
    # and the sink still works afterwards: a new cycle wakes the consumer
    task = asyncio.ensure_future(s.get_batch(timeout=1.0))
    await asyncio.sleep(0.02)
    th = threading.Thread(target=s.put, args=("y",), daemon=True); th.start()
    got2 = await task
    if got2 != ["y"]:
        return f"VIOLATION: after the race, a put from a thread was not delivered: {got2!r}"
    return None

msg = asyncio.run(main())
if msg:
    print(msg); sys.exit(1)
print("OK"); sys.exit(0)
