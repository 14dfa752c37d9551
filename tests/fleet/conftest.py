"""Fixtures of the fleet tests."""

from __future__ import annotations

import pytest
from fleet_agents import dispatched


@pytest.fixture(autouse=True)
def _clear_dispatched():
    """Each test counts the ``add`` calls its own workers dispatched."""
    dispatched.clear()
