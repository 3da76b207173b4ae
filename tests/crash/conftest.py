"""Fixtures of the crash tests: daemons each test starts and kills itself."""

from __future__ import annotations

import pytest

from harness import Daemon


@pytest.fixture
def daemons():
    """Daemons a test starts; whatever is still running at the end is killed."""
    started: list[Daemon] = []
    yield started
    for d in started:
        d.kill()
