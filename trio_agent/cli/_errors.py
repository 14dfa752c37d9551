"""The command line's own errors: a command that cannot be run as given, and an
application's agent factory that failed."""

from __future__ import annotations

__all__ = ["AppError", "UsageError"]


class UsageError(Exception):
    """A command line that cannot be run as given; the text says what to change (exit 2)."""


class AppError(Exception):
    """The application's code failed (its ``--agent`` factory raised): the text
    names it, its error and where it was raised (exit 1, not a usage error)."""
