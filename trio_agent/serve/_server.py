"""``Server``: the session API on Hypercorn's trio worker, with its ``Hub``.

It binds, serves, and on ``stop()`` shuts down in order: no turn starts, the
turns under way finish (cancelled after ``drain_seconds``), the sessions'
ledgers close, every event stream ends once it sent what was published, and
then the listener closes.
"""

from __future__ import annotations

import inspect
import os
import socket
from functools import partial
from typing import Any, Final, final

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from ..session import Agent
from ._auth import check_binding, check_token
from ._hub import SERVE, Hub, OnDisconnect, SessionFactory
from ._place import JsonlPlace, Place
from ._routes import build_app

__all__ = ["Server"]

STREAMS_SECONDS: Final = 5.0  # event streams left open at shutdown are cut after this


@final
class _Sends:
    """ASGI middleware: each of ``app``'s sends runs in a task of ``nursery`` (one
    that outlives the connections), and the app waits for it, cancellably.
    Hypercorn shields its socket writes, so a request blocked in a send to a
    client that stopped reading (its connection open) could not be cancelled:
    the server never stopped. Cancelled here (the server stopping), the request
    returns, Hypercorn closes the connection, and the stuck write ends."""

    def __init__(self, app: Any, nursery: trio.Nursery) -> None:
        self.app = app
        self.nursery = nursery

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def sending(message: Any) -> None:
            done = trio.Event()
            failed: list[Exception] = []

            async def write() -> None:
                try:
                    await send(message)
                except Exception as exc:  # the request's to raise
                    failed.append(exc)
                finally:
                    done.set()

            self.nursery.start_soon(write)
            await done.wait()
            if failed:
                raise failed[0]

        await self.app(scope, receive, sending)


def _check_factory(factory: object) -> None:
    """``TypeError`` unless ``factory`` can be called as ``(store, session_id, new)``:
    an ``Agent`` (what ``trio-agent serve --agent`` takes) or a function of other
    arguments was taken, and every turn posted was then a 500."""
    if isinstance(factory, Agent):
        raise TypeError(
            "Server takes a session factory (store, session_id, new) -> Agent, not an Agent: "
            "pass trio_agent.fleet.agent_maker(model=..., tools=...), which makes and resumes "
            "each session's agent from the same options (`trio-agent serve --agent` does this "
            "with an Agent's options)"
        )
    if not callable(factory):
        raise TypeError(f"factory must be callable (store, session_id, new), got {factory!r:.100}")
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # no signature to tell: let it be tried
        return
    try:
        signature.bind(None, "", True)
    except TypeError:
        raise TypeError(
            f"factory must take (store, session_id, new), got {factory!r:.100} taking {signature}"
        ) from None


def _bind(host: str, port: int) -> str:
    return f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"


async def _bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port``, not listening yet (Hypercorn listens
    on it); ``OSError`` naming the address when it cannot be bound."""
    where = _bind(host, port)
    try:
        family, kind, proto, _, address = (
            await trio.socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
        )[0]
    except OSError as exc:
        raise OSError(exc.errno, f"cannot serve on {where}: {exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot serve on {where}: {exc}") from None
    return sock


@final
class Server:
    """Serves the sessions of the JSONL store ``store`` (a directory, made on first
    use), or of the PostgreSQL database ``dsn`` (``schema``: the store's schema;
    the ``[postgres]`` extra), each session's agent made by ``factory``
    (``SessionFactory``), on ``host``:``port`` (0: any free port). A session's
    events are logged beside its records (``DIR/.events/``, or the schema's
    ``serve_events`` table).

    ``token``: every request needs ``Authorization: Bearer <token>`` (the
    page sends it too; only the page's own files need none);
    required unless ``host`` is loopback (``ValueError`` at once otherwise).
    ``on_disconnect``: ``"detach"`` (a turn goes on when its readers go away)
    or ``"cancel"``. ``drain_seconds``: how long ``stop()`` lets turns finish.
    ``keepalive_seconds``: an event stream idle that long sends a ``:
    keep-alive`` comment. ``idle_seconds``: a session unused that long (no
    turn, no reader, no request) is released, its agent and ledger closed, and
    opened again by the next request. None: never, for either.
    """

    def __init__(
        self,
        factory: SessionFactory,
        *,
        store: str | os.PathLike[str] | None = None,
        dsn: str | None = None,
        schema: str = "trio_agent",
        host: str = "127.0.0.1",
        port: int = 8000,
        token: str | None = None,
        on_disconnect: OnDisconnect = "detach",
        drain_seconds: float = 30.0,
        keepalive_seconds: float | None = 15.0,
        idle_seconds: float | None = 600.0,
    ) -> None:
        _check_factory(factory)
        if type(port) is not int or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in 0..65535, got {port!r}")
        self.token = check_token(token)
        check_binding(host, self.token)
        self.host = host
        self.port = port
        if (store is None) == (dsn is None):
            raise TypeError("Server needs store= (a JSONL directory) or dsn= (PostgreSQL), one")
        place: Place
        if dsn is not None:
            from ._postgres import PostgresPlace  # psycopg: the [postgres] extra

            place = PostgresPlace(dsn, schema=schema)
        else:
            assert store is not None
            place = JsonlPlace(store)
        self.hub = Hub(
            place,
            factory,
            on_disconnect=on_disconnect,
            drain_seconds=drain_seconds,
            keepalive_seconds=keepalive_seconds,
            idle_seconds=idle_seconds,
        )
        self._hub_done = trio.Event()

    def stop(self) -> None:
        """Shut down gracefully (see the module); safe from any task, more than once."""
        self.hub.drain()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until ``stop()``; ``task_status.started(urls)`` once listening, with
        the bound URLs (``["http://127.0.0.1:PORT"]``). Cancellation: the turns end
        as cancelled, the ledgers close (shielded, bounded) and it propagates."""
        sock = await _bound_socket(self.host, self.port)
        config = Config()
        config.bind = [f"fd://{sock.detach()}"]  # Hypercorn's from here on
        config.graceful_timeout = STREAMS_SECONDS
        config.errorlog = SERVE  # Hypercorn's own errors, silent unless logging is configured
        async with trio.open_nursery() as nursery:
            app = _Sends(build_app(self.hub, token=self.token), nursery)
            await nursery.start(self._run_hub)
            urls = await nursery.start(
                partial(hypercorn_serve, app, config, shutdown_trigger=self._hub_done.wait)
            )
            task_status.started(urls)

    async def _run_hub(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self.hub.run(task_status=task_status)
        finally:
            self._hub_done.set()  # then the listener closes
            with trio.CancelScope(shield=True):
                await self.hub.place.aclose()
