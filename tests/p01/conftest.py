import pytest

from workbook.testkit import LoopThread


@pytest.fixture
def lt():
    """An asyncio loop in a daemon thread; the test thread plays the producers."""
    with LoopThread() as loop_thread:
        yield loop_thread
