"""Fixtures of the P04 acceptance set (the helpers themselves live in ``support.py``)."""
from __future__ import annotations

import logging

import pytest

from tests.p04.support import ModuleApi, ServedLoop


@pytest.fixture
def api(impl):
    """The scenarios' adapter for the learner module."""
    return ModuleApi(impl)


@pytest.fixture
def served(impl):
    """The learner's IOLoop running start() in a daemon thread."""
    loop = ServedLoop(impl)
    yield loop
    loop.close()


@pytest.fixture
def pumped(impl):
    """Like ``served``, with a timeout every 20 ms: for checks that are not about wakeups."""
    loop = ServedLoop(impl, pump=0.02)
    yield loop
    loop.close()


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logged():
    """Error records logged anywhere while the test runs (root logger)."""
    handler = _Capture()
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler.records
    root.removeHandler(handler)
