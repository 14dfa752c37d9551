"""``JsonlPlace``: where a served JSONL store keeps its sessions (``DIR/ID.jsonl``,
the ledgers) and their event logs (``DIR/.events/ID.jsonl``: no session id starts
with a dot, so none can be taken for a ledger)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, final

import trio

from ..ledger._derive import DerivedSession
from ..session._resume import derive_from_tail
from ..stores._base import LoadedSession, check_session_id
from ..stores._jsonl import JsonlStore
from ._eventlog import EventLog, Events

if TYPE_CHECKING:
    from ._relay import Relay

__all__ = ["JsonlPlace", "Place", "derive_tail"]


async def derive_tail(store: Any, session_id: str, tail: LoadedSession) -> DerivedSession | None:
    """What a session derives to from its records since the last snapshot (``tail``,
    a store's ``load_tail``), as a resume derives it (a damaged snapshot: the whole
    ledger, with a warning); None when nothing is recorded."""
    if not tail.records:
        return None
    return (await derive_from_tail(store, session_id, tail))[1]


class Place(Protocol):
    """A store the server runs sessions in, with what serving needs beside it."""

    @property
    def store(self) -> Any: ...

    @property
    def events(self) -> Events: ...

    @property
    def inbox(self) -> Relay | None:
        """Where a turn for a session another process holds is queued for it (the
        fleet's inbox); None: every session has its one writer here."""
        ...

    async def state(self, session_id: str) -> DerivedSession | None:
        """What the session's records say, or None when it is not recorded."""
        ...

    async def sessions(self) -> list[str]:
        """The recorded sessions' ids, sorted."""
        ...

    async def aclose(self) -> None:
        """Let the store's resources go (the server has stopped)."""
        ...

    async def follow(
        self, wake: Callable[[str | None], None], *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Call ``wake(session_id)`` when another process logs an event of the
        session (``wake(None)``: any session may have new events)."""
        ...


@final
class JsonlPlace:
    """A ``JsonlStore`` directory (made on first use) and its sessions' event logs."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.store = JsonlStore(self.directory)
        self.events = EventLog(self.directory / ".events")
        self.inbox: Relay | None = None  # a JSONL session has one writer, in this process

    async def state(self, session_id: str) -> DerivedSession | None:
        path = self.store.path(session_id)
        if not await trio.Path(path).exists():
            return None
        # no records: its first line was never finished, so it was not made
        return await derive_tail(self.store, session_id, await self.store.load_tail(session_id))

    async def sessions(self) -> list[str]:
        return await trio.to_thread.run_sync(self._sessions)

    async def aclose(self) -> None:
        pass  # every file is closed by its writer

    async def follow(
        self, wake: Callable[[str | None], None], *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()  # a JSONL session has one writer, in this process

    def _sessions(self) -> list[str]:
        try:
            names = [path.name for path in self.directory.iterdir()]
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if not name.endswith(".jsonl"):
                continue
            try:
                found.append(check_session_id(name[: -len(".jsonl")]))
            except ValueError:
                continue
        return sorted(found)
