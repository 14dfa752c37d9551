"""Fixtures of the telemetry tests."""

from __future__ import annotations

import logging

import pytest
from otel_helpers import otel_sdk


@pytest.fixture
def debug_sdk(caplog):
    """The OpenTelemetry SDK in memory; the test fails on any record opentelemetry
    logs, DEBUG ones included (a context detached in the wrong task or order)."""
    caplog.set_level(logging.DEBUG, "opentelemetry")
    with otel_sdk() as configured:
        yield configured
    bad = [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")]
    assert not bad, bad
