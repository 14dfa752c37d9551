"""What both provider adapters share: a small HTTP/1.1 streaming client on trio,
a bytes-level SSE parser, HTTP errors mapped to our error classes, and keeping
secrets out of messages."""

from __future__ import annotations

import email.utils
import math
import re
import ssl
import time
import urllib.parse
from collections.abc import Mapping
from itertools import repeat
from typing import Any, final

import msgspec
import trio

from ..model import (
    ContextOverflowError,
    ModelAuthenticationError,
    ModelError,
    ModelRequestError,
    ModelResponseError,
    TransientModelError,
)

MAX_ERROR_TEXT = 2000
"""Characters an error message carries at most: server text beyond it is cut."""
MAX_ARGUMENT_BYTES = 64 * 1024
"""Raw bytes of one tool call's streamed arguments; more is a broken stream."""
MAX_EVENT_BYTES = 1024 * 1024
"""Bytes of one server-sent event; more is a broken stream."""

_TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}

# ------------------------------------------------------------------ secrets
#
# Any text a server sends may quote the API key: an echo of it in an error body
# or an in-stream error, or a header or chunk-size line made of it that we quote
# as malformed. Every error an adapter raises is scrubbed once, where it leaves
# the adapter (``SSEModelStream``, in _base.py): every form of the key is
# redacted, then the message is cut to ``MAX_ERROR_TEXT``.

_REDACTED = "[redacted]"
_CUT = " [cut]"
_LONGEST_FORM = 32
"""Characters one character of a key takes at most in a form ``_char_forms``
matches (a 4-byte UTF-8 character as four ``%2525XX``: 28)."""


def _char_forms(char: str) -> str:
    """A regex for one character of a key in every form a server or our own
    quoting may give it: raw or backslash-escaped (``\\/``), as a ``\\uXXXX``
    (``\\UXXXXXXXX``, a surrogate pair) or ``\\xXX`` escape, percent-encoded
    (``%XX`` per UTF-8 byte, double-encoded ``%25XX`` too) or as an HTML character
    reference; up to 4 backslashes before an escape (a repr of an escape doubles
    them). Longest forms first: the group is atomic."""
    code = ord(char)
    utf8 = char.encode()
    escape = r"\\{1,4}"
    forms = [f"{escape}U{code:08x}"]  # case-insensitive: \U0000002f, \u0000002F
    if code > 0xFFFF:  # JSON escapes an astral character as a surrogate pair
        high, low = divmod(code - 0x10000, 0x400)
        forms.append(f"{escape}u{0xD800 + high:04x}{escape}u{0xDC00 + low:04x}")
    else:
        forms.append(f"{escape}u{code:04x}")  # \u002f, \\u002F
    forms.append("".join(f"{escape}x{byte:02x}" for byte in utf8))  # repr of bytes
    if 0x7F < code < 0x100:
        forms.append(f"{escape}x{code:02x}")  # repr of a non-printable str character
    forms.append("".join(f"%(?:25){{0,2}}{byte:02x}" for byte in utf8))
    forms.append(f"&#(?:0{{0,4}}{code}|x0{{0,4}}{code:x});")
    forms.append(r"\\{0,4}" + re.escape(char))
    if code > 0x7F:  # its UTF-8 bytes read as latin-1 (a header we decoded so)
        forms.append(re.escape(utf8.decode("latin-1")))
    return f"(?>{'|'.join(forms)})"


def secret_pattern(secret: str) -> re.Pattern[str]:
    """The one definition of what ``secret`` looks like in a text: any mixture,
    character by character, of the forms of ``_char_forms`` (case-insensitive:
    redacting a little too much is harmless)."""
    return re.compile("".join(map(_char_forms, secret)), re.IGNORECASE)


@final
class Redactor:
    """Finds one API key in error texts, in any of its forms; built once per key
    (by the adapter), shared by all its streams. Its repr shows nothing of it."""

    __slots__ = ("_pattern", "reach")

    def __init__(self, secret: str) -> None:
        if not secret:
            raise ValueError("a Redactor needs a non-empty secret")
        self._pattern = secret_pattern(secret)
        self.reach = len(secret) * _LONGEST_FORM  # characters its longest form can take

    def __repr__(self) -> str:
        return "Redactor()"

    def redact(self, text: str) -> str:
        """``text`` with every form of the key replaced."""
        return self._pattern.sub(_REDACTED, text)


def scrub_text(text: str, redactor: Redactor | None) -> str:
    """``text`` with the key redacted, then cut to ``MAX_ERROR_TEXT`` characters.

    Only the text the cut can keep is searched: the first ``MAX_ERROR_TEXT`` plus
    the reach of one key, so that a key starting before the cap is seen whole.
    The last ``reach`` characters of that are dropped after redacting (a key cut
    in two by the first cut may stand there, and redacting shortens what comes
    before, so they could move under the cap): no part of a key survives a cut.
    """
    reach = redactor.reach if redactor is not None else 0
    searched = MAX_ERROR_TEXT + reach
    if len(text) > searched:
        text = text[:searched]
        if redactor is not None:
            text = redactor.redact(text)[:-reach]
        return text[: MAX_ERROR_TEXT - len(_CUT)] + _CUT
    if redactor is not None:
        text = redactor.redact(text)
    if len(text) > MAX_ERROR_TEXT:  # redacting a short key can lengthen the text
        text = text[: MAX_ERROR_TEXT - len(_CUT)] + _CUT
    return text


def scrub_error(exc: ModelError, redactor: Redactor | None) -> None:
    """Scrub an error (and the errors chained to it) in place, keeping its type and
    attributes: every text argument and note goes through ``scrub_text``, and a
    hidden ``__context__`` (suppressed by ``raise ... from None``: the parse error it
    replaced, which may quote the raw text) is dropped."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ModelError):
            error.args = tuple(
                scrub_text(arg, redactor) if type(arg) is str else arg for arg in error.args
            )
            notes = getattr(error, "__notes__", None)
            if type(notes) is list:
                notes[:] = [scrub_text(n, redactor) if type(n) is str else n for n in notes]
        if error.__suppress_context__:
            error.__context__ = None
        error = error.__cause__ if error.__cause__ is not None else error.__context__


def error_read_limit(redactor: Redactor | None) -> int:
    """Bytes of an error response to read: enough for all the text ``scrub_text``
    searches (a character takes up to 4 bytes of UTF-8)."""
    return 4 * (MAX_ERROR_TEXT + (redactor.reach if redactor is not None else 0))


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The ``retry-after`` hint in seconds (a number or an HTTP date), if any."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def error_for_status(
    provider: str, status: int, body: bytes, headers: Mapping[str, str]
) -> ModelError:
    """The error a failed HTTP response stands for (it quotes the body raw: see
    ``scrub_error``)."""
    text = body.decode("utf-8", "replace")
    message = f"{provider} answered HTTP {status}: {text}"
    lowered = text.lower()
    if status in _TRANSIENT_STATUS:
        return TransientModelError(message, retry_after=retry_after(headers))
    if status in (401, 403):
        return ModelAuthenticationError(message)
    if status == 413 or any(
        marker in lowered
        for marker in (
            "context_length_exceeded",
            "prompt is too long",
            "maximum context length",
            "too many tokens",
        )
    ):
        return ContextOverflowError(message)
    if status >= 500:
        return TransientModelError(message, retry_after=retry_after(headers))
    return ModelRequestError(message)


def stream_error(provider: str, kind: str, message: str) -> ModelError:
    """An error the provider reported inside the stream, typed by its kind (it
    quotes the provider raw: see ``scrub_error``)."""
    text = f"{provider} stream error {kind}: {message}"
    lowered = f"{kind} {message}".lower()
    if any(
        k in lowered
        for k in ("overloaded", "rate_limit", "server_error", "api_error", "timeout", "unavailable")
    ):
        return TransientModelError(text)
    if any(k in lowered for k in ("authentication", "permission", "invalid_api_key")):
        return ModelAuthenticationError(text)
    if any(k in lowered for k in ("context_length", "prompt is too long", "too many tokens")):
        return ContextOverflowError(text)
    return ModelError(text)


def transport_error(provider: str, exc: Exception) -> ModelError:
    """Timeouts and dropped connections are worth another attempt; a certificate
    that does not verify is not. trio's TLS stream reports its cause underneath."""
    if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ is not None:
        exc = exc.__cause__  # type: ignore[assignment]
    text = f"{provider}: {type(exc).__name__}: {exc}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ModelError(text)
    return TransientModelError(text)


# The data of an event: its first data line's value, and any data lines right after
# it. Every line is matched with the newline before it (the parser keeps one in
# front of its buffer), so the scan looks for a literal prefix, in C.
_DATA = re.compile(rb"\ndata: ?([^\n]*(?:\ndata:[^\n]*)*)")
_MORE_DATA = re.compile(rb"\ndata: ?")
# A chunk's size line, with the line end of the chunk before it (HTTP/1.1 chunked).
_CHUNK_HEAD = re.compile(rb"\r\n([0-9A-Fa-f]+)(?:;[^\r\n]*)?\r\n")


@final
class SSEParser:
    """Splits a byte stream into the data of its server-sent events.

    Works on whole reads, in C where it can: complete events are the bytes up
    to the last blank line; their ``data:`` lines are found by one regex scan.
    An event with several ``data:`` lines (rare) has them joined with
    newlines, as the SSE rules say. Event names and comments are dropped (the
    adapters read the type from the data). CRLF and CR line ends are
    normalised, also when a CRLF is split between two reads.
    """

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b"\n"  # always starts with a line end: see _DATA

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer + data
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):  # maybe half of a CRLF: decide on the next read
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        cut = buffer.rfind(b"\n\n")
        if cut == -1:
            self._buffer = buffer + held
            if len(self._buffer) > MAX_EVENT_BYTES + 1:
                raise ModelResponseError(
                    f"a server-sent event is longer than {MAX_EVENT_BYTES} bytes"
                )
            return []
        # Complete events end at cut + 1 (scanned in place, not copied); the rest keeps
        # the second line end of the blank line in front of it.
        values = _DATA.findall(buffer, 0, cut + 1)  # one scan, in C
        if buffer.count(b"\ndata:", 0, cut + 1) != len(values):  # an event with several
            values = [_MORE_DATA.sub(b"\n", value) for value in values]  # data lines (rare)
        self._buffer = buffer[cut + 1 :] + held
        return values


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
    handshake), ``read_seconds`` each wait for the next bytes; both failures
    are transient. Bodies may be chunked, sized or closed-delimited.

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
        path = parts.path or "/"
        if parts.query:
            path += f"?{parts.query}"
        host = f"[{self._host}]" if ":" in self._host else self._host
        host_header = host if parts.port is None else f"{host}:{parts.port}"
        lines = [
            f"POST {path} HTTP/1.1",
            f"host: {host_header}",
            f"content-length: {len(body)}",
            "connection: close",
            "user-agent: trio-agent",
        ]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\n\r\n").encode()
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

    async def _open(self) -> None:
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
                await stream.send_all(self._head + self._body)
        except trio.TooSlowError:
            raise TransientModelError(
                f"{self._provider}: could not connect within {self._connect_seconds} s"
            ) from None
        except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
            raise transport_error(self._provider, exc) from None
        while True:  # skip interim 1xx responses (100 Continue, 103 Early Hints)
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
                break
        headers = _headers(header_lines)
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not self._chunked and "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise ModelResponseError(
                    f"{self._provider}: bad content-length {headers['content-length']!r}"
                ) from None
        if status != 200:
            body, limit = b"", error_read_limit(self.secret)
            while len(body) < limit:
                piece = await self._body_bytes()
                if piece is None:
                    break
                body += piece
            raise error_for_status(self._provider, status, body, headers)

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
        data = await self._body_bytes()
        if data is None:
            return None
        return self._parser.feed(data)

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


def decode_all(
    decoder: msgspec.json.Decoder[Any],
    datas: list[bytes],
    provider: str,
    fallback: msgspec.json.Decoder[Any] | None = None,
) -> Any:
    """The events' data, each decoded by msgspec into the provider's wire struct.
    With a ``fallback``, ``decoder`` is a narrower shortcut: an event it does not
    accept is decoded by ``fallback``, whose verdict stands."""
    try:
        try:
            return [decoder.decode(data) for data in datas]
        except msgspec.ValidationError:
            if fallback is None:
                raise
        return [_decode_either(decoder, fallback, data) for data in datas]
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ModelResponseError(f"{provider} sent an event that does not decode: {exc}") from None


def _decode_either(
    decoder: msgspec.json.Decoder[Any], fallback: msgspec.json.Decoder[Any], data: bytes
) -> Any:
    try:
        return decoder.decode(data)
    except msgspec.ValidationError:
        return fallback.decode(data)


def parse_arguments(raw: bytes, call_id: str, provider: str) -> Any:
    """A complete call's arguments, parsed strictly (bounded before parsing)."""
    if len(raw) > MAX_ARGUMENT_BYTES:
        raise ModelResponseError(
            f"{provider}: tool call {call_id!r} has {len(raw)} bytes of arguments, "
            f"more than {MAX_ARGUMENT_BYTES}"
        )
    if not raw.strip():
        return {}
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ModelResponseError(
            f"{provider}: tool call {call_id!r} has arguments that are not JSON: {exc}"
        ) from None
