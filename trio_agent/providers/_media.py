"""Images and documents as the providers' wire formats want them: base64 text,
``data:`` URLs, a document's text. One place, so every adapter encodes a block
the same way (and once per request)."""

from __future__ import annotations

import binascii

from ..messages import DocumentBlock, ImageBlock
from ..model import ModelRequestError

__all__ = ["base64_of", "data_url", "document_text", "is_reasoning_item"]


def base64_of(block: ImageBlock | DocumentBlock) -> str:
    """The block's bytes as standard base64 text, no line breaks (its ``data`` is set)."""
    assert block.data is not None
    return binascii.b2a_base64(block.data, newline=False).decode("ascii")


def data_url(block: ImageBlock | DocumentBlock) -> str:
    """The block as a URL: its own ``url``, or a ``data:`` URL of its bytes."""
    if block.url is not None:
        return block.url
    return f"data:{block.media_type};base64,{base64_of(block)}"


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
