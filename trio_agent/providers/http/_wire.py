"""HTTP/1.1 on the wire, without I/O: a response head, and the readers of a
body (chunked, sized, up to the close) as small state machines fed bytes.

They know nothing of sockets: ``_http.HTTPStream`` feeds them what the
connection reads and asks them for the body's bytes; whether the body ended
exactly (``done`` with nothing left over) is what lets the connection go back
to the pool.
"""

from __future__ import annotations

import re
from itertools import repeat
from typing import final

from ...model import ModelResponseError, TransientModelError

MAX_HEAD_BYTES = 65536
"""Bytes of a response head (status line and header fields); more is refused."""


def parse_head(buffer: bytes, provider: str) -> tuple[int, dict[str, str], bytes] | None:
    """The status, the header fields and the bytes after the head of the first
    final (not 1xx) response in ``buffer``, or None if it is not all there yet.
    Interim responses (100 Continue, 103 Early Hints) before it are skipped, and
    blank lines before a status line. Field names are lower-cased; the values
    of a repeated list field (``_LISTS``) are joined by ``", "``; repeated
    ``content-length`` values that differ are refused (a response split in
    two), and a response with both ``content-length`` and
    ``transfer-encoding`` is read by the latter and marked ``connection:
    close`` (RFC 9112 6.3), as is an HTTP/1.0 response that does not ask to
    be kept alive. ``ModelResponseError`` if the bytes are not an HTTP
    response (a folded or nameless field too), or the head is longer than
    ``MAX_HEAD_BYTES``, or the interim responses and blank lines before it
    are (else a server sending them without end would be read for ever, and
    held: the caller keeps the whole buffer until the head is found).
    Lines end in CRLF or, as h11 accepts, a bare LF (some servers and proxies
    send those); a bare CR ends no line, and a field line with one is refused
    (as h11 and RFC 9112 do). A reader fed a read at a time uses
    ``HeadReader``, which parses each byte once."""
    found, _, _ = _parse(buffer, 0, provider)
    return found


@final
class HeadReader:
    """``parse_head`` fed a read at a time: ``feed`` each read; the head (as
    ``parse_head`` gives it) once it is all there, else None.

    Each byte is looked at about once, whatever the reads: the reads are joined
    and parsed only once one ends a blank line (or passes the size limit), and
    the interim responses and blank lines parsed are dropped, counted toward
    their limit. Parsing the whole buffer again at each read cost seconds of
    CPU for a 64 KiB head sent a byte a read, or made of interim responses."""

    __slots__ = ("_pieces", "_provider", "_size", "_skipped", "_tail")

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._pieces: list[bytes] = []  # reads not yet parsed (after what _parse left)
        self._size = 0  # bytes of them
        self._skipped = 0  # bytes of interim responses and blank lines dropped
        self._tail = b""  # the last two bytes fed: a blank line may end across reads

    def feed(self, data: bytes) -> tuple[int, dict[str, str], bytes] | None:
        self._pieces.append(data)
        self._size += len(data)
        seen = self._tail + data
        self._tail = seen[-2:]
        if _HEAD_END.search(seen) is None and self._size <= MAX_HEAD_BYTES:
            return None  # no line ends a blank line: nothing new to parse
        buffer = b"".join(self._pieces)
        found, rest, self._skipped = _parse(buffer, self._skipped, self._provider)
        self._pieces = [rest]
        self._size = len(rest)
        return found


def _parse(
    buffer: bytes, skipped: int, provider: str
) -> tuple[tuple[int, dict[str, str], bytes] | None, bytes, int]:
    """``parse_head``'s answer for ``buffer``, after ``skipped`` bytes of interim
    responses and blank lines already dropped; and, when it is None, the bytes
    not parsed yet and the bytes skipped now."""
    while True:
        start = _BLANK_LINES.match(buffer).end()  # type: ignore[union-attr]  # always matches
        if skipped + start > MAX_HEAD_BYTES:
            raise ModelResponseError(
                f"{provider}: more than {MAX_HEAD_BYTES} bytes of interim responses and "
                "blank lines before the response head"
            )
        blank = _HEAD_END.search(buffer, start)
        if blank is None or blank.start() - start > MAX_HEAD_BYTES:
            if len(buffer) - start > MAX_HEAD_BYTES:
                raise ModelResponseError(
                    f"{provider}: a response head longer than {MAX_HEAD_BYTES} bytes"
                )
            return None, buffer[start:], skipped + start
        head, buffer = buffer[start : blank.start()], buffer[blank.end() :]
        skipped += blank.end()
        status_line, *lines = [
            line.removesuffix("\r") for line in head.decode("latin-1").split("\n")
        ]
        version, _, status_text = status_line.partition(" ")
        code = status_text[:3]
        if (
            not version.startswith("HTTP/")
            or len(code) != 3
            or not code.isdigit()
            or status_text[3:4] not in ("", " ")
        ):
            raise ModelResponseError(f"{provider}: not an HTTP response")
        status = int(code)
        if not 100 <= status < 200:
            return (status, _fields(lines, version, provider), buffer), b"", skipped


_BLANK_LINES = re.compile(rb"(?:\r?\n)*")  # in C: a Python loop per line is quadratic over reads
# The end of a head: its last line's end, then a blank line. A line may end in a
# bare LF instead of CRLF, as h11 (and every browser) accepts.
_HEAD_END = re.compile(rb"\n\r?\n")


_LISTS = frozenset({"transfer-encoding", "connection"})
"""Fields whose repeated values add up (a list); any other repeated field: the
last one wins."""


def _fields(lines: list[str], version: str, provider: str) -> dict[str, str]:
    """Header lines as a dict (see ``parse_head``)."""
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if (
            not colon
            or not name
            or name != name.strip()
            or " " in name
            or "\t" in name
            or "\r" in line  # a bare CR ends no line, nor is it in one (RFC 9112 2.2, h11)
        ):
            what = "a folded header line" if line[:1] in (" ", "\t") else "a bad header line"
            raise ModelResponseError(f"{provider}: {what} in the response: {line[:100]!r}")
        name, value = name.lower(), value.strip()
        if name in headers:
            if name == "content-length" and headers[name] != value:
                raise ModelResponseError(
                    f"{provider}: the response has two different content-lengths"
                )
            if name in _LISTS:
                value = f"{headers[name]}, {value}"
        headers[name] = value
    connection = headers.get("connection", "").lower()
    if "transfer-encoding" in headers and "content-length" in headers:
        headers["connection"] = "close"  # framed by transfer-encoding; not reused
    elif version == "HTTP/1.0" and "keep-alive" not in connection:
        headers["connection"] = "close"  # 1.0 keeps a connection only if it says so
    return headers


def keep_alive(headers: dict[str, str]) -> tuple[bool, float | None, int | None]:
    """Whether a response lets its connection serve another request, and the
    server's ``Keep-Alive: timeout=, max=`` hints (seconds it keeps an idle
    connection, requests it serves on one), when it gives them."""
    if "close" in headers.get("connection", "").lower().replace(" ", "").split(","):
        return False, None, None
    timeout: float | None = None
    most: int | None = None
    for part in headers.get("keep-alive", "").split(","):
        name, _, value = part.strip().partition("=")
        try:
            if name.lower() == "timeout":
                timeout = max(0.0, float(value))
            elif name.lower() == "max":
                most = int(value)
        except ValueError:
            continue
    return True, timeout, most


# A chunk's size line, with the line end of the chunk before it (HTTP/1.1 chunked).
_CHUNK_HEAD = re.compile(rb"\r\n([0-9A-Fa-f]{1,16})(?:;[^\r\n]{0,4000})?\r\n")
# A size line alone: hex digits (no sign, no 0x, no blank before), maybe extensions.
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?")


class BodyReader:
    """The reader of one response body: ``feed`` it what the connection reads,
    take the body's bytes with ``read`` (``b""``: nothing yet, or the end when
    ``done``), and call ``closed`` when the connection ends. ``leftover`` is
    what came after the body: a connection with any is not reused."""

    __slots__ = ("_buffer", "_provider", "done", "leftover")

    def __init__(self, provider: str, start: bytes = b"") -> None:
        self._buffer = start
        self._provider = provider
        self.done = False
        self.leftover = b""

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def read(self) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def closed(self) -> None:
        """The connection ended: the body's end if it runs to the close; else
        ``TransientModelError`` saying how the body was cut off (unless it had
        ended)."""
        raise NotImplementedError  # pragma: no cover - abstract


@final
class UntilCloseReader(BodyReader):
    """A body without a length: it ends when the connection does (never reused)."""

    __slots__ = ()

    def read(self) -> bytes:
        data, self._buffer = self._buffer, b""
        return data

    def closed(self) -> None:
        self.done = True


@final
class SizedReader(BodyReader):
    """A body of ``content-length`` bytes."""

    __slots__ = ("_remaining",)

    def __init__(self, provider: str, size: int, start: bytes = b"") -> None:
        super().__init__(provider, start)
        self._remaining = size
        self.done = size == 0
        if self.done:
            self.leftover, self._buffer = start, b""

    def read(self) -> bytes:
        data, self._buffer = self._buffer, b""
        if len(data) >= self._remaining:
            data, self.leftover = data[: self._remaining], data[self._remaining :]
            self.done = True
        self._remaining -= len(data)
        return data

    def closed(self) -> None:
        if not self.done:
            raise TransientModelError(
                f"{self._provider}: the body ended {self._remaining} bytes early"
            )


@final
class ChunkedReader(BodyReader):
    """A ``transfer-encoding: chunked`` body. The chunks of a read are found in C
    (``_split``): a regex split at the size lines, every chunk's length checked
    against its size line; where that does not hold (a size line lookalike in
    the data, blank lines, odd size lines), a chunk-by-chunk walk (``_walk``).
    After the last chunk, the trailer section is skipped to its end."""

    __slots__ = ("_after_data", "_remaining", "_trailers")

    def __init__(self, provider: str, start: bytes = b"") -> None:
        super().__init__(provider, start)
        self._remaining = 0  # bytes left of the chunk the last read ended in
        self._after_data = False  # a chunk's data just ended: its CRLF comes next
        self._trailers = False  # past the last chunk, before the end of the trailers

    def read(self) -> bytes:
        if self.done:
            return b""
        if self._trailers:
            self._skip_trailers()
            return b""
        head = b""
        if self._remaining:  # the rest of the chunk the last read ended in
            head = self._buffer[: self._remaining]
            self._buffer = self._buffer[len(head) :]
            self._remaining -= len(head)
            self._after_data = not self._remaining
        if self._remaining or not self._buffer:
            return head
        data = self._split()
        if data is None:
            data = self._walk()
        if self._trailers:
            self._skip_trailers()
        return head + data if head else data

    def closed(self) -> None:
        if self.done:
            return
        if self._trailers:
            raise TransientModelError(f"{self._provider}: the body's trailers were cut off")
        if self._remaining:
            raise TransientModelError(f"{self._provider}: a chunk was cut off")
        raise TransientModelError(f"{self._provider}: the body ended before its last chunk")

    def _split(self) -> bytes | None:
        """The data of the chunks in the buffer, between chunks, found in C; None if
        the split is not the one a chunk-by-chunk walk finds, or no whole size line
        is there yet. If every chunk's length agrees with its size line, it is (each
        size line starts right where the chunk before it ends)."""
        buffer = self._buffer
        if buffer[:2] != b"\r\n":
            if self._after_data:  # the CRLF after a chunk's data is missing (or not in)
                return None
            buffer = b"\r\n" + buffer  # the body's start
        parts = _CHUNK_HEAD.split(buffer)
        # parts: b"", size 1, data 1, ..., size n, what follows size line n
        if len(parts) < 3 or parts[0]:
            return None
        sizes = list(map(int, parts[1::2], repeat(16)))
        datas = parts[2::2]
        last, tail = sizes.pop(), datas.pop()
        if list(map(len, datas)) != sizes or 0 in sizes:
            return None
        self._after_data = False
        if last == 0:  # the last chunk: the trailers follow
            self._trailers = True
            self._buffer = tail
        elif len(tail) >= last:
            datas.append(tail[:last])
            self._buffer = tail[last:]
            self._after_data = True
        else:
            datas.append(tail)
            self._remaining = last - len(tail)
            self._buffer = b""
        return b"".join(datas)

    def _walk(self) -> bytes:
        """Every chunk in the buffer, in one piece, walking it by position (slicing
        the buffer once per chunk would be quadratic in a read)."""
        out: list[bytes] = []
        buffer, at = self._buffer, 0
        while True:
            if self._remaining:  # inside a chunk
                take = min(len(buffer) - at, self._remaining)
                if not take:
                    break
                out.append(buffer[at : at + take])
                at += take
                self._remaining -= take
                self._after_data = not self._remaining
                continue
            end = buffer.find(b"\r\n", at)
            if end == -1:
                if len(buffer) - at > _MAX_LINE:
                    raise ModelResponseError(f"{self._provider}: a chunk size line too long")
                break
            line = buffer[at:end]
            at = end + 2
            if len(line) > _MAX_LINE:
                raise ModelResponseError(f"{self._provider}: a chunk size line too long")
            if self._after_data:  # a chunk's data ends with CRLF, nothing else
                self._after_data = False
                if line:
                    raise ModelResponseError(
                        f"{self._provider}: a chunk's data is not followed by its line end"
                    )
                continue
            if not line:  # blank lines between chunks: tolerated
                continue
            found = _SIZE_LINE.fullmatch(line)
            if found is None:
                raise ModelResponseError(f"{self._provider}: bad chunk size {line!r}")
            size = int(found[1], 16)
            if size == 0:
                self._trailers = True
                break
            self._remaining = size
        self._buffer = buffer[at:]
        return b"".join(out)

    def _skip_trailers(self) -> None:
        """Past the last chunk: the trailer fields (not read) up to the empty line
        that ends them; ``done`` once it is in."""
        buffer = self._buffer
        if buffer[:2] == b"\r\n":
            end = 2
        else:
            end = buffer.find(b"\r\n\r\n")
            if end == -1:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise ModelResponseError(
                        f"{self._provider}: trailers longer than {MAX_HEAD_BYTES} bytes"
                    )
                return
            end += 4
        self.leftover, self._buffer = buffer[end:], b""
        self._trailers = False
        self.done = True


_MAX_LINE = 4096
"""Bytes of a chunk size line (with its extensions); more is refused."""


def body_reader(provider: str, status: int, headers: dict[str, str], start: bytes) -> BodyReader:
    """The reader for the body of a response with this ``status`` and these
    ``headers``, ``start`` being the bytes read after its head. A 204 or 304
    has no body, whatever its headers say (RFC 9112 6.3)."""
    if status in (204, 304):
        return SizedReader(provider, 0, start)
    coding = headers.get("transfer-encoding")
    if coding is not None:
        codings = [c.strip().lower() for c in coding.split(",") if c.strip()]
        others = [c for c in codings if c not in ("chunked", "identity")]
        if others:
            raise ModelResponseError(
                f"{provider}: the response's transfer-encoding {coding!r} is not one this "
                "client reads (chunked)"
            )
        if codings and codings[-1] == "chunked":
            return ChunkedReader(provider, start)
        return UntilCloseReader(provider, start)
    length = headers.get("content-length")
    if length is None:
        return UntilCloseReader(provider, start)
    if not (length.isascii() and length.isdigit()):
        raise ModelResponseError(f"{provider}: bad content-length {length!r}")
    return SizedReader(provider, int(length), start)
