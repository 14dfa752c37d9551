"""The bytes-level parser of server-sent events the HTTP client feeds the body to
(sans-IO: it sees bytes, never a socket)."""

from __future__ import annotations

import re
from typing import final

from ...model import ModelResponseError

MAX_EVENT_BYTES = 1024 * 1024
"""Bytes of one server-sent event; more is a broken stream."""
DONE = b"[DONE]"
"""The data of the event that ends an OpenAI-style stream (``data: [DONE]``)."""

# An event from its first data line: that line's value, then every line up to the
# blank line that ends the event (more data lines, and any other field or comment
# between them). Every line is matched with the newline before it (the parser
# keeps one in front of its buffer), so the scan looks for a literal prefix, in C.
# A line ``data`` with no colon is a data line with an empty value (the SSE rules).
_EVENT = re.compile(rb"\ndata(?:: ?|(?=\n))([^\n]*(?:\n[^\n]+)*)")
_BOM = "\ufeff".encode()


@final
class SSEParser:
    """Splits a byte stream into the data of its server-sent events.

    Works on whole reads, in C where it can: complete events are the bytes up
    to the last blank line; their ``data:`` lines are found by one regex scan.
    An event with several ``data:`` lines (rare) has them joined with
    newlines, as the SSE rules say, whatever lines come between them (an
    ``id:``, an ``event:``, a comment): all the data lines up to the blank line
    are one event. Event names, ids and comments are dropped (the adapters read
    the type from the data).

    A byte order mark that starts the stream is dropped (else its first line
    would not read as a field, and the first event would be lost).
    Lines end in CRLF, LF or a bare CR, mixed as they come (the SSE rules allow
    all three). Each read is normalised to LF as it arrives; a read that ends in
    CR ends its line at once (an event it completes goes out now, not on the next
    read), and a LF first in the next read is the rest of that CRLF, dropped.

    An event whose data is empty (a bare ``data:`` line, which proxies send to
    keep a connection alive) is no event, as the SSE rules say: it is not
    handed out (it would be an event that does not decode).

    An event whose data is ``[DONE]`` ends the stream, for every adapter (OpenAI
    ends its streams so; LiteLLM its Responses and Messages streams too): it is
    not handed out, ``done`` turns True, and nothing after it is (the rest of
    that read and every later read are dropped unparsed). Wherever the reads
    split the bytes, the events handed out are the same.

    A read that completes no event is kept as it is, not added to what came
    before: an event sent a few bytes a read is joined once, when it ends
    (joined at every read, a megabyte event cost seconds of CPU).
    """

    __slots__ = ("_buffer", "_cr", "_last", "_more", "_size", "_start", "done")

    def __init__(self) -> None:
        self._buffer = b"\n"  # always starts with a line end: see _DATA; never a CR
        self._more: list[bytes] = []  # reads after _buffer that completed no event
        self._size = 1  # bytes of _buffer and _more
        self._last = b"\n"  # the last byte of them
        self._cr = False  # the last read ended in CR
        self._start: bytes | None = b""  # the stream's first bytes, until a BOM is ruled out
        self.done = False  # a data: [DONE] event came: the stream is over

    def feed(self, data: bytes) -> list[bytes]:
        """The data of the events ``data`` completes, in order (none past ``[DONE]``)."""
        if self.done:
            return []
        if self._start is not None:  # a byte order mark first is dropped, as the SSE rules say
            data = self._start + data
            if _BOM.startswith(data):  # all of it may be the start of one: wait
                self._start = data
                return []
            self._start = None
            data = data.removeprefix(_BOM)
        if self._cr and data:
            self._cr = False
            if data[:1] == b"\n":  # the second half of a CRLF split between reads
                data = data[1:]
        if b"\r" in data:
            self._cr = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if not data:
            return []
        if b"\n\n" not in data and not (data[:1] == b"\n" == self._last):  # no event ends
            self._more.append(data)
            self._size += len(data)
            self._last = data[-1:]
            if self._size > MAX_EVENT_BYTES + 1:
                raise ModelResponseError(
                    f"a server-sent event is longer than {MAX_EVENT_BYTES} bytes"
                )
            return []
        if self._more:
            self._more.append(data)
            data = b"".join(self._more)
            self._more.clear()
        buffer = self._buffer + data
        cut = buffer.rfind(b"\n\n")
        # Complete events end at cut + 1 (scanned in place, not copied); the rest keeps
        # the second line end of the blank line in front of it.
        values = _EVENT.findall(buffer, 0, cut + 1)  # one scan, in C
        if b"\n" in b"".join(values):  # an event with more lines after its first data line
            values = [_data_of(value) if b"\n" in value else value for value in values]
        self._buffer = buffer[cut + 1 :]
        self._size = len(self._buffer)
        self._last = self._buffer[-1:]  # never empty: the rest starts with a line end
        if b"" in values:  # an empty data: line, a keep-alive: no event (the SSE rules)
            values = [value for value in values if value]
        if DONE in values:  # the last event, nearly always: a read's one list scan
            values = values[: values.index(DONE)]
            self.done = True
            self._buffer = self._last = b"\n"
            self._size = 1
        return values


def _data_of(value: bytes) -> bytes:
    """The data of an event from ``value``, its first data line's value and the
    event's lines after it: the data lines' values joined with newlines, every
    other line (a field such as ``id:``, a comment) dropped, as the SSE rules say."""
    lines = value.split(b"\n")
    data = [lines[0]]
    for line in lines[1:]:
        if line.startswith(b"data:"):
            data.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line == b"data":
            data.append(b"")
    return b"\n".join(data)
