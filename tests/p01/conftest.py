import pytest

from tests.p01 import support
from workbook.testkit import LoopThread, add_stuck_hook


@pytest.fixture(autouse=True)
def _explained_sinks():
    """A stuck diagnosis says how many items the test's sinks still hold."""
    add_stuck_hook(support.explain_stuck)
    support.live_sinks.clear()
    yield
    support.live_sinks.clear()


@pytest.fixture
def lt():
    """An asyncio loop in a daemon thread; the test thread plays the producers."""
    with LoopThread() as loop_thread:
        yield loop_thread
