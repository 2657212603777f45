"""Real tornado 6 is P04's oracle.

Every event-order scenario of P04's acceptance set (``tests/p04/scenarios.py``) runs twice:
on real tornado (``gen.coroutine``, ``gen.moment``, ``IOLoop``, ``tornado.concurrent.Future``)
and on the reference solution.  Both must record the same events, and those must be the
events the acceptance set expects.  Tornado is a test-only dependency (the ``dev`` extra);
outside CI a missing tornado skips these tests, in CI (``CI`` set) it fails them.
"""
from __future__ import annotations

import os

import pytest

from solutions import p04_coroutine_runner as reference
from tests.p04.scenarios import SCENARIOS
from tests.p04.support import ModuleApi, run_scenario
from workbook.testkit import BOUND, fail, interrupt_thread, start_daemon

if os.environ.get("CI"):
    import tornado  # noqa: F401 - in CI the oracle must be there
else:
    tornado = pytest.importorskip("tornado")

from tornado import concurrent, gen, ioloop  # noqa: E402


class TornadoApi:
    """The scenarios' adapter for real tornado 6."""

    Future = concurrent.Future
    coroutine = staticmethod(gen.coroutine)
    moment = gen.moment
    Return = gen.Return
    BadYieldError = gen.BadYieldError

    def loop(self):
        return ioloop.IOLoop.current()

    def done(self, value):
        future = concurrent.Future()
        future.set_result(value)
        return future

    def run(self, main, *, what: str, pitfall: str | None = None):
        def body():
            loop = ioloop.IOLoop()  # a fresh asyncio loop, in this fresh thread
            try:
                return loop.run_sync(main, timeout=BOUND)
            finally:
                loop.close(all_fds=True)

        thread = start_daemon(body, name="tornado-ioloop")
        thread.join(2 * BOUND)
        if thread.is_alive():
            interrupt_thread(thread)
            fail(f"{what}: real tornado did not finish within {2 * BOUND:g} s")
        if thread.error is not None:
            raise thread.error
        return thread.result


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_real_tornado_and_the_reference_record_the_same_events(name):
    scenario, expected = SCENARIOS[name]
    by_tornado, _ = run_scenario(TornadoApi(), scenario)
    by_reference, _ = run_scenario(ModuleApi(reference), scenario)
    assert by_tornado == by_reference, (
        f"{name}: tornado recorded {by_tornado}, the reference {by_reference}")
    assert by_tornado == expected, (
        f"{name}: the acceptance set expects {expected}, tornado recorded {by_tornado}")


def test_the_oracle_is_tornado_6():
    assert int(tornado.version.split(".")[0]) >= 6, tornado.version
