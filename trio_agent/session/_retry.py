"""Session policies as values: when to retry a model attempt, how to estimate a
request's tokens, how to cut a long tool result."""

from __future__ import annotations

import math
import random
from typing import Any, final

import attrs
import msgspec

from ..engine._options import check_int, check_positive
from ..errors import leaves
from ..limits import cut_text
from ..messages._ir import (
    AssistantMessage,
    DocumentBlock,
    ImageBlock,
    InputBlock,
    Message,
    TextBlock,
)
from ..messages._view import transcript_hook
from ..model import ModelRequest, TransientModelError

__all__ = ["DEFAULT_RETRY", "RetryPolicy", "estimate_tokens", "truncate_text"]


def _positive(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_positive(attribute.name, value)


@final
@attrs.frozen
class RetryPolicy:
    """Retries of a model attempt that failed with ``TransientModelError``.

    ``attempts`` counts all tries (the first included). The delay before try
    ``n + 1`` is ``initial_delay * 2**(n - 1)``, at most ``max_delay``, times a
    random factor in ``1 +- jitter``. A ``retry_after`` hint on the error is
    honoured instead; a hint longer than ``max_retry_after`` gives up at once.
    Any other error is never retried. Waits use trio's clock.
    """

    attempts: int = attrs.field(default=5)
    initial_delay: float = attrs.field(default=0.5, validator=_positive)
    max_delay: float = attrs.field(default=10.0, validator=_positive)
    jitter: float = attrs.field(default=0.1)
    max_retry_after: float = attrs.field(default=60.0, validator=_positive)

    def __attrs_post_init__(self) -> None:
        check_int("attempts", self.attempts, 1)
        if type(self.jitter) not in (int, float) or not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter!r}")

    def delay(self, error: Exception, attempt: int, rng: random.Random) -> float | None:
        """Seconds before the next try after ``attempt`` failed with ``error``, or None.

        An ``ExceptionGroup`` (from a provider's nursery) is transient when all
        its leaves are; the longest ``retry_after`` among them is honoured.
        """
        found = leaves(error)
        if attempt >= self.attempts or not all(
            isinstance(leaf, TransientModelError) for leaf in found
        ):
            return None
        hints = [leaf.retry_after for leaf in found if leaf.retry_after is not None]  # type: ignore[attr-defined]
        hint = max(hints) if hints else None
        if hint is not None and math.isfinite(hint) and hint >= 0:
            return None if hint > self.max_retry_after else float(hint)
        base = min(self.max_delay, self.initial_delay * 2.0 ** (attempt - 1))
        return base * (1 + rng.uniform(-self.jitter, self.jitter))


DEFAULT_RETRY = RetryPolicy()
"""Frozen: one shared by every Agent that takes the default."""


IMAGE_TOKENS = 1600
"""The estimate's tokens for one image (Anthropic's and OpenAI's ceiling for a
full-size image is about this)."""


_encode = msgspec.json.Encoder(enc_hook=transcript_hook).encode


def estimate_tokens(request: ModelRequest) -> int:
    """A cheap pre-flight estimate: one token per 4 bytes of the request as JSON,
    where an image counts ``IMAGE_TOKENS`` and a document one per 4 of its bytes.
    Media are never encoded for it (their base64 is not what a model reads)."""
    images = media = 0
    messages: list[Message] = []
    for message in request.messages:
        if isinstance(message, AssistantMessage) or isinstance(message.content, str):
            messages.append(message)
            continue
        blocks: list[InputBlock] = []
        for block in message.content:
            if isinstance(block, ImageBlock | DocumentBlock):
                if type(block) is ImageBlock:
                    images += 1
                elif block.data is not None:
                    media += len(block.data)
                block = msgspec.structs.replace(block, data=None, url=None)
            blocks.append(block)
        messages.append(msgspec.structs.replace(message, content=tuple(blocks)))
    if images or media:
        request = msgspec.structs.replace(request, messages=tuple(messages))
    size = len(_encode(request)) + media
    return math.ceil(size / 4) + images * IMAGE_TOKENS


def truncate_text(text: str, limit: int) -> str:
    """``text`` if it fits ``limit`` characters, else its head and tail around a marker."""
    return cut_text(text, limit, f"result longer than {limit}")


def truncate_content(
    content: str | tuple[InputBlock, ...], limit: int
) -> str | tuple[InputBlock, ...]:
    """Content whose text fits ``limit`` characters: a str cut as ``truncate_text``;
    in blocks, the longest text blocks are cut to one share each (the short ones
    kept whole), or, when the shares would be too small to say anything, the
    text is joined and cut as one block in the first one's place. Images and
    documents are kept: their size has its own limits."""
    if isinstance(content, str):
        return content if len(content) <= limit else truncate_text(content, limit)
    lengths = [len(b.text) for b in content if isinstance(b, TextBlock)]
    if sum(lengths) <= limit:
        return content
    share = _share(lengths, limit)
    why = f"result longer than {limit}"
    if share >= _MIN_SHARE:
        return tuple(
            TextBlock(cut_text(b.text, share, why))
            if isinstance(b, TextBlock) and len(b.text) > share
            else b
            for b in content
        )
    text = cut_text("".join(b.text for b in content if isinstance(b, TextBlock)), limit, why)
    first = next(i for i, b in enumerate(content) if isinstance(b, TextBlock))
    return tuple(
        TextBlock(text) if i == first else b
        for i, b in enumerate(content)
        if i == first or not isinstance(b, TextBlock)
    )


_MIN_SHARE = 120
"""The least a cut text block keeps: its cut marker and some text around it."""


def _share(lengths: list[int], limit: int) -> int:
    """The largest ``share`` with ``sum(min(n, share) for n in lengths) <= limit``:
    blocks shorter than it fit whole, the others are cut to it."""
    remaining, count = limit, len(lengths)
    for n in sorted(lengths):
        if n * count > remaining:
            return remaining // count
        remaining -= n
        count -= 1
    return limit  # everything fits (the caller checked it does not)
