"""Demo: get_batch(timeout=0) on an empty, bound sink must return [] at once."""
import asyncio, importlib.util, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "timeout_zero_treated_as_none.py")
spec = importlib.util.spec_from_file_location("sink_under_test", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)


async def main():
    s = mod.OutputSink(); s.bind_loop()
    t0 = asyncio.get_running_loop().time()
    try:
        got = await asyncio.wait_for(s.get_batch(timeout=0), 1.0)
    except asyncio.TimeoutError:
        return "VIOLATION: get_batch(timeout=0) on an empty sink was still waiting after 1.0 s"
    took = asyncio.get_running_loop().time() - t0
    if got != [] or took > 0.2:
        return f"VIOLATION: get_batch(timeout=0) returned {got!r} after {took:.3f} s"
    return None

msg = asyncio.run(main())
if msg:
    print(msg); sys.exit(1)
print("OK"); sys.exit(0)
