"""``Agent.fork``'s work: copy a session's records through the end of a turn
into a new session, in the same store or another (``ledger.fork_records``
decides what is copied; this module does the I/O)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import trio

from ..engine._options import check_session_store
from ..ledger._fork import fork_records
from ..ledger._ledger import SessionWriter
from ..ledger._records import Record, SessionExistsError, record_encoder
from ..stores._base import SessionStore, check_session_id
from ._inbox import new_id

__all__ = ["fork_session"]


def _create(store: SessionStore, session_id: str, records: Sequence[Record]) -> SessionWriter:
    """Make the new session and store its records at once (a worker thread's work:
    files or a database). ``SessionExistsError`` if the id is taken (found by
    ``create``, or by a database when the records are committed)."""
    try:
        writer = store.create(session_id)
        try:
            for record in records:
                writer.append(record_encoder.encode(record) + b"\n")
            writer.commit()
        except Exception:  # a failed write: the new session's lock is let go
            trio.from_thread.run(writer.aclose)
            raise
    except SessionExistsError as exc:
        where = str(exc).partition(" already exists in ")[2].partition(": use ")[0]
        raise SessionExistsError(
            f"cannot fork onto session {session_id!r}: it already exists in {where}; "
            "choose another new_session_id"
        ) from None
    return writer


async def fork_session(
    store: SessionStore,
    session_id: str,
    at_turn: int,
    new_session_id: str | None,
    to_store: SessionStore | None,
    check: Callable[[Sequence[Record]], None] | None = None,
) -> str:
    """Fork (``Agent.fork``'s contract); the new session's id. ``check`` sees the new
    session's records before anything is written (what it raises, nothing is)."""
    check_session_store(store)
    if to_store is not None:
        check_session_store(to_store, "to_store")
    check_session_id(session_id)
    new = new_id("session") if new_session_id is None else check_session_id(new_session_id)
    target = store if to_store is None else to_store
    if target is store and new == session_id:
        raise ValueError(f"cannot fork session {session_id!r} onto itself")
    loaded = await store.load(session_id)
    records = fork_records(loaded.records, at_turn, new, time.time())
    if check is not None:
        check(records)
    writer = await trio.to_thread.run_sync(_create, target, new, records)
    with trio.CancelScope(shield=True):  # what was committed is made durable and let go
        try:
            await writer.flush(True)
        finally:
            await writer.aclose()
    return new
