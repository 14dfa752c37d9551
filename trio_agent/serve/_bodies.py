"""What an HTTP client sends, read and checked: request bodies (capped, decoded
into frozen structs, unknown fields refused), session ids and event cursors.
Anything wrong is an ``ApiError`` with a 4xx status and a message saying what."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final, TypeVar, final

import msgspec

from ..stores._base import check_session_id

__all__ = [
    "MAX_BODY_BYTES",
    "ApiError",
    "Decision",
    "TurnInput",
    "cursor_of",
    "decode_body",
    "period_seconds",
    "read_body",
    "session_id_of",
]

MAX_BODY_BYTES: Final = 1 << 20
"""The largest request body read (1 MiB): a larger one is refused with 413 as
soon as it passes this, without reading the rest."""

_MAX_CURSOR: Final = 1 << 62  # a sequence is a signed 64-bit number in every store

T = TypeVar("T")


@final
class ApiError(Exception):
    """A request that cannot be served as asked: its HTTP status and what to say."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class TurnInput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /sessions/{id}/turns``: the user's message (absent or null: a turn on
    no new input, which runs the calls decided since the last turn)."""

    message: str | None = None


class Decision(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /sessions/{id}/approvals/{call_id}``: the decision on a held call."""

    approved: bool
    reason: str = ""


async def read_body(
    chunks: AsyncIterator[bytes], limit: int = MAX_BODY_BYTES, announced: str | None = None
) -> bytes:
    """The body, whole; ``ApiError(413)`` once it passes ``limit`` bytes, or at
    once when its ``Content-Length`` (``announced``) says it will."""
    if _announced_over(announced, limit):
        raise ApiError(413, f"the request body is larger than {limit} bytes")
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"the request body is larger than {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


def _announced_over(announced: str | None, limit: int) -> bool:
    """Whether a ``Content-Length`` says more than ``limit`` bytes (one that is no
    decimal number is left to the HTTP layer, and the read's own count)."""
    if announced is None or not (announced.isascii() and announced.isdigit()):
        return False
    digits = announced.lstrip("0")
    return len(digits) > 18 or int(digits or "0") > limit


def decode_body(data: bytes, kind: type[T]) -> T:
    """``data`` as JSON of ``kind``; ``ApiError(400)`` saying what is wrong."""
    if not data.strip():
        raise ApiError(400, "the request needs a JSON body")
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        raise ApiError(400, f"the JSON body does not fit: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ApiError(400, f"the body is not JSON: {exc}") from None
    except RecursionError:  # msgspec's own depth limit, where a field takes any value
        raise ApiError(400, "the JSON body is nested too deeply") from None


def session_id_of(text: str) -> str:
    """A session id from a path; ``ApiError(400)`` when no session can have it."""
    try:
        return check_session_id(text)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None


def cursor_of(last_event_id: str | None, after: str | None) -> int:
    """Where an event stream starts: after the sequence ``Last-Event-ID`` names (a
    browser's reconnect sends it, its URL keeping the first ``?after=``), else
    ``?after=``, else -1 (from the first event). ``ApiError(400)`` for anything but
    a decimal sequence."""
    for name, value in (("Last-Event-ID", last_event_id), ("after", after)):
        if value is None:
            continue
        text = value.strip()
        if not text and name == "Last-Event-ID":
            continue  # sent empty: the stream had no id yet
        if not text.isascii() or not text.isdecimal() or len(text) > 19:
            raise ApiError(400, f"{name} must be an event sequence (a decimal number)")
        cursor = int(text)
        if cursor >= _MAX_CURSOR:
            raise ApiError(400, f"{name} is beyond any event sequence")
        return cursor
    return -1


def period_seconds(name: str, value: float | None) -> float | None:
    """A period in seconds (a server's setting): positive and finite, or None (never)."""
    if value is None:
        return None
    if type(value) not in (int, float) or not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")
    return float(value)
