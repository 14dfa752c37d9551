"""The ledger's errors: a module of their own, so that code that only catches them
(a session kept in memory) does not load the records.
"""

from __future__ import annotations

__all__ = [
    "LeaseLostError",
    "LedgerCorruptError",
    "LedgerError",
    "SessionChangedError",
    "SessionExistsError",
    "SessionLockedError",
    "SessionNotFoundError",
    "session_exists",
]


class LedgerError(Exception):
    """A ledger that cannot be read or written as asked."""


class LedgerCorruptError(LedgerError):
    """A ledger whose middle is damaged, or a record where it cannot be; nothing is guessed."""


class SessionLockedError(LedgerError):
    """The session already has a writer (in this process or another); the message names it."""


class SessionNotFoundError(LedgerError):
    """No session is stored under the id asked for; the message names the store."""


class LeaseLostError(LedgerError):
    """The writer's hold on its session (a PostgreSQL lease) was taken over by
    another writer: it wrote nothing, and writes nothing more."""


class SessionChangedError(LedgerError):
    """The session was appended to after it was loaded: load it again before writing."""


class SessionExistsError(LedgerError):
    """A new session was asked for under an id a stored session has; the message says
    how to continue that one instead (``Agent.resume``)."""


def session_exists(session_id: str, where: object) -> SessionExistsError:
    """The error for creating ``session_id`` again in the store at ``where``."""
    return SessionExistsError(
        f"session {session_id!r} already exists in {where}: use "
        f"Agent.resume(store, {session_id!r}) to continue it"
    )
