"""Demo for nan_timeout_accepted.py: run(timeout=float('nan')) must raise ValueError/TypeError at once and close nothing.
Run: .venv/bin/python tests/selftest/unseen/round2/p02/nan_timeout_accepted.demo.py [FILE]
Prints VIOLATION: ... and exits 1 if FILE (default: the wrong file) breaks the rule; OK / 0 if not.
Deterministic: an accepted NaN shows up as a selector being made and select() called (a
rejected one never gets that far); the demo then cancels the run at once.
"""
import errno, importlib.util, os, select, selectors, socket, sys, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "nan_timeout_accepted.py")
spec = importlib.util.spec_from_file_location("p02_under_test", path)
mod = importlib.util.module_from_spec(spec)
sys.modules["p02_under_test"] = mod  # dataclasses need the module registered
spec.loader.exec_module(mod)


def verdict(msg):
    if msg:
        print(msg); sys.exit(1)
    print("OK"); sys.exit(0)


def pending_target():
    """A loopback listener whose accept queue is full: further connects stay in progress."""
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(0)
    addr = srv.getsockname(); fillers = []
    for _ in range(16):
        c = socket.socket(); c.setblocking(False); c.connect_ex(addr)
        _, w, _ = select.select([], [c], [], 0.2)
        if not w:
            c.close(); return srv, fillers, addr
        fillers.append(c)
    raise SystemExit("demo: could not make a pending connect")


def listening():
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(16); return srv


def closed_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); addr = s.getsockname(); s.close(); return addr


OrigSelector = selectors.DefaultSelector
made = []


class InstrumentedSelector(OrigSelector):
    """Records itself; ``entered`` is set when select() is first called."""
    fail_select = None

    def __init__(self):
        super().__init__(); self.entered = threading.Event(); self.closed = False; made.append(self)

    def select(self, timeout=None):
        self.entered.set()
        if self.fail_select is not None:
            raise self.fail_select
        return super().select(timeout)

    def close(self):
        self.closed = True; return super().close()


def in_thread(fn, *a, **kw):
    box = {}

    def target():
        try:
            box["result"] = fn(*a, **kw)
        except BaseException as e:  # noqa: BLE001 -- reported by the demo
            box["error"] = e
    t = threading.Thread(target=target, daemon=True); t.start()
    return t, box


def wait_entered(t, timeout=2.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if made and made[-1].entered.wait(0.01):
            return True
        if not t.is_alive():
            return False
    return False

selectors.DefaultSelector = InstrumentedSelector
P = pending_target()
c = mod.Control(); d = mod.dial("slow", P[2])
t, box = in_thread(mod.run, [d], c, float("nan"))
if wait_entered(t):
    c.request_stop(); t.join(2)   # end the (polling) loop
    verdict(f"VIOLATION: timeout=nan was accepted: run() went on to select() and only ended "
            f"when cancelled ({box!r}); caller's socket closed={d.sock.fileno() == -1}")
t.join(2)
e = box.get("error")
if not isinstance(e, (ValueError, TypeError)):
    verdict(f"VIOLATION: timeout=nan gave {box!r}")
verdict("VIOLATION: rejected nan, but closed the caller's socket"
        if d.sock.fileno() == -1 or c.reader.fileno() == -1 else None)
