"""Images and documents as the providers' wire formats want them: base64 text,
``data:`` URLs, a document's text. One place, so every adapter encodes a block
the same way (and once per request)."""

from __future__ import annotations

import binascii
import functools
import weakref
from typing import Any, final

from ..messages import DocumentBlock, ImageBlock

__all__ = ["base64_of", "data_url", "document_text", "is_reasoning_item", "not_attached"]


@final
class _Encodings:
    """The base64 forms of the media encoded lately, so that a transcript sent
    again at every step encodes each image once. An entry lives as long as its
    block (a weak reference, keyed by the block's identity) and at most
    ``limit`` characters are kept in all, the least recently used dropped first."""

    __slots__ = ("_entries", "_size", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # id(block) -> (a weak reference to it, the prefix, the encoded text)
        self._entries: dict[int, tuple[weakref.ref[Any], str, str]] = {}
        self._size = 0

    def get(self, block: ImageBlock | DocumentBlock, prefix: str) -> str:
        assert block.data is not None
        entries = self._entries
        key = id(block)
        hit = entries.pop(key, None)
        if hit is not None:
            if hit[0]() is block and hit[1] == prefix:
                entries[key] = hit  # now the most recently used
                return hit[2]
            self._size -= len(hit[2])
        text = prefix + binascii.b2a_base64(block.data, newline=False).decode("ascii")
        if len(text) <= self.limit:
            while entries and self._size + len(text) > self.limit:
                _, _, dropped = entries.pop(next(iter(entries)))
                self._size -= len(dropped)
            entries[key] = (weakref.ref(block, functools.partial(self._forget, key)), prefix, text)
            self._size += len(text)
        return text

    def _forget(self, key: int, ref: weakref.ref[Any]) -> None:
        """The block of an entry is gone: so is the entry."""
        entry = self._entries.get(key)
        if entry is not None and entry[0] is ref:
            del self._entries[key]
            self._size -= len(entry[2])


_ENCODINGS = _Encodings(48 * 1024 * 1024)
"""Shared by every adapter: at most 48 Mi characters (a message's media, at
``MAX_MESSAGE_MEDIA_BYTES``, fit whole), and only while their blocks live."""


def base64_of(block: ImageBlock | DocumentBlock) -> str:
    """The block's bytes as standard base64 text, no line breaks (its ``data`` is set)."""
    return _ENCODINGS.get(block, "")


def data_url(block: ImageBlock | DocumentBlock) -> str:
    """The block as a URL: its own ``url``, or a ``data:`` URL of its bytes."""
    if block.url is not None:
        return block.url
    return _ENCODINGS.get(block, f"data:{block.media_type};base64,")


def document_text(block: DocumentBlock) -> str:
    """A ``text/plain`` document's bytes as text, or, if they are not UTF-8, a note
    saying so (``not_attached``): the request still goes, and the model is told."""
    assert block.data is not None
    try:
        return block.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return not_attached(block, f"its bytes are not UTF-8 ({exc.reason} at byte {exc.start})")


def not_attached(block: DocumentBlock, why: str) -> str:
    """The text sent in place of a document a provider cannot take, saying why.

    Never an error: the document is in the transcript for good (a tool may have
    returned it), and an error would fail every later request of the session."""
    named = f" {block.title!r}" if block.title else ""
    where = f" at {block.url}" if block.url is not None else ""
    return f"[{block.media_type} document{named}{where} not attached: {why}]"


def is_reasoning_item(data: str) -> bool:
    """True when redacted thinking's ``data`` is a Responses API reasoning item (its
    JSON, as ``OpenAIResponsesModel`` keeps it), not Anthropic's opaque string: each
    adapter sends back only its own provider's kind."""
    return data.startswith('{"type":"reasoning"')
