"""Demo: the spec's worked example, single thread, checking wakeups_scheduled at each step."""
import asyncio, importlib.util, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "flag_lowered_after_every_batch.py")
spec = importlib.util.spec_from_file_location("sink_under_test", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)


async def main():
    s = mod.OutputSink(); s.bind_loop()
    s.put("a"); s.put("b"); s.put("c")
    steps = [("3 puts", s.wakeups_scheduled, 1)]
    b1 = await asyncio.wait_for(s.get_batch(max_items=2), 1)
    b2 = await asyncio.wait_for(s.get_batch(max_items=2), 1)
    if (b1, b2) != (["a", "b"], ["c"]):
        return f"VIOLATION: batches {b1!r}, {b2!r}"
    s.put("d")
    steps.append(("put d after two batches (consumer never armed)", s.wakeups_scheduled, 1))
    b3 = await asyncio.wait_for(s.get_batch(), 1)
    b4 = await s.get_batch(timeout=0.05)
    s.put("e")
    steps.append(("put e after an armed empty wait", s.wakeups_scheduled, 2))
    b5 = await asyncio.wait_for(s.get_batch(), 1)
    if (b3, b4, b5) != (["d"], [], ["e"]):
        return f"VIOLATION: batches {b3!r}, {b4!r}, {b5!r}"
    for what, got, want in steps:
        if got != want:
            return f"VIOLATION: after {what}: wakeups_scheduled == {got}, spec says {want}"
    return None

msg = asyncio.run(main())
if msg:
    print(msg); sys.exit(1)
print("OK"); sys.exit(0)
