"""``Listener``: PostgreSQL ``LISTEN`` on a connection of its own, waited on from trio.

psycopg's sync connection blocks while it waits for a notification, so each
wait runs in a worker thread for at most the seconds asked. A wait that is
cancelled is abandoned (the caller goes on at once); its thread ends by
itself within those seconds, and closes the connection when the listener was
closed meanwhile, so a cancelled waiter never waits for the database.

A store behind a pooler with no ``listen_dsn`` has no connection to listen
on (``PostgresStore.listen_connection``): the listener then only waits, and
its callers poll.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, final

import trio

from ..ledger import LedgerError

if TYPE_CHECKING:
    from psycopg import Connection

    from ..stores.postgres._store import PostgresStore

__all__ = ["Listener", "channel", "listening"]


def channel(store: PostgresStore, name: str) -> str:
    """The notification channel ``name`` of ``store``'s schema (used quoted).
    PostgreSQL's names are 63 bytes at most: a schema name too long for
    ``{schema}.{name}`` is shortened, with a hash of it to keep it apart."""
    full = f"{store.schema}.{name}"
    if len(full) <= 63:
        return full
    digest = hashlib.sha256(store.schema.encode()).hexdigest()[:16]
    return f"{store.schema[:30]}~{digest}.{name}"


@final
class Listener:
    """``async with Listener(store, channel)``: ``LISTEN`` from entry, so nothing
    notified after entry is missed; ``await wait(seconds)`` gives the payloads
    of the notifications that arrived (``[]`` after that long; always, when the
    store has no connection to listen on: ``polling``)."""

    __slots__ = (
        "_busy",
        "_channel",
        "_closing",
        "_connection",
        "_limiter",
        "_store",
        "polling",
    )

    def __init__(self, store: PostgresStore, channel: str) -> None:
        self._store = store
        self._channel = channel
        self._connection: Connection[Any] | None = None
        self._busy = threading.Lock()  # held by the thread using the connection
        self._closing = False
        self.polling = False
        # its own thread token: a waiting (or abandoned) listener never holds one of
        # trio's default limiter, which every other thread hop of the process shares
        self._limiter = trio.CapacityLimiter(1)

    async def __aenter__(self) -> Listener:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Connect and ``LISTEN`` (``LedgerError`` when the database cannot be reached).
        Cancellation: returns at once (a connection may take ``connect_timeout``);
        the listener is closed, and the abandoned thread closes what it connects."""
        try:
            await trio.to_thread.run_sync(self._open, limiter=self._limiter, abandon_on_cancel=True)
        except trio.Cancelled:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close the connection now, or let an abandoned wait's thread close it."""
        self._closing = True
        with trio.CancelScope(shield=True):  # never waits for an abandoned wait's thread
            await trio.to_thread.run_sync(self._close_if_idle)

    def _open(self) -> None:
        try:
            with self._busy, self._store.failures(f"listen on {self._channel!r}"):
                connection = self._store.listen_connection()
                if connection is None:
                    self.polling = True
                    return
                listening = False
                try:
                    connection.execute(f'LISTEN "{self._channel}"')
                    listening = True
                finally:
                    if not listening:
                        connection.close()
                self._connection = connection
        finally:  # after the lock is let go: closed meanwhile (the open abandoned)
            if self._closing:
                self._close_if_idle()

    async def wait(self, seconds: float) -> list[str]:
        """The payloads notified since the last wait, waiting up to ``seconds``
        for one. Cancellation: returns at once (the thread is abandoned)."""
        if self.polling:
            await trio.sleep(seconds)
            return []
        return await trio.to_thread.run_sync(
            self._wait, seconds, abandon_on_cancel=True, limiter=self._limiter
        )

    def _wait(self, timeout: float) -> list[str]:
        try:
            with self._busy:
                connection = self._connection
                if connection is None or self._closing:
                    return []
                with self._store.failures(f"listen on {self._channel!r}"):
                    got = [n.payload for n in connection.notifies(timeout=timeout, stop_after=1)]
                    if got:  # and whatever else has arrived, without waiting
                        got += [n.payload for n in connection.notifies(timeout=0.0)]
                    return got
        finally:  # after the lock is let go: a close that found it held is done here
            if self._closing:
                self._close_if_idle()

    def _close_if_idle(self) -> None:
        if self._busy.acquire(blocking=False):
            try:
                self._close()
            finally:
                self._busy.release()

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


async def listening(
    store: PostgresStore,
    name: str,
    heard: Callable[[list[str] | None], Awaitable[None]],
    *,
    seconds: float,
    log: logging.Logger,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on ``store``'s channel ``name`` (``task_status.started()`` once
    listening, or once it could not) and call ``heard(payloads)`` after each wait
    of ``seconds`` at most (``[]``: nothing came), or ``heard(None)`` when nothing
    can be heard (no connection to listen on, or the database away; then each
    ``seconds`` until it listens again). ``heard``'s ``LedgerError`` is taken as
    the database going away. Runs until cancelled."""
    started = False
    while True:
        try:
            async with Listener(store, channel(store, name)) as listener:
                if not started:
                    task_status.started()
                    started = True
                while True:
                    payloads = await listener.wait(seconds)
                    await heard(None if listener.polling else payloads)
        except LedgerError as exc:
            log.warning("cannot listen on %s: %s; polling", name, exc)
        if not started:
            task_status.started()
            started = True
        try:
            await heard(None)
        except LedgerError:
            pass  # still away: looked at again after a while
        await trio.sleep(seconds)
