"""Demo: one sink, two event loops one after the other (asyncio.run twice); each run binds
the sink to its loop and does an empty timed wait, then a cross-thread put wakes it."""
import asyncio, importlib.util, os, sys, threading

HERE = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "event_created_in_init.py")
spec = importlib.util.spec_from_file_location("sink_under_test", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)

s = mod.OutputSink()


async def session(tag):
    s.bind_loop()
    try:
        empty = await asyncio.wait_for(s.get_batch(timeout=0.05), 1)
    except RuntimeError as e:
        return f"VIOLATION: loop #{tag}: empty get_batch(timeout=0.05) raised {e!r}"
    if empty != []:
        return f"VIOLATION: loop #{tag}: expected [], got {empty!r}"
    task = asyncio.ensure_future(s.get_batch(timeout=1.0))
    await asyncio.sleep(0.02)
    threading.Thread(target=s.put, args=(tag,), daemon=True).start()
    try:
        got = await asyncio.wait_for(task, 2)
    except Exception as e:  # noqa: BLE001
        return f"VIOLATION: loop #{tag}: waiting get_batch raised {e!r}"
    if got != [tag]:
        return f"VIOLATION: loop #{tag}: expected [{tag!r}], got {got!r}"
    return None

for tag in (1, 2):
    msg = asyncio.run(session(tag))
    if msg:
        print(msg); sys.exit(1)
print("OK"); sys.exit(0)
