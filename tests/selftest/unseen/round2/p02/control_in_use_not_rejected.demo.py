"""Demo for control_in_use_not_rejected.py: a second run() on a control that a running run() holds must raise ValueError and close nothing.
Run: .venv/bin/python tests/selftest/unseen/round2/p02/control_in_use_not_rejected.demo.py [FILE]
Prints VIOLATION: ... and exits 1 if FILE (default: the wrong file) breaks the rule; OK / 0 if not.
"""
import errno, importlib.util, os, select, selectors, socket, sys, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "control_in_use_not_rejected.py")
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
c = mod.Control(); a = mod.dial("a", P[2])
t, box = in_thread(mod.run, [a], c)
if not wait_entered(t):
    raise SystemExit(f"demo: first run never reached select(): {box!r}")
b = mod.dial("b", P[2])
msg = None
try:
    r2 = mod.run([b], c, 0)
    msg = f"VIOLATION: second run() on a control in use was accepted and returned {r2!r}"
except (ValueError, TypeError):
    if b.sock.fileno() == -1:
        msg = "VIOLATION: second run() rejected, but it closed the caller's socket"
except Exception as e:  # noqa: BLE001
    msg = f"VIOLATION: second run() raised {e!r} instead of ValueError"
try:
    c.request_stop()
except RuntimeError as e:
    msg = msg or f"VIOLATION: the first run can no longer be cancelled: {e!r}"
t.join(1.0)
if msg is None and (t.is_alive() or [x.status for x in box.get("result", [])] != ["cancelled"]):
    msg = f"VIOLATION: the first run did not end cancelled: alive={t.is_alive()} {box!r}"
verdict(msg)
