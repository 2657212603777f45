"""The controlled I/O of the explorer (workbook/explore/io): its stand-ins behave as the real
calls do for the cases they cover (compared with the real call where one can be made
without blocking), waiting is the scheduler's with a virtual clock, faults land where they
are planned, and the World records what happened."""
from __future__ import annotations

import errno
import os
import select
import selectors
import socket

import pytest

from workbook.explore import io
from workbook.explore.sched import Scheduler


def _run(*bodies, faults=(), seed=0):
    """Run ``bodies`` (callables) as controlled threads T1, T2, ... after an empty setup."""
    sched = Scheduler(seed)
    world = io.attach(sched, list(faults))
    info = sched.run([("setup", lambda: None)]
                     + [(f"T{n}", body) for n, body in enumerate(bodies, 1)])
    world.close_all()
    return info, world, sched


def _outcome(fn, *args):
    try:
        fn(*args)
        return "ok"
    except BaseException as exc:  # noqa: BLE001 - the outcome is what is compared
        return f"{type(exc).__name__}: {exc}"


SELECTORS = [("SelectSelector", io.SelectSelector), ("PollSelector", io.PollSelector),
             ("EpollSelector", io.EpollSelector)]
TIMEOUTS = [None, 0, -1, 0.5, 2.2e6, 1e12, float("inf"), float("nan"), 10**400, "1"]


@pytest.mark.parametrize("name,controlled", SELECTORS, ids=[n for n, _ in SELECTORS])
def test_a_selector_refuses_exactly_the_timeouts_the_real_one_refuses(name, controlled):
    a, b = socket.socketpair()
    try:
        real, mine = getattr(selectors, name)(), controlled()
        for sel in (real, mine):
            sel.register(b, selectors.EVENT_WRITE)  # always ready: nothing waits
        for timeout in TIMEOUTS:
            assert _outcome(mine.select, timeout) == _outcome(real.select, timeout), timeout
        real.close()
        mine.close()
    finally:
        a.close()
        b.close()


def test_raw_select_poll_and_epoll_refuse_what_the_real_calls_refuse():
    a, b = socket.socketpair()
    try:
        for timeout in (None, 0, -1, 0.5, 1e12, float("inf"), float("nan"), "1"):
            assert _outcome(io.select, [], [b], [], timeout) == \
                   _outcome(select.select, [], [b], [], timeout), timeout
        real_poll, mine_poll = select.poll(), io.poll()
        real_ep, mine_ep = select.epoll(), io.Epoll()
        for obj, mask in ((real_poll, select.POLLOUT), (mine_poll, select.POLLOUT),
                          (real_ep, select.EPOLLOUT), (mine_ep, select.EPOLLOUT)):
            obj.register(b, mask)
        for timeout in (None, 0, -5, 0.5, 2**31, float("nan"), "1"):
            assert _outcome(mine_poll.poll, timeout) == _outcome(real_poll.poll, timeout)
            assert _outcome(mine_ep.poll, timeout) == _outcome(real_ep.poll, timeout)
        real_ep.close()
        mine_ep.close()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("make", [c for _, c in SELECTORS] + [io.DefaultSelector],
                         ids=[n for n, _ in SELECTORS] + ["DefaultSelector"])
def test_a_waiting_select_is_woken_by_a_send_and_reports_what_the_kernel_reports(make):
    box = {}

    def setup():
        box["r"], box["w"] = io.socketpair()

    def loop():
        sel = make()
        sel.register(box["r"], selectors.EVENT_READ)
        got = sel.select(None)  # would sleep for ever if the send did not wake it
        box["got"] = [(key.fileobj, events) for key, events in got]
        sel.close()

    def press():
        box["w"].send(b"x")

    sched = Scheduler(0)
    world = io.attach(sched)
    info = sched.run([("setup", setup), ("T1", loop), ("T2", press)])
    with selectors.DefaultSelector() as real:  # the real selector, asked without waiting
        real.register(box["r"], selectors.EVENT_READ)
        expected = [(key.fileobj, events) for key, events in real.select(0)]
    world.close_all()
    assert info.ended == "finished" and box["got"] == expected == [(box["r"], 1)]
    assert [w.ended for w in world.waits] in (["ready"], ["now"])
    assert sched.now == 0.0  # nothing slept, virtually or really


def test_a_timed_wait_with_nothing_ready_moves_only_the_virtual_clock():
    box = {}

    def loop():
        r, w = io.socketpair()
        sel = io.DefaultSelector()
        sel.register(r, selectors.EVENT_READ)
        box["got"] = sel.select(2.5)  # 2.5 virtual seconds: the run takes milliseconds
        sel.unregister(r)
        sel.close()
        r.close()
        w.close()

    info, world, sched = _run(loop)
    assert info.ended == "finished" and box["got"] == [] and sched.now == 2.5
    wait = world.waits[0]
    assert (wait.seconds, wait.ended, wait.end_time - wait.start_time) == (2.5, "timeout", 2.5)


def test_select_and_poll_wait_like_the_real_calls_for_ever_or_in_milliseconds():
    seen = {}

    def loop():
        r, w = io.socketpair()
        poller = io.poll()
        poller.register(r, select.POLLIN)
        seen["poll"] = poller.poll(1.2)  # milliseconds, rounded up as the kernel gets them
        seen["t1"] = io.current().sched.now
        seen["select"] = io.select([r], [], [], 0.25)
        seen["t2"] = io.current().sched.now
        poller.poll(-1)  # negative: for ever

    info, world, sched = _run(loop)
    assert seen["poll"] == [] and seen["t1"] == pytest.approx(0.002)
    assert seen["select"] == ([], [], []) and seen["t2"] == pytest.approx(0.252)
    assert info.ended == "blocked" and world.waits[-1].seconds is None


def test_blocking_recv_and_send_wait_in_the_scheduler_and_keep_the_socket_as_it_was():
    box = {}

    def setup():
        box["a"], box["b"] = io.socketpair()
        box["a"].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)

    def reader():
        sock = box["b"]
        box["data"] = sock.recv(1 << 16)  # a blocking socket: waits for the writer
        box["mode"] = (sock.gettimeout(), os.get_blocking(sock.fileno()))

    def writer():
        sock = box["a"]
        sent = 0
        sock.setblocking(False)
        while True:  # fill the buffer, as the real non-blocking socket would refuse
            try:
                sent += sock.send(b"y" * 4096)
            except BlockingIOError:
                break
        sock.setblocking(True)
        box["sent"] = sent
        box["late"] = sock.send(b"z")  # full: waits until the reader has made room

    sched = Scheduler(0)
    world = io.attach(sched)
    info = sched.run([("setup", setup), ("T1", writer), ("T2", reader)])
    world.close_all()
    assert info.ended == "finished" and box["data"] == b"y" * box["sent"] and box["late"] == 1
    assert box["mode"] == (None, True)
    assert any(w.on is not None and w.ended == "ready" for w in world.waits)
    assert any(t.op == "send" and t.nbytes == -1 for t in world.transfers)


def test_a_socket_timeout_is_virtual_and_eof_and_eagain_are_the_kernels():
    box = {}

    def body():
        a, b = io.socketpair()
        a.settimeout(1.5)
        try:
            a.recv(1)
        except TimeoutError as exc:
            box["timeout"] = (str(exc), io.current().sched.now)
        a.setblocking(False)
        with pytest.raises(BlockingIOError):
            a.recv(1)
        b.close()
        box["eof"] = a.recv(1)
        a.close()

    info, world, sched = _run(body)
    assert box == {"timeout": ("timed out", 1.5), "eof": b""}
    assert [t.nbytes for t in world.transfers if t.op == "recv"] == [-1, 0]


def test_os_pipe_and_eventfd_calls_wait_and_wake_like_the_real_ones():
    box = {}

    def setup():
        box["pipe"] = io.pipe()
        box["efd"] = io.eventfd(0)

    def reader():
        box["read"] = io.read(box["pipe"][0], 100)  # a blocking pipe: waits for the writer
        box["count"] = io.eventfd_read(box["efd"])  # a blocking eventfd: waits for a write

    def writer():
        io.write(box["pipe"][1], b"hello")
        io.eventfd_write(box["efd"], 3)
        io.close(box["pipe"][1])

    sched = Scheduler(0)
    world = io.attach(sched)
    info = sched.run([("setup", setup), ("T1", reader), ("T2", writer)])
    assert info.ended == "finished" and box["read"] == b"hello" and box["count"] == 3
    closed = [r for r in world.resources if r.closed is not None]
    assert [(r.kind, r.how) for r in closed] == [("pipe", "os.close()")]
    world.close_all()
    assert not world.open()


def test_a_planned_fault_lands_in_the_nth_call_of_its_kind_and_a_close_lets_go_first():
    box = {}

    def body():
        r, w = io.socketpair()
        sel = io.DefaultSelector()
        sel.register(r, selectors.EVENT_READ)
        try:
            sel.register(w, selectors.EVENT_WRITE)
        except OSError as exc:
            box["register"] = exc.errno
        try:
            r.close()
        except KeyboardInterrupt:
            box["closed"] = r.fileno() == -1
        sock = io.Socket()
        box["connect_ex"] = sock.connect_ex(("127.0.0.1", 9))
        with pytest.raises(socket.gaierror):
            sock.connect(("127.0.0.1", 9))
        sock.close()
        sel.close()
        w.close()

    faults = [io.Fault(1, "register", 2, lambda: io.error("register")),
              io.Fault(1, "close", 1, KeyboardInterrupt),
              io.Fault(1, "connect", 1, lambda: OSError(errno.EADDRNOTAVAIL, "no port")),
              io.Fault(1, "connect", 2, lambda: io.error("connect"))]
    info, world, sched = _run(body, faults=faults)
    assert box == {"register": errno.ENOMEM, "closed": True, "connect_ex": errno.EADDRNOTAVAIL}
    assert len(world.injected) == 4 and (1, "register", 2) in world.points
    reg = world.registrations[0]
    assert reg.closed_first and reg.unregistered is None  # closed while still registered


def test_the_patch_swaps_modules_and_imported_names_and_leaves_the_rest():
    from os import read
    from selectors import DefaultSelector
    from socket import socketpair

    namespace = {"selectors": selectors, "socket": socket, "os": os, "select": select,
                 "read": read, "DefaultSelector": DefaultSelector, "socketpair": socketpair,
                 "errno": errno, "__name__": "x"}
    swapped = io.patch(namespace)
    assert sorted(swapped) == ["DefaultSelector", "os", "read", "select", "selectors",
                               "socket", "socketpair"]
    assert namespace["DefaultSelector"] is io.DefaultSelector and namespace["read"] is io.read
    assert namespace["socket"].socket is io.Socket and namespace["os"].getpid is os.getpid
    assert namespace["errno"] is errno and namespace["selectors"].EVENT_READ == 1


def test_outside_a_run_the_stand_ins_are_the_real_calls():
    r, w = io.socketpair()
    try:
        w.send(b"q")
        sel = io.DefaultSelector()
        sel.register(r, selectors.EVENT_READ)
        assert [k.fileobj for k, _ in sel.select(0)] == [r] and r.recv(5) == b"q"
        sel.close()
    finally:
        r.close()
        w.close()


def test_create_connection_dials_a_loopback_listener_under_control():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    box = {}

    def body():
        sock = io.create_connection(listener.getsockname())
        box["peer"] = sock.getpeername()
        sock.close()

    try:
        info, world, sched = _run(body)
        assert info.ended == "finished" and box["peer"] == listener.getsockname()
        assert [r.kind for r in world.resources] == ["socket"]
        listener.accept()[0].close()
    finally:
        listener.close()


def _p04_cases():
    from workbook import manifest, variants
    problem = manifest.get("p04")
    return [("reference", problem.solution_file)] + variants.alternates(problem)


@pytest.mark.parametrize("name,path", _p04_cases(), ids=[n for n, _ in _p04_cases()])
def test_p04_solutions_run_under_control(name, path):
    """Not a judgement of P04 (its explorer comes later): its reference and alternates --
    socket pair, pipe and eventfd wakers; every selector class, raw poll and raw select --
    run under the stand-ins: a wakeup from another thread, a call_later and a run_sync
    timeout, all in virtual time."""
    from workbook.explore import driver, prims

    module = driver.load(path, "p04-io", patch=lambda ns: prims.patch(ns) + io.patch(ns))
    sched = Scheduler(0, preempt=0.3)
    world = io.attach(sched)
    box = {}

    def loop():
        box["loop"] = ioloop = module.IOLoop()
        box["future"] = future = module.Future()
        fired = []
        ioloop.add_callback(lambda: ioloop.call_later(0.25, fired.append, 1))

        @module.coroutine
        def main():
            value = yield future
            return value + 1
        try:
            box["result"] = (ioloop.run_sync(main, timeout=5), fired)
            with pytest.raises(TimeoutError):
                ioloop.run_sync(module.Future, timeout=0.5)
            box["timed out"] = True
        finally:
            ioloop.close()

    def other():
        while "loop" not in box:
            sched.block(sched.task(), "delay", sched.now + 0.5, what="delay")
        box["loop"].add_callback(box["future"].set_result, 41)

    info = sched.run([("setup", lambda: None), ("T1", loop), ("T2", other)])
    world.close_all()
    assert info.ended == "finished", info
    assert box.get("result") == (42, [1]) and box.get("timed out")
    assert round(sched.now, 6) == 1.0  # to the microsecond: each clock reading ticks
    assert any(w.ended == "ready" for w in world.waits)  # the waker woke a sleeping wait


def test_two_threads_closing_one_socket_object_close_it_once_and_neither_is_called_a_double_close():
    from workbook.explore import bounded

    def one(choices):
        box: dict = {"errors": []}

        def setup():
            box["a"], box["b"] = io.socketpair()

        def closer():
            try:
                box["a"].close()
            except OSError as exc:
                box["errors"].append(exc.errno)

        sched = Scheduler(0, preempt=0.5, choices=choices)
        world = io.attach(sched)
        info = sched.run([("setup", setup), ("T1", closer), ("T2", closer)])
        world.close_all()
        return info.ended, tuple(box["errors"]), len(world.again), box["a"].fileno()

    runs = list(bounded.schedules(one, 1, 50))  # with a preemption inside each close()
    assert len(runs) > 2 and set(runs) == {("finished", (), 0, -1)}
