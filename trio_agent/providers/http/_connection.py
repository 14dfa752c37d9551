"""One HTTP/1.1 connection on a trio stream: opening it (TCP, TLS, through a
proxy), sending and receiving under deadlines, and telling a pooled one that
went stale while it was idle."""

from __future__ import annotations

import os
import select
import ssl
from collections.abc import Callable
from typing import Any, final

import msgspec
import trio

from ...model import TransientModelError
from ._errors import transport_error
from ._proxy import open_tunnel

_SEND_PIECE = 64 * 1024
"""Bytes of the request sent under one write deadline."""
_READ_BYTES = 65536
"""Bytes asked of the stream per read."""
_FAILURES = (OSError, trio.BrokenResourceError, ssl.SSLError)
"""What a broken connection raises."""

_default_tls: ssl.SSLContext | None = None


async def default_tls_context() -> ssl.SSLContext:
    """The system's trust store as one ``SSLContext``, made at the first https
    request (reading the CA bundle takes milliseconds: in a worker thread, not
    on the trio thread) and shared by every connection after it."""
    global _default_tls
    if _default_tls is None:
        context = await trio.to_thread.run_sync(ssl.create_default_context)
        _default_tls = _default_tls or context
    return _default_tls


@final
class Origin(msgspec.Struct, frozen=True):
    """Where a connection goes, and how: what decides whether a pooled connection
    can serve a request. ``proxy`` (a ``_proxy.Proxy``) is the proxy it goes
    through, if any; ``tls_context`` the https context given (None: the system's)."""

    scheme: str
    host: str
    port: int
    tls_context: Any = None
    proxy: Any = None

    @property
    def forwarded(self) -> bool:
        """Whether requests go to a proxy in absolute form (plain http through a
        proxy; https goes through a ``CONNECT`` tunnel instead)."""
        return self.proxy is not None and self.scheme == "http"


class SendFailed(Exception):
    """Sending the request failed (a reset, a closed connection): ``error`` is what
    it stands for (a ``StaleConnection`` on a connection that served before,
    else a transient error), unless the server answered before it stopped
    taking the request (an early 413 or 401): the caller looks first."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


class StaleConnection(Exception):
    """A connection that served requests before failed (closed, reset) before any
    byte of the response to this one: it went stale in the pool, and the
    request can be sent again on a fresh connection. Never raised for a
    connection's first request, nor once a response byte came."""


@final
class Connection:
    """A trio stream (TLS for https) and what the pool needs to know about it.

    ``served`` counts the requests it answered to the end; ``received`` says
    whether the current one got any byte yet (what ``StaleConnection`` hangs
    on). The raw socket under any TLS is kept to look at it while idle and to
    close it without awaiting."""

    __slots__ = ("_socket", "expires", "origin", "received", "requests_left", "served", "stream")

    def __init__(self, stream: trio.abc.Stream, origin: Origin, socket: Any) -> None:
        self.stream = stream
        self.origin = origin
        self._socket = socket
        self.served = 0
        self.received = False
        self.expires = 0.0  # trio time after which an idle connection is not reused
        self.requests_left: int | None = None  # more it may serve: the server's Keep-Alive max

    def __repr__(self) -> str:
        return f"<Connection to {self.origin.scheme}://{self.origin.host}:{self.origin.port}>"

    async def send(self, data: bytes, seconds: float, provider: str) -> None:
        """Send ``data`` in pieces, each within ``seconds`` (a server that stops
        taking the request is a write timeout, not a failed connection).
        Cancellation leaves the connection half-written: close it."""
        self.received = False
        request = memoryview(data)
        try:
            for at in range(0, len(request), _SEND_PIECE):
                with trio.CancelScope(deadline=trio.current_time() + seconds):
                    await self.stream.send_all(request[at : at + _SEND_PIECE])
                    continue
                raise TransientModelError(  # only the deadline ends the scope early
                    f"{provider}: could not send the request in time: the server "
                    f"took no more of it for {seconds} s (write timeout, after "
                    f"{at} of {len(request)} bytes)"
                )
        except _FAILURES as exc:
            error = StaleConnection(exc) if self.served else transport_error(provider, exc)
            raise SendFailed(error) from None

    async def receive(self, seconds: float, provider: str) -> bytes:
        """The next bytes, ``b""`` at the end of the stream, waiting ``seconds`` at
        most (a read timeout). Cancellation leaves the response half-read: close
        the connection."""
        try:
            # fail_after without its generator-based context manager (once per read)
            with trio.CancelScope(deadline=trio.current_time() + seconds):
                data: bytes = await self.stream.receive_some(_READ_BYTES)  # type: ignore[assignment]
                if data:
                    self.received = True
                elif self.served and not self.received:
                    raise StaleConnection("closed before answering")
                return data
        except _FAILURES as exc:
            if self.served and not self.received:
                raise StaleConnection(exc) from None
            raise transport_error(provider, exc) from None
        raise TransientModelError(  # only the deadline above ends the scope without a read
            f"{provider}: no data for {seconds} s (read timeout)"
        )

    def reusable_now(self, now: float) -> bool:
        """Whether an idle connection can take a request: not expired, and nothing
        waiting on its socket (an idle connection has nothing to say; readable
        means the server closed it, or sent what it should not have)."""
        if now >= self.expires or self.requests_left == 0:
            return False
        stream = self.stream
        while isinstance(stream, trio.SSLStream):  # bytes TLS took in but did not hand out
            if _tls_pending(stream):
                return False
            stream = stream.transport_stream
        try:
            fd = self._socket.fileno()
            if fd < 0:
                return False
            if hasattr(select, "poll"):
                poller = select.poll()
                poller.register(fd, select.POLLIN)
                return not poller.poll(0)
            return not select.select([fd], [], [], 0)[0]  # pragma: no cover - no poll()
        except (OSError, ValueError):
            return False

    def close_now(self) -> None:
        """Close the socket at once, without a TLS goodbye (``close_notify``):
        what an idle connection gets when it is dropped, in any run or none (a
        finalizer: trio's ``close`` needs a run to tell; an idle socket has no
        task waiting on it, so the descriptor is simply closed)."""
        try:
            self._socket.close()
        except RuntimeError:  # no trio run here
            if self._socket.fileno() != -1:
                os.close(self._socket.detach())

    async def aclose(self) -> None:
        """Close the connection, shielded from cancellation and within a second (a
        TLS ``close_notify`` must not hang us)."""
        with trio.CancelScope(shield=True):
            with trio.move_on_after(1):
                await self.stream.aclose()
        self._socket.close()


def _tls_pending(stream: trio.SSLStream[Any]) -> bool:
    """Whether a TLS stream holds bytes it read from the socket and has not handed
    out: decrypted ones, or records not yet decrypted (a second record can come
    in the same read as the one that ended a body). trio does not say so in
    public: its TLS object and incoming buffer are looked at, and if a later
    trio renames them, the connection is taken as holding something (not
    reused), never as empty."""
    tls_object = getattr(stream, "_ssl_object", None)
    incoming = getattr(stream, "_incoming", None)
    if tls_object is None or incoming is None:
        return True
    return bool(tls_object.pending() or incoming.pending)


ConnectGuard = Callable[[Origin, str], None]
"""Called with the origin and the provider's name before every new connection;
raising refuses it (``trio_agent.testing.block_network``)."""
_guards: list[ConnectGuard] = []


def add_connect_guard(guard: ConnectGuard) -> None:
    """Have ``guard`` see (and maybe refuse) every new connection from now on."""
    _guards.append(guard)


def remove_connect_guard(guard: ConnectGuard) -> None:
    """Undo ``add_connect_guard`` (this one guard, by identity)."""
    for at, added in enumerate(_guards):
        if added is guard:
            del _guards[at]
            return


async def connect(origin: Origin, seconds: float, provider: str) -> Connection:
    """A new connection to ``origin``: TCP (to the proxy, if it goes through one),
    TLS to an https proxy, a ``CONNECT`` tunnel for https through a proxy, TLS
    to an https origin; all within ``seconds`` (a transient error past it).
    Cancelled or failed, it closes what it opened before the error propagates."""
    if _guards:
        await trio.lowlevel.checkpoint()  # as a connect would have
        for guard in _guards:
            guard(origin, provider)
    proxy = origin.proxy
    host, port = (origin.host, origin.port) if proxy is None else (proxy.host, proxy.port)
    where = "" if proxy is None else f" (through the proxy {proxy.shown})"
    tcp: trio.SocketStream | None = None
    done = False
    try:
        with trio.fail_after(seconds):
            tcp = await trio.open_tcp_stream(host, port)
            stream: trio.abc.Stream = tcp
            if proxy is not None and proxy.scheme == "https":
                stream = await _tls(stream, origin, proxy.host)
            if proxy is not None and origin.scheme == "https":
                await open_tunnel(stream, proxy, origin.host, origin.port, seconds, provider)
            if origin.scheme == "https":
                stream = await _tls(stream, origin, origin.host)
            done = True
            return Connection(stream, origin, tcp.socket)
    except trio.TooSlowError:
        raise TransientModelError(
            f"{provider}: could not connect within {seconds} s{where}"
        ) from None
    except _FAILURES as exc:
        raise transport_error(provider, exc, where) from None
    finally:
        if not done and tcp is not None:
            tcp.socket.close()


async def _tls(stream: trio.abc.Stream, origin: Origin, server: str) -> trio.SSLStream[Any]:
    context = origin.tls_context or await default_tls_context()
    tls = trio.SSLStream(stream, context, server_hostname=server, https_compatible=True)
    await tls.do_handshake()
    return tls
