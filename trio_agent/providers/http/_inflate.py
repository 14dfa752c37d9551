"""Content codings a response body may come in although we ask for none.

The client sends ``Accept-Encoding: identity``; a misbehaving proxy may still
compress. gzip and deflate are decoded here (zlib, incrementally, bounded);
any other coding is refused by name (sans-IO: bytes in, bytes out)."""

from __future__ import annotations

import zlib
from typing import Any, final

from ...model import ModelResponseError

MAX_INFLATED_BYTES = 64 * 1024 * 1024
"""Bytes a compressed body may inflate to; more is refused (a decompression bomb)."""
PIECE_BYTES = 256 * 1024
"""Bytes one ``feed`` hands out at most: the rest waits (``backlog``), so a small
read that inflates to megabytes is parsed a piece at a time, never held whole."""

_GZIP = frozenset({"gzip", "x-gzip"})
_DEFLATE = "deflate"


def content_coding(headers: dict[str, str]) -> str:
    """The response's ``content-encoding``, lowercased, ``""`` for none or
    ``identity``."""
    coding = headers.get("content-encoding", "").strip().lower()
    return "" if coding == "identity" else coding


def supported(coding: str) -> bool:
    return coding in _GZIP or coding == _DEFLATE


@final
class Inflater:
    """Decodes a gzip or deflate body piece by piece. ``deflate`` is the zlib
    format by the HTTP rules, but some servers send raw deflate: the first two
    bytes tell which. Past ``MAX_INFLATED_BYTES`` of output, or on bytes that do
    not decode, a ``ModelResponseError``: never a transient error, as sending the
    request again brings the same body."""

    __slots__ = ("_coding", "_fed", "_left", "_provider", "_start", "_zlib", "backlog")

    def __init__(self, coding: str, provider: str) -> None:
        if not supported(coding):
            raise ValueError(f"not a coding the client decodes: {coding!r}")
        self._coding = coding
        self._provider = provider
        self._left = MAX_INFLATED_BYTES
        self._fed = False
        self._start = b""  # deflate: the first bytes, until there are two to look at
        self._zlib: Any = zlib.decompressobj(47) if coding in _GZIP else None  # gzip or zlib
        self.backlog = False  # the last feed stopped at PIECE_BYTES: feed(b"") for more

    @property
    def cut_off(self) -> bool:
        """Whether bytes came in but their compressed data did not reach its end."""
        return self._fed and not (self._zlib is not None and self._zlib.eof)

    def feed(self, data: bytes) -> bytes:
        """What ``data`` (after any backlog) inflates to, at most ``PIECE_BYTES``."""
        self._fed = self._fed or bool(data)
        if self._zlib is None:  # deflate, not yet known whether zlib-wrapped or raw
            data = self._start + data
            if len(data) < 2:
                self._start = data
                return b""
            wrapped = data[0] & 0x0F == 8 and int.from_bytes(data[:2]) % 31 == 0
            self._zlib = zlib.decompressobj(15 if wrapped else -15)
            self._start = b""
        most = min(self._left + 1, PIECE_BYTES)
        try:
            out: bytes = self._zlib.decompress(self._zlib.unconsumed_tail + data, most)
        except zlib.error as exc:
            raise ModelResponseError(
                f"{self._provider}: the {self._coding} body does not decode: {exc}"
            ) from None
        if len(out) > self._left:
            raise ModelResponseError(
                f"{self._provider}: the {self._coding} body inflates past "
                f"{MAX_INFLATED_BYTES} bytes; refused"
            )
        self._left -= len(out)
        self.backlog = len(out) == most  # input, or output zlib holds, may be left
        return out
