"""Images and documents as the providers' wire formats want them: base64 text,
``data:`` URLs, a document's text. One place, so every adapter encodes a block
the same way (and once per request)."""

from __future__ import annotations

import binascii
from typing import final

from ..messages import DocumentBlock, ImageBlock
from ..model import ModelRequestError

__all__ = ["base64_of", "data_url", "document_text", "is_reasoning_item"]


@final
class _Encodings:
    """The base64 forms of the last media encoded, kept so that a transcript sent
    again at every step encodes each image once: keyed by the identity of their
    bytes (which an entry holds, so the key is not reused while it is kept), at
    most ``limit`` characters in all, the oldest dropped first."""

    __slots__ = ("_entries", "_size", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: dict[tuple[int, str], tuple[bytes, str]] = {}
        self._size = 0

    def get(self, data: bytes, prefix: str) -> str:
        key = (id(data), prefix)
        hit = self._entries.get(key)
        if hit is not None and hit[0] is data:
            return hit[1]
        text = prefix + binascii.b2a_base64(data, newline=False).decode("ascii")
        if len(text) <= self.limit:
            entries = self._entries
            stale = entries.pop(key, None)  # (none while an entry holds its bytes)
            if stale is not None:
                self._size -= len(stale[1])
            while entries and self._size + len(text) > self.limit:
                _, dropped = entries.pop(next(iter(entries)))
                self._size -= len(dropped)
            entries[key] = (data, text)
            self._size += len(text)
        return text


_ENCODINGS = _Encodings(32 * 1024 * 1024)
"""Shared by every adapter: at most 32 Mi characters kept, and the bytes they encode."""


def base64_of(block: ImageBlock | DocumentBlock) -> str:
    """The block's bytes as standard base64 text, no line breaks (its ``data`` is set)."""
    assert block.data is not None
    return _ENCODINGS.get(block.data, "")


def data_url(block: ImageBlock | DocumentBlock) -> str:
    """The block as a URL: its own ``url``, or a ``data:`` URL of its bytes."""
    if block.url is not None:
        return block.url
    assert block.data is not None
    return _ENCODINGS.get(block.data, f"data:{block.media_type};base64,")


def document_text(block: DocumentBlock, provider: str) -> str:
    """A ``text/plain`` document's bytes as text; ``ModelRequestError`` if they are
    not UTF-8 (said before anything is sent)."""
    assert block.data is not None
    try:
        return block.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelRequestError(
            f"{provider}: text/plain document {block.title!r} is not UTF-8 ({exc.reason} at "
            f"byte {exc.start})"
        ) from None


def is_reasoning_item(data: str) -> bool:
    """True when redacted thinking's ``data`` is a Responses API reasoning item (its
    JSON, as ``OpenAIResponsesModel`` keeps it), not Anthropic's opaque string: each
    adapter sends back only its own provider's kind."""
    return data.startswith('{"type":"reasoning"')
