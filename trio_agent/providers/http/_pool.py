"""Keep-alive HTTP/1.1 connections shared by the requests of one or more models."""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final, final

import trio

from ...model import ModelRequestError
from ._connection import Connection, Origin

_OPEN: Final = "open"
"""``ConnectionPool._admit``: the caller may open a new connection."""
_WAIT: Final = "wait"
"""``ConnectionPool._admit``: every connection is busy; wait for one to come back."""


@final
class _Run:
    """A pool's connections in one trio run (sockets and the tasks waiting for
    them belong to the run that made them)."""

    __slots__ = ("handoffs", "idle", "lot", "open")

    def __init__(self) -> None:
        self.idle: list[Connection] = []  # oldest first
        self.open = 0  # connections open or being opened, busy or idle
        self.lot = trio.lowlevel.ParkingLot()  # requests waiting for a slot
        self.handoffs = 0  # of those, woken for a freed slot but not yet in


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
    closes its idle sockets when it is collected. Trio runs that use one pool
    (one after another, or at once in threads) each get their own connections
    and limits: a socket belongs to the run that opened it. What a finished
    run left is closed when the pool next sees a new run.
    """

    __slots__ = (
        "__weakref__",
        "_closed",
        "_current",
        "_runs",
        "_token",
        "idle_seconds",
        "max_connections",
        "max_idle",
    )

    def __init__(
        self, *, max_connections: int = 100, max_idle: int = 20, idle_seconds: float = 30.0
    ) -> None:
        for name, value, least in (
            ("max_connections", max_connections, 1),
            ("max_idle", max_idle, 0),
        ):
            if type(value) is not int or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if type(idle_seconds) not in (int, float) or not idle_seconds >= 0:
            raise ValueError(f"idle_seconds must be a number >= 0, got {idle_seconds!r}")
        self.max_connections = max_connections
        self.max_idle = max_idle
        self.idle_seconds = float(idle_seconds)
        self._runs: dict[Any, _Run] = {}  # by trio token
        self._token: Any = None  # the run last seen, and its state
        self._current = _Run()
        self._closed = False
        weakref.finalize(self, _close_runs, self._runs)

    def __repr__(self) -> str:
        return (
            f"ConnectionPool(max_connections={self.max_connections}, max_idle={self.max_idle}, "
            f"idle_seconds={self.idle_seconds})"
        )

    @property
    def connections(self) -> int:
        """Connections open now (or being opened), busy or idle."""
        return sum(run.open for run in self._runs.values())

    @property
    def idle(self) -> int:
        """Connections open and waiting for a request."""
        return sum(len(run.idle) for run in self._runs.values())

    async def __aenter__(self) -> ConnectionPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the idle connections and refuse requests from now on; the busy ones
        close when their request ends. Cancellation cannot interrupt it (there is
        nothing to wait for)."""
        self._closed = True
        current = trio.lowlevel.current_trio_token()
        for token, run in list(self._runs.items()):
            if token is current:
                _close_run(run)
                continue
            try:  # another run's state is that run's to change: done in it
                token.run_sync_soon(_close_run, run)
            except trio.RunFinishedError:  # nothing of it runs: nobody waits
                _close_run(run)
        await trio.lowlevel.checkpoint()

    def _run(self) -> _Run:
        """This trio run's part of the pool (made the first time it asks)."""
        token = trio.lowlevel.current_trio_token()
        if token is self._token:
            return self._current
        run = self._runs.get(token)
        if run is None:
            self._sweep()
            run = self._runs[token] = _Run()
        self._token, self._current = token, run
        return run

    def _sweep(self) -> None:
        """Close what finished trio runs left (their sockets are of no use now)."""
        for token, run in list(self._runs.items()):
            try:
                token.run_sync_soon(_nothing)
            except trio.RunFinishedError:
                _close_all(run.idle)
                del self._runs[token]

    def _admit(
        self, run: _Run, origin: Origin, now: float
    ) -> tuple[Connection | str, list[Connection]]:
        """Who serves a request to ``origin`` now, and the idle connections to close
        (expired, or making room), decided on the run's state alone (no I/O):
        an idle connection to it (taken out of the pool; it may still turn out
        stale), ``_OPEN`` (a slot is reserved: the caller opens a connection, or
        gives the slot back with ``forget``) or ``_WAIT``. When the pool is full,
        the oldest idle connection to another origin makes room."""
        idle = run.idle
        dropped = [c for c in idle if now >= c.expires]
        if dropped:
            idle[:] = [c for c in idle if now < c.expires]
            run.open -= len(dropped)
        for at in range(len(idle) - 1, -1, -1):  # the newest first: the least likely stale
            if idle[at].origin == origin:
                return idle.pop(at), dropped
        if run.open < self.max_connections:
            run.open += 1
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
        run = self._run()
        woken = False
        while True:
            self._check_open(run)
            if not woken and (len(run.lot) or run.handoffs):
                taken: Connection | str = _WAIT  # others wait already: after them
            else:
                taken, dropped = self._admit(run, origin, trio.current_time())
                for connection in dropped:
                    connection.close_now()
            if taken == _WAIT:
                await run.lot.park()
                run.handoffs -= 1
                woken = True
                continue
            if type(taken) is Connection:
                if not fresh and taken.reusable_now(trio.current_time()):
                    return await self._hand_out(run, taken)
                taken.close_now()  # stale, or a fresh one was asked for
                run.open -= 1
                continue
            opened = None
            try:
                opened = await open_new()
            finally:
                if opened is None:
                    self.forget()
            return opened

    async def _hand_out(self, run: _Run, connection: Connection) -> Connection:
        """``connection``, after a checkpoint (every request takes one); cancelled
        there, it goes back to the pool as if unused."""
        handed = False
        try:
            await trio.lowlevel.checkpoint()
            handed = True
        finally:
            if not handed:
                self._keep(run, connection)
        return connection

    def _check_open(self, run: _Run) -> None:
        if self._closed:
            run.handoffs += len(run.lot.unpark_all())  # the others learn it too
            raise ModelRequestError(
                "this model's connection pool was closed (model.aclose() or the end of "
                "its async with): make a new model, or give it an open pool"
            )

    def _wake_one(self, run: _Run) -> None:
        """A slot or a connection came free: the longest waiting request gets it."""
        if run.lot.unpark():
            run.handoffs += 1

    def give_back(self, connection: Connection, server_seconds: float | None = None) -> None:
        """Return a connection whose response was read to the end, to serve another
        request for ``idle_seconds`` at most, or ``server_seconds`` (the server's
        ``Keep-Alive: timeout``, less a second for the trip) if that is shorter;
        closed instead if the pool is closed or keeps no idle connections."""
        connection.served += 1
        keep = self.idle_seconds
        if server_seconds is not None:
            keep = min(keep, server_seconds - 1)
        connection.expires = trio.current_time() + keep
        self._keep(self._run(), connection)

    def _keep(self, run: _Run, connection: Connection) -> None:
        """Put an unused connection among the idle ones (the oldest closed past
        ``max_idle``), or close it if the pool keeps none now."""
        if self._closed or self.max_idle == 0:
            connection.close_now()
            run.open -= 1
        else:
            idle = run.idle
            idle.append(connection)
            if len(idle) > self.max_idle:
                idle.pop(0).close_now()
                run.open -= 1
        self._wake_one(run)

    def forget(self) -> None:
        """A connection this pool counted is closed (or was never opened): its slot
        is free for a waiting request."""
        run = self._run()
        run.open -= 1
        self._wake_one(run)


def _nothing() -> None:
    """What ``_sweep`` asks a run to do, to learn whether it still runs."""


def _close_all(connections: list[Connection]) -> None:
    """Close these idle connections' sockets now (also from a finalizer, with no
    trio run: nothing here awaits)."""
    for connection in connections:
        connection.close_now()
    connections.clear()


def _close_run(run: _Run) -> None:
    """A closed pool's part in one run: its idle connections closed, and every
    request waiting there woken (to find the pool closed)."""
    run.open -= len(run.idle)
    _close_all(run.idle)
    run.handoffs += len(run.lot.unpark_all())


def _close_runs(runs: dict[Any, _Run]) -> None:
    """The finalizer: every run's idle connections closed."""
    for run in runs.values():
        _close_all(run.idle)
