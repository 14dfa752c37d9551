"""A streamed tool call's arguments: parsed strictly, within a cap."""

from __future__ import annotations

from typing import Any

import msgspec

from ..model import ModelResponseError

MAX_ARGUMENT_BYTES = 64 * 1024
"""Raw bytes of one tool call's streamed arguments; more is a broken stream."""


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
