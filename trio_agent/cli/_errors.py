"""The command line's own error: a command that cannot be run as given."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """A command line that cannot be run as given; the text says what to change (exit 2)."""
