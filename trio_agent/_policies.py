"""Session policies as values: when to retry a model attempt, how to estimate a
request's tokens, how to cut a long tool result."""

from __future__ import annotations

import math
import random
from typing import Any, final

import attrs
import msgspec

from ._errors import leaves
from ._options import check_int, check_positive
from .limits import cut_text
from .messages import AssistantMessage, DocumentBlock, ImageBlock, InputBlock, TextBlock
from .model import ModelRequest, TransientModelError

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


def estimate_tokens(request: ModelRequest) -> int:
    """A cheap pre-flight estimate: one token per 4 bytes of the request as JSON,
    where an image counts ``IMAGE_TOKENS`` and a document one per 4 of its bytes
    (not per 4 bytes of its base64)."""
    size = len(msgspec.json.encode(request))
    images = 0
    for message in request.messages:
        if type(message) is AssistantMessage or type(message.content) is str:
            continue
        for block in message.content:
            if isinstance(block, ImageBlock | DocumentBlock):
                if block.data is None:
                    images += type(block) is ImageBlock
                    continue
                encoded = 4 * math.ceil(len(block.data) / 3)  # its base64 in the JSON
                if type(block) is ImageBlock:
                    size -= encoded
                    images += 1
                else:
                    size -= encoded - len(block.data)
    return math.ceil(max(size, 0) / 4) + images * IMAGE_TOKENS


def truncate_text(text: str, limit: int) -> str:
    """``text`` if it fits ``limit`` characters, else its head and tail around a marker."""
    return cut_text(text, limit, f"result longer than {limit}")


def truncate_content(
    content: str | tuple[InputBlock, ...], limit: int
) -> str | tuple[InputBlock, ...]:
    """Content whose text fits ``limit`` characters: a str cut as ``truncate_text``;
    in blocks, the text blocks share the limit in proportion to their length
    (images and documents are kept: their size has its own limits)."""
    if isinstance(content, str):
        return content if len(content) <= limit else truncate_text(content, limit)
    total = sum(len(b.text) for b in content if isinstance(b, TextBlock))
    if total <= limit:
        return content
    return tuple(
        TextBlock(cut_text(b.text, len(b.text) * limit // total, f"result longer than {limit}"))
        if isinstance(b, TextBlock)
        else b
        for b in content
    )
