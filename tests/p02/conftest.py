"""Fixtures of the P02 acceptance set (the helpers themselves live in ``support.py``)."""
from __future__ import annotations

import pytest

from tests.p02.support import Endpoints, Harness, SelectorSpy


@pytest.fixture
def net():
    """Loopback endpoints: ``listening``, ``refusing`` and ``pending`` addresses."""
    endpoints = Endpoints()
    yield endpoints
    endpoints.close()


@pytest.fixture
def spy(monkeypatch):
    """Every ``selectors.DefaultSelector()`` made during the test is instrumented."""
    s = SelectorSpy()
    s.install(monkeypatch)
    yield s
    s.poison()


@pytest.fixture
def h(impl, spy, net):
    """Creates dials and controls for the test and cleans up after wrong solutions."""
    harness = Harness(impl, spy, net)
    yield harness
    harness.teardown()
