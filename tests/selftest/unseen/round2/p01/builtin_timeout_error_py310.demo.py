"""Demo: an empty get_batch(timeout=0.05) must return [] (not raise) -- with Python 3.10's
asyncio.  On 3.10 this is the real asyncio; on 3.11+ the module gets an asyncio proxy whose
``TimeoutError`` is a separate Exception subclass and whose ``wait_for`` raises it on
timeout, which is exactly how 3.10 behaves (asyncio.exceptions.TimeoutError is not the
builtin TimeoutError there).  Also try:  PYENV_VERSION=3.10.13 python3 THIS_FILE [FILE]"""
import asyncio, importlib.util, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "builtin_timeout_error_py310.py")
spec = importlib.util.spec_from_file_location("sink_under_test", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)

if sys.version_info >= (3, 11):
    class AsyncioTimeoutError310(Exception):
        """3.10's asyncio.exceptions.TimeoutError: an Exception, not the builtin TimeoutError."""

    class Asyncio310:
        TimeoutError = AsyncioTimeoutError310

        def __getattr__(self, name):
            return getattr(asyncio, name)

        @staticmethod
        async def wait_for(aw, timeout):
            try:
                return await asyncio.wait_for(aw, timeout)
            except TimeoutError:
                raise AsyncioTimeoutError310() from None

    mod.asyncio = Asyncio310()
    flavour = f"simulated 3.10 asyncio on {sys.version.split()[0]}"
else:
    flavour = f"real asyncio {sys.version.split()[0]}"


async def main():
    s = mod.OutputSink(); s.bind_loop()
    try:
        got = await asyncio.wait_for(s.get_batch(timeout=0.05), 2)
    except BaseException as e:  # noqa: BLE001
        return f"VIOLATION ({flavour}): empty get_batch(timeout=0.05) raised {type(e).__module__}.{type(e).__qualname__}"
    if got != []:
        return f"VIOLATION ({flavour}): expected [], got {got!r}"
    return None

msg = asyncio.run(main())
if msg:
    print(msg); sys.exit(1)
print(f"OK ({flavour})"); sys.exit(0)
