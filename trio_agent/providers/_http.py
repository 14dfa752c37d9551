"""What both provider adapters share: a small HTTP/1.1 streaming client on trio.
HTTP errors mapped to our error classes are in _errors.py, the SSE parser in
_sse.py, the gzip and deflate decoder in _inflate.py, keeping secrets out of
messages in _secrets.py."""

from __future__ import annotations

import html
import re
import ssl
import urllib.parse
from itertools import repeat

import trio

from ..model import ModelResponseError, TransientModelError
from ._errors import error_for_status, error_text, lenient, transport_error
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
_SEND_PIECE = 64 * 1024
"""Bytes of the request sent under one write deadline."""
_SCRIPT = re.compile(r"<(?:script|style)\b[^<>]*>[^<]*", re.IGNORECASE)  # and its text
_TAG = re.compile(r"<[^<>]*>")  # linear: no scan past the next "<"
_SSE_START = re.compile(rb"(?:data|event|id|retry)?:")  # a field, or a comment

# A chunk's size line, with the line end of the chunk before it (HTTP/1.1 chunked).
_CHUNK_HEAD = re.compile(rb"\r\n([0-9A-Fa-f]+)(?:;[^\r\n]*)?\r\n")


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


class HTTPStream:
    """One streaming POST over HTTP/1.1 on trio streams (TLS for https).

    No async generators anywhere (nothing is left for a finalizer to warn
    about) and no connection pool: closing it closes the socket at once,
    also on cancellation. ``connect_seconds`` bounds connecting (and the TLS
    handshake), ``read_seconds`` each wait for the server to take the next
    piece of the request (a write timeout) or to send the next bytes; all three
    failures are transient. Bodies may be chunked, sized or closed-delimited,
    and gzip or deflate although ``accept-encoding: identity`` is sent.

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
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._url = url
        host = f"[{self._host}]" if ":" in self._host else self._host
        host_header = host if parts.port is None else f"{host}:{parts.port}"
        lines = [
            f"host: {host_header}",
            f"content-length: {len(body)}",
            "connection: close",
            "user-agent: trio-agent",
        ]
        if not any(k.lower() == "accept-encoding" for k in headers):
            lines.append("accept-encoding: identity")  # a proxy may compress anyway
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self._fields = ("\r\n".join(lines) + "\r\n\r\n").encode()  # the head after its first line
        self._head = f"POST {request_target(url)} HTTP/1.1\r\n".encode() + self._fields
        self._body = body
        self._provider = provider
        self.secret = secret  # scrubbed out of every error, in-stream ones too
        self._tls_context = tls_context
        self._connect_seconds = connect_seconds
        self._read_seconds = read_seconds
        self._stream: trio.abc.Stream | None = None
        self._buffer = b""
        self._eof = False
        self._chunked = False
        self._remaining: int | None = None  # bytes left of a sized body, or of a chunk
        self._parser = SSEParser()
        self._inflater: Inflater | None = None  # a gzip or deflate body's decoder
        self.document: bytes | None = None  # a JSON 200's whole body (not a stream)
        self._ahead: bytes | None = None  # decoded body bytes read at open, not yet parsed

    async def _receive(self) -> bytes | bytearray:
        assert self._stream is not None
        try:
            # fail_after without its generator-based context manager (once per read)
            with trio.CancelScope(deadline=trio.current_time() + self._read_seconds):
                return await self._stream.receive_some(65536)
        except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
            raise transport_error(self._provider, exc) from None
        raise TransientModelError(  # only the deadline above ends the scope without a read
            f"{self._provider}: no data for {self._read_seconds} s (read timeout)"
        )

    async def _fill(self) -> bool:
        data = await self._receive()
        if not data:
            self._eof = True
            return False
        self._buffer += data
        return True

    async def open(self) -> None:
        """Connect, send the request and read the response head; on any failure the
        connection is closed before the error propagates."""
        opened = False
        try:
            await self._open()
            opened = True
        finally:
            if not opened:
                await self.aclose()

    async def _exchange(self) -> tuple[int, dict[str, str]]:
        """Connect, send the request and read the response head, following a 307 or
        308 within the origin (``Redirects``): the redirect's connection is closed,
        unread, and the same request sent again on a new one."""
        redirects = Redirects(self._url, self._provider)
        while True:
            await self._send(await self._connect())
            status, headers = await self._read_head()
            target = redirects.follow(status, headers)
            if target is None:
                return status, headers
            await self.aclose()
            self._buffer, self._eof = b"", False
            self._head = f"POST {target} HTTP/1.1\r\n".encode() + self._fields

    async def _connect(self) -> trio.abc.Stream:
        try:
            with trio.fail_after(self._connect_seconds):
                stream: trio.abc.Stream = await trio.open_tcp_stream(self._host, self._port)
                self._stream = stream
                if self._tls:
                    context = self._tls_context or await default_tls_context()
                    stream = self._stream = trio.SSLStream(
                        stream, context, server_hostname=self._host, https_compatible=True
                    )
                    await stream.do_handshake()
                return stream
        except trio.TooSlowError:
            raise TransientModelError(
                f"{self._provider}: could not connect within {self._connect_seconds} s"
            ) from None
        except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
            raise transport_error(self._provider, exc) from None

    async def _open(self) -> None:
        status, headers = await self._exchange()
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not self._chunked and "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise ModelResponseError(
                    f"{self._provider}: bad content-length {headers['content-length']!r}"
                ) from None
        coding = content_coding(headers)
        if coding and supported(coding):
            self._inflater = Inflater(coding, self._provider)
        if status != 200:
            body = f"[a body in the {coding!r} content encoding]".encode()
            if not coding or supported(coding):
                try:
                    body = (await self._read_body(error_read_limit(self.secret)))[0]
                except ModelResponseError as exc:  # compressed bytes that do not decode
                    body = f"[{exc}]".encode()
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

    async def _send(self, stream: trio.abc.Stream) -> None:
        """Send the request in pieces, each within ``read_seconds`` (a server that
        stops taking the body is a write timeout, not a failed connection)."""
        request = memoryview(self._head + self._body)
        try:
            for at in range(0, len(request), _SEND_PIECE):
                with trio.CancelScope(deadline=trio.current_time() + self._read_seconds):
                    await stream.send_all(request[at : at + _SEND_PIECE])
                    continue
                raise TransientModelError(  # only the deadline ends the scope early
                    f"{self._provider}: could not send the request in time: the server "
                    f"took no more of it for {self._read_seconds} s (write timeout, after "
                    f"{at} of {len(request)} bytes)"
                )
        except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
            raise transport_error(self._provider, exc) from None

    async def _read_head(self) -> tuple[int, dict[str, str]]:
        """The status and headers of the response, past any interim 1xx ones (100
        Continue, 103 Early Hints)."""
        while True:
            while b"\r\n\r\n" not in self._buffer:
                if len(self._buffer) > 65536 or not await self._fill():
                    raise TransientModelError(f"{self._provider}: the response head was cut off")
            head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            try:
                status = int(status_line.split(" ", 2)[1])
            except (IndexError, ValueError):
                raise ModelResponseError(f"{self._provider}: not an HTTP response") from None
            if not 100 <= status < 200:
                return status, _headers(header_lines)

    async def _read_body(
        self, limit: int, start: tuple[bytes, bool] = (b"", False), strip: bool = False
    ) -> tuple[bytes, bool]:
        """The (decoded) body, after what ``start`` read of it, up to about ``limit``
        bytes (not counting leading blanks, with ``strip``), and whether it ended."""
        body, ended = start
        while not ended and len(body.lstrip() if strip else body) < limit:
            piece = await self._decoded_bytes()
            if piece is None:
                ended = True
            else:
                body += piece
        return body, ended

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

    def _chunks_in_buffer(self) -> bytes | None:
        """The data of the chunks in the buffer, between chunks, found in C: one regex
        split at the size lines, then every chunk's length checked against its size
        line. If they all agree, the split is the one a chunk-by-chunk walk finds
        (each size line starts right where the chunk before it ends); if any does
        not (a size line lookalike inside the data, blank lines, odd size lines) or
        no whole size line is there yet, None, and ``_body_bytes`` walks the chunks
        itself."""
        buffer = self._buffer
        parts = _CHUNK_HEAD.split(buffer if buffer[:2] == b"\r\n" else b"\r\n" + buffer)
        # parts: b"", size 1, data 1, ..., size n, what follows size line n
        if len(parts) < 3 or parts[0]:
            return None
        sizes = list(map(int, parts[1::2], repeat(16)))
        datas = parts[2::2]
        last, tail = sizes.pop(), datas.pop()
        if list(map(len, datas)) != sizes or 0 in sizes:
            return None
        if last == 0:  # the end (trailers, if any, are not read)
            self._chunked = False
            self._remaining = 0
            self._buffer = b""
        elif len(tail) >= last:
            datas.append(tail[:last])
            self._buffer = tail[last:]
        else:
            datas.append(tail)
            self._remaining = last - len(tail)
            self._buffer = b""
        return b"".join(datas)

    async def _body_bytes(self) -> bytes | None:
        """The next bytes of the body (chunked, sized or up to the close), or None at
        its end. A body cut off before its announced end is a transient error."""
        if self._chunked:  # the usual case first: whole chunks in a read, found in C
            if not self._buffer and not await self._fill():
                raise TransientModelError(
                    f"{self._provider}: a chunk was cut off"
                    if self._remaining
                    else f"{self._provider}: the body ended before its last chunk"
                )
            head = b""
            if self._remaining:  # the rest of the chunk the last read ended in
                head = self._buffer[: self._remaining]
                self._buffer = self._buffer[len(head) :]
                self._remaining -= len(head)
            if not self._remaining and self._buffer:
                data = self._chunks_in_buffer()
                if data is not None:
                    return head + data
            if head:
                return head
        if not self._chunked:
            if self._remaining == 0:
                return None
            if not self._buffer and not await self._fill():
                if self._remaining is not None:
                    raise TransientModelError(
                        f"{self._provider}: the body ended {self._remaining} bytes early"
                    )
                return None
            data, self._buffer = self._buffer, b""
            if self._remaining is not None:
                data = data[: self._remaining]
                self._remaining -= len(data)
            return data
        # Every chunk already in the buffer, in one piece, walking it by position
        # (slicing the buffer once per chunk would be quadratic in a read).
        out: list[bytes] = []
        buffer, at = self._buffer, 0
        while True:
            if self._remaining:  # inside a chunk
                available = len(buffer) - at
                if not available:
                    if out:
                        break
                    self._buffer = b""
                    if not await self._fill():
                        raise TransientModelError(f"{self._provider}: a chunk was cut off")
                    buffer, at = self._buffer, 0
                    continue
                take = min(available, self._remaining)
                out.append(buffer[at : at + take])
                at += take
                self._remaining -= take
                continue
            end = buffer.find(b"\r\n", at)
            if end == -1:
                if out:
                    break
                self._buffer = buffer[at:]
                if not await self._fill():
                    raise TransientModelError(
                        f"{self._provider}: the body ended before its last chunk"
                    )
                buffer, at = self._buffer, 0
                continue
            line = buffer[at:end]
            at = end + 2
            if not line:  # the CRLF after a chunk's data
                continue
            try:
                size = int(line.split(b";")[0], 16)
            except ValueError:
                raise ModelResponseError(f"{self._provider}: bad chunk size {line!r}") from None
            if size == 0:
                self._chunked = False
                self._remaining = 0  # the end (trailers, if any, are not read)
                break
            self._remaining = size
        self._buffer = buffer[at:]
        return b"".join(out) if out else None

    async def next_events(self) -> list[bytes] | None:
        """The data of the events completed by the next piece of the body, or None
        at its end."""
        if self._ahead is not None:  # rare: the body's start was read to look at it
            if self.document is not None:
                text = self.document.decode("utf-8", "replace")
                raise ModelResponseError(
                    f"{self._provider} answered one JSON document (HTTP 200, application/json)"
                    f", not an event stream: {self._preview(text)}"
                )
            ahead, self._ahead = self._ahead, None
            return self._parser.feed(ahead)
        data = await self._body_bytes()
        if self._inflater is not None:
            data = self._inflate(data)
        if data is None:
            return None
        return self._parser.feed(data)

    async def _decoded_bytes(self) -> bytes | None:
        """``_body_bytes``, decoded from gzip or deflate if the body came so."""
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
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1):  # a TLS close_notify must not hang us
                    await stream.aclose()


def _headers(lines: list[str]) -> dict[str, str]:
    """Response header lines as a lower-cased dict (repeated names: the last wins)."""
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers
