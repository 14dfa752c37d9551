"""What both provider adapters share: a small HTTP/1.1 streaming client on trio.
HTTP errors mapped to our error classes are in _errors.py, the SSE parser in
_sse.py, the gzip and deflate decoder in _inflate.py, keeping secrets out of
messages in _secrets.py."""

from __future__ import annotations

import html
import logging
import re
import ssl
import sys
import time
import urllib.parse
from functools import partial
from typing import TYPE_CHECKING

import trio

from ..._log import PROVIDERS, safe_url
from ...model import ModelError, ModelResponseError, TransientModelError
from ._connection import Connection, Origin, SendFailed, StaleConnection, connect
from ._connection import default_tls_context as default_tls_context
from ._errors import error_for_status, error_text, lenient
from ._pool import ConnectionPool
from ._proxy import absolute_target, proxy_answered, refused
from ._wire import BodyReader, HeadReader, UntilCloseReader, body_reader, keep_alive

if TYPE_CHECKING:
    from ._proxy import Proxy
from ._inflate import Inflater, content_coding, supported
from ._redirect import Redirects, request_target
from ._secrets import CUT, error_read_limit
from ._secrets import MAX_ERROR_TEXT as MAX_ERROR_TEXT  # moved; still importable from here
from ._secrets import Redactor as Redactor
from ._secrets import scrub_error as scrub_error
from ._sse import MAX_EVENT_BYTES as MAX_EVENT_BYTES  # moved; still importable from here
from ._sse import SSEParser as SSEParser

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""Bytes of a JSON body answering a streamed request (a server that ignored
``stream``); more is refused."""
PREVIEW_CHARS = 200
"""Characters of an unexpected 200 body (HTML, a whole JSON document) its error quotes."""
_SCRIPT = re.compile(r"<(?:script|style)\b[^<>]*>[^<]*", re.IGNORECASE)  # and its text
_TAG = re.compile(r"<[^<>]*>")  # linear: no scan past the next "<"
_SSE_START = re.compile(rb"(?:data|event|id|retry)?:")  # a field, or a comment
_DRAIN_BYTES = 65536
"""Body bytes read after the provider said the message is over, to reach the
body's end and keep the connection; more, and it is closed instead."""
_DRAIN_SECONDS = 1.0
"""The longest wait for those bytes."""


class HTTPStream:
    """One streaming POST over HTTP/1.1 on trio streams (TLS for https), on a
    connection from ``pool`` (a ``ConnectionPool``: kept alive and reused) or,
    without one, its own connection, closed at the end. No async generators
    anywhere (nothing is left for a finalizer to warn about).

    A connection goes back to the pool only when the body was read exactly to
    its end and the server lets it stay open; ``aclose`` before that (or a
    cancellation) closes it. A pooled connection that fails before any byte of
    the response (it went stale while idle) is replaced by a fresh one, once.
    ``connect_seconds`` bounds connecting (through ``proxy``, a ``_proxy.Proxy``,
    if given, and the TLS handshake), ``read_seconds`` each wait for the server
    to take the next piece of the request (a write timeout) or to send the next
    bytes; all three failures are transient. Bodies may be chunked, sized or
    close-delimited, and gzip or deflate although ``accept-encoding: identity``
    is sent.

    A 200 that is not an event stream is refused at ``open``: HTML (a captive
    portal, a proxy's page) and a JSON error object with the server's text. Any
    other JSON 200 (a whole completion: a server that ignored ``stream``) is read
    and kept as ``document`` for an adapter that can take it; reading events
    from it is a ``ModelResponseError``.

    Its errors quote what the server sent as it is: ``secret`` (the adapter's
    ``Redactor`` for its key) is what ``SSEModelStream`` scrubs them with.
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        body: bytes,
        provider: str,
        secret: Redactor | None,
        connect_seconds: float,
        read_seconds: float,
        tls_context: ssl.SSLContext | None = None,
        pool: ConnectionPool | None = None,
        proxy: Proxy | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        self._origin = Origin(parts.scheme, parts.hostname, port, tls_context, proxy)
        self._url = url
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        host_header = host if parts.port is None else f"{host}:{parts.port}"
        lines = [f"host: {host_header}", f"content-length: {len(body)}"]
        if pool is None:
            lines.append("connection: close")
        given = {k.lower() for k in headers}
        if "user-agent" not in given:
            lines.append("user-agent: trio-agent")
        if "accept-encoding" not in given:
            lines.append("accept-encoding: identity")  # a proxy may compress anyway
        if proxy is not None and self._origin.forwarded and proxy.authorization:
            lines.append(f"proxy-authorization: {proxy.authorization}")
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self._fields = ("\r\n".join(lines) + "\r\n\r\n").encode()  # the head after its first line
        self._head = self._request_line(url) + self._fields
        self._body = body
        self._provider = provider
        self.secret = secret  # scrubbed out of every error, in-stream ones too
        self._pool = pool
        self._connect_seconds = connect_seconds
        self._read_seconds = read_seconds
        self._connection: Connection | None = None
        self._reader: BodyReader = UntilCloseReader(provider)
        self._keep: tuple[bool, float | None, int | None] = (False, None, None)
        self._parser = SSEParser()
        self._inflater: Inflater | None = None  # a gzip or deflate body's decoder
        self.document: bytes | None = None  # a JSON 200's whole body (not a stream)
        self._ahead: bytes | None = None  # decoded body bytes read at open, not yet parsed
        self._status: int | None = None  # the response's, once its head is read

    def _request_line(self, url: str) -> bytes:
        target = absolute_target(url) if self._origin.forwarded else request_target(url)
        return f"POST {target} HTTP/1.1\r\n".encode()

    async def open(self) -> None:
        """Connect (or take a pooled connection), send the request and read the
        response head; on any failure, cancellation too, the connection is closed
        before the error propagates."""
        opened = False
        started = time.perf_counter() if PROVIDERS.isEnabledFor(logging.DEBUG) else None
        try:
            await self._open()
            opened = True
        finally:
            if started is not None:
                self._log(time.perf_counter() - started, sys.exc_info()[1])
            if not opened:
                await self.aclose()

    def _log(self, elapsed: float, error: BaseException | None) -> None:
        """DEBUG: the request (method, URL without its query), its status or what
        failed, and how long it took; never a header, a body or a key."""
        status = self._status
        how = f"{status}" if status is not None else "no answer"
        if error is not None:
            how += f", {type(error).__name__}"
        PROVIDERS.debug(
            "%s POST %s: %s in %.3f s", self._provider, safe_url(self._url), how, elapsed
        )

    async def _connect(self, fresh: bool) -> Connection:
        origin = self._origin
        if self._pool is None:
            connection = await connect(origin, self._connect_seconds, self._provider)
        else:
            connection = await self._pool.connection(
                origin,
                partial(connect, origin, self._connect_seconds, self._provider),
                fresh=fresh,
            )
        self._connection = connection
        return connection

    async def _exchange(self) -> tuple[int, dict[str, str]]:
        """Send the request and read the response head, following a 307 or 308
        within the origin (``Redirects``: the redirect's connection is closed,
        unread, and the same request sent again), and sending it again on a
        fresh connection if a pooled one turns out stale."""
        redirects = Redirects(self._url, self._provider)
        fresh = False
        while True:
            connection = await self._connect(fresh)
            try:
                status, headers = await self._send(connection)
            except StaleConnection:
                await self.aclose()
                fresh = True
                continue
            fresh = False
            target = redirects.follow(status, headers)
            if target is None:
                self._url = redirects.url  # where the answer came from
                return status, headers
            await self.aclose()
            if self._origin.forwarded:  # the target as follow() quoted it, in absolute form
                target = absolute_target(urllib.parse.urljoin(redirects.url, target))
            self._head = f"POST {target} HTTP/1.1\r\n".encode() + self._fields

    async def _send(self, connection: Connection) -> tuple[int, dict[str, str]]:
        """Send the request and read the response head. A server may answer before
        it has taken the whole request and then close (an early 413, a 401): if
        the send fails, an answer already there is the response; if none is, the
        send's failure stands."""
        try:
            await connection.send(self._head + self._body, self._read_seconds, self._provider)
        except SendFailed as failed:
            try:
                answer = await self._read_head(connection)
            except (StaleConnection, ModelError):
                raise failed.error from None
            self._keep = (False, None, None)  # half a request went: never reused
            return answer
        return await self._read_head(connection)

    async def _read_head(self, connection: Connection) -> tuple[int, dict[str, str]]:
        """The status and headers of the response (past any interim 1xx ones);
        the body's reader is ready for what came after them."""
        reader = HeadReader(self._provider)
        read = False  # any byte of the response
        found = None
        while found is None:
            data = await connection.receive(self._read_seconds, self._provider)
            if not data:
                raise TransientModelError(
                    f"{self._provider}: the response head was cut off"
                    if read
                    else f"{self._provider}: the server closed the connection before answering"
                )
            read = True
            found = reader.feed(data)
        status, headers, rest = found
        self._reader = body_reader(self._provider, status, headers, rest)
        self._keep = keep_alive(headers)
        connection.requests_left = self._keep[2]
        return status, headers

    async def _open(self) -> None:
        status, headers = await self._exchange()
        self._status = status
        coding = content_coding(headers)
        if coding and supported(coding):
            self._inflater = Inflater(coding, self._provider)
        if status != 200:
            body = f"[a body in the {coding!r} content encoding]".encode()
            if not coding or supported(coding):
                try:
                    body = (await self._read_body(error_read_limit(self.secret)))[0]
                except ModelError as exc:  # cut off, or compressed bytes that do not decode
                    body = f"[{exc}]".encode()
            if self._origin.forwarded and proxy_answered(status, headers, body):
                # the proxy's refusal, not the API's: worded as through a tunnel
                raise refused(self._origin.proxy, status, headers, self._url, self._provider)
            raise error_for_status(self._provider, status, body, headers)
        if coding and not supported(coding):
            raise ModelResponseError(
                f"{self._provider} answered in the {coding!r} content encoding, which this "
                "client does not decode (it asked for none: accept-encoding: identity; "
                "gzip and deflate are decoded)"
            )
        kind = headers.get("content-type", "").partition(";")[0].strip().lower()
        is_json = kind == "application/json" or kind.endswith("+json")
        if is_json or kind in ("text/html", "application/xhtml+xml"):
            start = await self._read_body(6, strip=True)  # enough to tell an event stream
            if _SSE_START.match(start[0].lstrip()):  # one under the wrong label: read it so
                self._ahead = start[0]
            elif is_json:
                await self._take_document(start)
            else:
                raise await self._html_error(start)

    async def _read_body(
        self, limit: int, start: tuple[bytes, bool] = (b"", False), strip: bool = False
    ) -> tuple[bytes, bool]:
        """The (decoded) body, after what ``start`` read of it, up to about ``limit``
        bytes (not counting leading blanks, with ``strip``), and whether it ended.
        Never more than ``MAX_DOCUMENT_BYTES`` (and a read): a body of blanks
        without end is not read, and held, for ever."""
        body, ended = start
        pieces = [body]  # joined once: adding each piece to the body is quadratic
        size = len(body)
        counted = len(body.lstrip()) if strip else size  # bytes that count toward limit
        while not ended and counted < limit and size <= MAX_DOCUMENT_BYTES:
            piece = await self._decoded_bytes()
            if piece is None:
                ended = True
            else:
                pieces.append(piece)
                size += len(piece)
                counted += len(piece.lstrip()) if strip and not counted else len(piece)
        return b"".join(pieces), ended

    async def _take_document(self, start: tuple[bytes, bool]) -> None:
        """A JSON 200: an error object is raised with the server's text; anything
        else is kept whole as ``document``."""
        body, ended = await self._read_body(MAX_DOCUMENT_BYTES + 1, start)
        if not ended or len(body) > MAX_DOCUMENT_BYTES:
            raise ModelResponseError(
                f"{self._provider} answered HTTP 200 with a JSON body (not an event stream) "
                f"longer than {MAX_DOCUMENT_BYTES} bytes"
            )
        found = error_text(lenient(body))
        if found is not None:
            kind, message = found
            raise ModelResponseError(
                f"{self._provider} answered HTTP 200 with an error{f' {kind}' if kind else ''}"
                f": {message}"
            )
        self.document = self._ahead = body

    async def _html_error(self, start: tuple[bytes, bool]) -> ModelResponseError:
        """The error for an HTML 200: its first characters of text, key redacted."""
        body, ended = await self._read_body(error_read_limit(self.secret), start)
        raw = body.decode("utf-8", "replace")
        if not ended and self.secret is not None:
            raw = raw[: -self.secret.reach]  # a key the read cut in two: never half of it
        text = html.unescape(_TAG.sub(" ", _SCRIPT.sub(" ", raw)))
        return ModelResponseError(
            f"{self._provider} answered HTML (HTTP 200, text/html), not an event stream "
            f"(a proxy's or a captive portal's page?): {self._preview(text)}"
        )

    def _preview(self, text: str) -> str:
        """The first ``PREVIEW_CHARS`` of ``text``, blanks collapsed, key redacted
        before the cut (a key the cut crosses goes whole)."""
        text = " ".join(text.split())
        if self.secret is not None:
            text = self.secret.redact(text)
        return text[:PREVIEW_CHARS] + (CUT if len(text) > PREVIEW_CHARS else "")

    async def _body_bytes(self) -> bytes | None:
        """The next bytes of the body, or None at its end (where a pooled
        connection goes back to the pool). A body cut off before its announced
        end is a transient error."""
        reader = self._reader
        while not (data := reader.read()):
            if reader.done:
                self._release()
                return None
            assert self._connection is not None
            more = await self._connection.receive(self._read_seconds, self._provider)
            if more:
                reader.feed(more)
            else:
                reader.closed()
        return data

    def _release(self) -> None:
        """The body ended: its connection goes back to the pool if the server lets
        it stay open and sent nothing after the body (else ``aclose`` closes it)."""
        connection = self._connection
        if connection is None or not self._may_keep() or self._reader.leftover:
            return
        if self._inflater is not None and self._inflater.cut_off:
            return
        assert self._pool is not None
        self._connection = None
        self._pool.give_back(connection, self._keep[1])

    def _may_keep(self) -> bool:
        """Whether this response's connection may serve another request once its
        body ends: pooled, kept alive by the server, and framed (not ended by
        the close)."""
        return (
            self._pool is not None and self._keep[0] and type(self._reader) is not UntilCloseReader
        )

    async def drain(self) -> None:
        """Read what is left of the body once the provider said the message is over
        (the end of the last chunk, usually), so that the connection can be
        reused: at most ``_DRAIN_BYTES`` within ``_DRAIN_SECONDS``, and only if it
        could be reused at all. Anything wrong on the way, and the connection is
        simply closed by ``aclose``: the message is whole already."""
        if self._connection is None or not self._may_keep():
            return
        read = 0
        with trio.move_on_after(_DRAIN_SECONDS):
            try:
                while read <= _DRAIN_BYTES:
                    data = await self._decoded_bytes()
                    if data is None:
                        return
                    read += len(data)
            except ModelError:
                return

    @property
    def events_ended(self) -> bool:
        """Whether the stream ended with ``data: [DONE]`` (``SSEParser.done``): no
        event follows; what is left of the body is only its end."""
        return self._parser.done

    async def next_events(self) -> list[bytes] | None:
        """The data of the events completed by the next piece of the body (none
        past ``data: [DONE]``: see ``events_ended``), or None at its end."""
        if self._ahead is not None:  # rare: the body's start was read to look at it
            if self.document is not None:
                text = self.document.decode("utf-8", "replace")
                raise ModelResponseError(
                    f"{self._provider} answered one JSON document (HTTP 200, application/json)"
                    f", not an event stream: {self._preview(text)}"
                )
            ahead, self._ahead = self._ahead, None
            return self._parser.feed(ahead)
        if self._inflater is None:  # the common case, one frame less a read
            data = await self._body_bytes()
        else:
            data = await self._decoded_bytes()
        if data is None:
            return None
        return self._parser.feed(data)

    async def _decoded_bytes(self) -> bytes | None:
        """``_body_bytes``, decoded from gzip or deflate if the body came so (what a
        read inflated past one piece first: see ``Inflater.backlog``)."""
        if self._inflater is not None and self._inflater.backlog:
            await trio.lowlevel.checkpoint()  # a piece per read, as from the socket
            return self._inflater.feed(b"")
        data = await self._body_bytes()
        return data if self._inflater is None else self._inflate(data)

    def _inflate(self, data: bytes | None) -> bytes | None:
        assert self._inflater is not None
        if data is not None:
            return self._inflater.feed(data)
        if self._inflater.cut_off:
            raise TransientModelError(f"{self._provider}: the compressed body was cut off")
        return None

    async def aclose(self) -> None:
        """Close the connection unless it went back to the pool (shielded: a
        cancelled request closes it too, and never returns it)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                await connection.aclose()
            finally:
                if self._pool is not None:
                    self._pool.forget()
