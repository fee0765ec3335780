"""Fixtures of the Publisher tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.publisher import Threads


@pytest.fixture
def threads() -> Iterator[Threads]:
    """Runs gate acquires in threads, joined at the end of the test."""
    runner = Threads()
    yield runner
    runner.join()
