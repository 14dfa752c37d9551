"""Keep-alive HTTP/1.1 connections shared by the requests of one or more models."""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final, final

import trio

from ..model import ModelRequestError
from ._connection import Connection, Origin

_OPEN: Final = "open"
"""``ConnectionPool._admit``: the caller may open a new connection."""
_WAIT: Final = "wait"
"""``ConnectionPool._admit``: every connection is busy; wait for one to come back."""


@final
class ConnectionPool:
    """Keep-alive connections, reused across requests (per origin, TLS context
    and proxy), for the models that share it.

    At most ``max_connections`` are open at once, busy or idle: a request past
    that waits for one (fairly, first come first served). A connection goes back
    to the pool only when its response was read to the end and the server
    lets it stay open; at most ``max_idle`` wait there, for ``idle_seconds``
    at most (less if the server's ``Keep-Alive`` says so): no task watches
    them, a connection past its time is closed when the pool is next used. A
    pooled connection that fails before any byte of its response (the server
    closed it while it was idle) is replaced by a fresh one, once.

    A model makes its own pool unless given one (``pool=``); the one that made
    it closes it: ``await model.aclose()`` or ``async with model:``, or
    ``async with ConnectionPool() as pool:`` for a shared one. Closing closes
    the idle connections at once; busy ones close when their request ends;
    after it, a request is a ``ModelRequestError``. A pool dropped unclosed
    closes its idle sockets when it is collected. It works in one trio run at
    a time: used from a new run, it drops what the last one left.
    """

    __slots__ = (
        "__weakref__",
        "_closed",
        "_handoffs",
        "_idle",
        "_lot",
        "_open",
        "_token",
        "idle_seconds",
        "max_connections",
        "max_idle",
    )

    def __init__(
        self, *, max_connections: int = 100, max_idle: int = 20, idle_seconds: float = 30.0
    ) -> None:
        for name, value in (("max_connections", max_connections), ("max_idle", max_idle)):
            if type(value) is not int or value < (1 if name == "max_connections" else 0):
                least = 1 if name == "max_connections" else 0
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if type(idle_seconds) not in (int, float) or not idle_seconds >= 0:
            raise ValueError(f"idle_seconds must be a number >= 0, got {idle_seconds!r}")
        self.max_connections = max_connections
        self.max_idle = max_idle
        self.idle_seconds = float(idle_seconds)
        self._idle: list[Connection] = []  # oldest first
        self._open = 0  # connections open or being opened, busy or idle
        self._lot = trio.lowlevel.ParkingLot()
        self._handoffs = 0  # waiters woken for a freed slot who have not taken it yet
        self._token: Any = None  # the trio run the connections belong to
        self._closed = False
        weakref.finalize(self, _close_all, self._idle)

    def __repr__(self) -> str:
        return (
            f"ConnectionPool(max_connections={self.max_connections}, max_idle={self.max_idle}, "
            f"idle_seconds={self.idle_seconds})"
        )

    @property
    def connections(self) -> int:
        """Connections open now (or being opened), busy or idle."""
        return self._open

    @property
    def idle(self) -> int:
        """Connections open and waiting for a request."""
        return len(self._idle)

    async def __aenter__(self) -> ConnectionPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the idle connections and refuse requests from now on; the busy ones
        close when their request ends. Cancellation cannot interrupt it (there is
        nothing to wait for)."""
        self._closed = True
        self._drop_idle()
        self._handoffs += len(self._lot.unpark_all())  # they wake up to the closed pool
        await trio.lowlevel.checkpoint()

    def _drop_idle(self) -> None:
        self._open -= len(self._idle)
        _close_all(self._idle)

    def _enter_run(self) -> None:
        """Forget what another trio run left (its connections are unusable here)."""
        token = trio.lowlevel.current_trio_token()
        if token is not self._token:
            self._drop_idle()
            self._token = token
            self._open = self._handoffs = 0
            self._lot = trio.lowlevel.ParkingLot()

    def _admit(self, origin: Origin, now: float) -> tuple[Connection | str, list[Connection]]:
        """Who serves a request to ``origin`` now, and the idle connections to close
        (expired, or making room), decided on the pool's state alone (no I/O):
        an idle connection to it (taken out of the pool; it may still turn out
        stale), ``_OPEN`` (a slot is reserved: the caller opens a connection, or
        gives the slot back with ``forget``) or ``_WAIT``. When the pool is full,
        the oldest idle connection to another origin makes room."""
        idle = self._idle
        dropped = [c for c in idle if now >= c.expires]
        if dropped:
            idle[:] = [c for c in idle if now < c.expires]
            self._open -= len(dropped)
        for at in range(len(idle) - 1, -1, -1):  # the newest first: the least likely stale
            if idle[at].origin == origin:
                return idle.pop(at), dropped
        if self._open < self.max_connections:
            self._open += 1
            return _OPEN, dropped
        if idle:  # its slot goes to the new connection
            return _OPEN, [*dropped, idle.pop(0)]
        return _WAIT, dropped

    async def connection(
        self, origin: Origin, open_new: Callable[[], Awaitable[Connection]], *, fresh: bool = False
    ) -> Connection:
        """A connection to ``origin``: a pooled one that still looks alive, or a new
        one from ``open_new``; with ``fresh``, always a new one. Waits while
        ``max_connections`` are busy, in turn: a request that waited goes before
        any that comes later. Cancelled while it waits or connects, it holds
        nothing."""
        woken = False
        while True:
            self._check_open()
            self._enter_run()
            if not woken and (len(self._lot) or self._handoffs):
                taken: Connection | str = _WAIT  # others wait already: after them
            else:
                taken, dropped = self._admit(origin, trio.current_time())
                for connection in dropped:
                    connection.close_now()
            if taken == _WAIT:
                await self._lot.park()
                self._handoffs -= 1
                woken = True
                continue
            if type(taken) is Connection:
                if not fresh and taken.reusable_now(trio.current_time()):
                    return await self._hand_out(taken)
                taken.close_now()  # stale, or a fresh one was asked for
                self._open -= 1
                continue
            opened = None
            try:
                opened = await open_new()
            finally:
                if opened is None:
                    self.forget()
            return opened

    async def _hand_out(self, connection: Connection) -> Connection:
        """``connection``, after a checkpoint (every request takes one); cancelled
        there, it goes back to the pool."""
        handed = False
        try:
            await trio.lowlevel.checkpoint()
            handed = True
        finally:
            if not handed and self._closed:
                connection.close_now()
                self.forget()
            elif not handed:
                self._idle.append(connection)
                self._wake_one()
        return connection

    def _check_open(self) -> None:
        if self._closed:
            raise ModelRequestError(
                "this model's connection pool was closed (model.aclose() or the end of "
                "its async with): make a new model, or give it an open pool"
            )

    def _wake_one(self) -> None:
        """A slot or a connection came free: the longest waiting request gets it."""
        if self._lot.unpark():
            self._handoffs += 1

    def give_back(self, connection: Connection, server_seconds: float | None = None) -> None:
        """Return a connection whose response was read to the end, to serve another
        request for ``idle_seconds`` at most, or ``server_seconds`` (the server's
        ``Keep-Alive: timeout``, less a second for the trip) if that is shorter;
        closed instead if the pool is closed, keeps no idle connections, or the
        connection belongs to another run."""
        connection.served += 1
        keep = self.idle_seconds
        if server_seconds is not None:
            keep = min(keep, server_seconds - 1)
        connection.expires = trio.current_time() + keep
        if (
            self._closed
            or self.max_idle == 0
            or self._token is not trio.lowlevel.current_trio_token()
        ):
            connection.close_now()
            self.forget()
            return
        idle = self._idle
        idle.append(connection)
        if len(idle) > self.max_idle:
            idle.pop(0).close_now()
            self._open -= 1
        self._wake_one()

    def forget(self) -> None:
        """A connection this pool counted is closed (or was never opened): its slot
        is free for a waiting request."""
        self._open -= 1
        self._wake_one()


def _close_all(connections: list[Connection]) -> None:
    """Close these idle connections' sockets now (also from a finalizer, with no
    trio run: nothing here awaits)."""
    for connection in connections:
        connection.close_now()
    connections.clear()
