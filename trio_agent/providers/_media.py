"""Images and documents as the providers' wire formats want them: base64 text,
``data:`` URLs, a document's text. One place, so every adapter encodes a block
the same way (and once per request)."""

from __future__ import annotations

import binascii
import functools
import threading
import weakref
from typing import Any, final

from ..messages._ir import DocumentBlock, ImageBlock

__all__ = ["base64_of", "data_url", "document_text", "is_reasoning_item", "not_attached"]


@final
class _Encodings:
    """The base64 forms of media, so that a transcript sent again at every step
    encodes each image once. An entry lives as long as its block (a weak
    reference, keyed by the block's identity). At most ``limit`` characters are
    kept: when they are full, a new encoding is not kept (dropping old ones
    would make a transcript of many images, sent in the same order every step,
    miss every time). A lock makes it safe for runs in several threads."""

    __slots__ = ("_entries", "_lock", "_size", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # id(block) -> (a weak reference to it, the prefix, the encoded text)
        self._entries: dict[int, tuple[weakref.ref[Any], str, str]] = {}
        self._size = 0
        # reentrant: a block freed while get() runs calls _forget on this thread
        self._lock = threading.RLock()

    def get(self, block: ImageBlock | DocumentBlock, prefix: str) -> str:
        assert block.data is not None
        key = id(block)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None and hit[0]() is block and hit[1] == prefix:
                return hit[2]
        text = prefix + binascii.b2a_base64(block.data, newline=False).decode("ascii")
        with self._lock:
            stale = self._entries.pop(key, None)  # another prefix, for this block
            if stale is not None:
                self._size -= len(stale[2])
            if self._size + len(text) <= self.limit:
                ref = weakref.ref(block, functools.partial(self._forget, key))
                self._entries[key] = (ref, prefix, text)
                self._size += len(text)
        return text

    def _forget(self, key: int, ref: weakref.ref[Any]) -> None:
        """The block of an entry is gone: so is the entry."""
        with self._lock:
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
