"""Recorded provider streams (tests/support/fixtures/wire/, see SOURCES.md there)."""

from __future__ import annotations

from paths import WIRE


def wire(name: str) -> bytes:
    """A recorded stream of tests/support/fixtures/wire/, its bytes unchanged."""
    return (WIRE / name).read_bytes()


def served(name: str) -> bytes:
    """A recorded stream as a server sends it: some recordings lost the blank line
    after their last event (SOURCES.md), which the API sends; it is put back."""
    body = wire(name)
    return body if body.endswith(b"\n\n") else body + b"\n\n"
