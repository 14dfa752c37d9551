"""What a request to the OpenAI Responses-compatible ``POST /v1/responses`` asks,
read and checked: the new input (a string, or message items whose texts are
joined), the ``instructions`` (and ``system``/``developer`` messages, taken as
instructions), approval answers (``mcp_approval_response``
items), ``previous_response_id`` (a response id names a session and a turn:
``resp_<session>_<turn>``), and whether to stream. Anything wrong is an
``ApiError`` (400); the route answers it as OpenAI does, ``{"error":
{"message", "type", "param", "code"}}``."""

from __future__ import annotations

import uuid
from typing import Any, Final, final

import attrs
import msgspec

from ._bodies import ApiError, session_id_of

__all__ = [
    "MAX_RESPONSE_ID",
    "ResponsesBody",
    "ResponsesRequest",
    "new_session_id",
    "parse_response_id",
    "response_id",
    "turn_of",
]

PREFIX: Final = "resp_"
MAX_RESPONSE_ID: Final = len(PREFIX) + 128 + 1 + 10
"""The longest response id: the prefix, a session id (128 characters at most), ``_``
and a turn number (10 digits at most)."""


class ResponsesBody(msgspec.Struct, frozen=True):
    """The fields of a Responses request that are read; the others (``tools``,
    ``temperature``, ``store``, ``metadata``, ...) are accepted and not used: the
    agent's own tools and settings hold."""

    model: str = "trio-agent"
    input: str | list[Any] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    stream: bool | None = False
    background: bool | None = False


@final
@attrs.frozen
class ResponsesRequest:
    """A checked request: the turn's message (None: no new input, as after
    approvals), the approval answers (call id, approved, reason) and where it
    continues (``previous``: the session and turn, or None for a new session)."""

    body: ResponsesBody
    message: str | None
    decisions: tuple[tuple[str, bool, str], ...]
    previous: tuple[str, int] | None

    @classmethod
    def of(cls, body: ResponsesBody) -> ResponsesRequest:
        previous = None
        if body.previous_response_id is not None:
            previous = turn_of(body.previous_response_id)
        texts, decisions, instructions = _items(body.input)
        if decisions and previous is None:
            raise _bad("an mcp_approval_response needs previous_response_id", "input")
        if not texts and not decisions:
            raise _bad("input needs a user message (or approval responses)", "input")
        message = "\n\n".join(texts) if texts else None
        if body.instructions:
            instructions.insert(0, body.instructions)
        if instructions and message is not None:  # without one (approval answers
            # alone) they are left: OpenAI's clients send them with every request
            message = "\n\n".join([*instructions, message])
        return cls(body, message, tuple(decisions), previous)


def response_id(session_id: str, turn: int) -> str:
    """The id of the response that is turn ``turn`` of ``session_id``."""
    return f"{PREFIX}{session_id}_{turn}"


def turn_of(text: str) -> tuple[str, int]:
    """The session and turn a response id names; ``ApiError(400)`` for an id none
    of ours has."""
    named = parse_response_id(text)
    if named is None:
        raise ApiError(400, f"previous_response_id {text[:200]!r} is no response of this server")
    return named


def parse_response_id(text: str) -> tuple[str, int] | None:
    """The session and turn a response id names, or None for an id none of ours can
    have (too long, no ``resp_`` prefix, no turn number, no session id: ids come
    from clients, and a session id names files)."""
    if len(text) > MAX_RESPONSE_ID:
        return None
    body = text.removeprefix(PREFIX)
    session, _, turn = body.rpartition("_")
    if body == text or not session or not _is_turn(turn):
        return None
    try:
        return session_id_of(session), int(turn)
    except ApiError:
        return None


def _is_turn(text: str) -> bool:
    return 1 <= len(text) <= 10 and text.isascii() and text.isdecimal() and text[0] != "0"


def new_session_id() -> str:
    """A fresh session for a response that continues none."""
    return f"resp-{uuid.uuid4().hex}"


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, f"{param}: {message}")


def _items(
    given: str | list[Any] | None,
) -> tuple[list[str], list[tuple[str, bool, str]], list[str]]:
    """The user texts, the approval answers and the instructions (``system`` and
    ``developer`` messages: they join the turn's message ahead of the user's, as
    ``instructions`` do) of ``input``."""
    texts: list[str] = []
    decisions: list[tuple[str, bool, str]] = []
    instructions: list[str] = []
    if given is None:
        return texts, decisions, instructions
    if isinstance(given, str):
        return [given], decisions, instructions
    for index, item in enumerate(given):
        if not isinstance(item, dict):
            raise _bad(f"item {index} is not an object", "input")
        kind = item.get("type", "message")
        if kind == "mcp_approval_response":
            decisions.append(_decision(index, item))
        elif kind == "message":
            role, text = _message_text(index, item)
            (texts if role == "user" else instructions).append(text)
        else:
            raise _bad(
                f"item {index} is of type {str(kind)[:64]!r}: only messages and "
                "mcp_approval_response items are taken (the agent runs its own tools)",
                "input",
            )
    return texts, decisions, instructions


def _decision(index: int, item: dict[str, Any]) -> tuple[str, bool, str]:
    call_id, approve, reason = (
        item.get("approval_request_id"),
        item.get("approve"),
        item.get("reason") or "",
    )
    if not isinstance(call_id, str) or not 1 <= len(call_id) <= 256:
        raise _bad(f"item {index}: approval_request_id must be a call's id", "input")
    if not isinstance(approve, bool) or not isinstance(reason, str):
        raise _bad(f"item {index}: approve is a boolean, reason a string", "input")
    return call_id, approve, reason


_TAKEN_ROLES: Final = ("user", "system", "developer")


def _message_text(index: int, item: dict[str, Any]) -> tuple[str, str]:
    """A message item's role (user, system or developer) and its text."""
    role, content = item.get("role"), item.get("content")
    if not isinstance(role, str) or role not in _TAKEN_ROLES:
        raise _bad(
            f"item {index} is a {str(role)[:32]!r} message: only user, system and developer "
            "messages are taken (the session holds the history: continue it with "
            "previous_response_id)",
            "input",
        )
    if isinstance(content, str):
        return role, content
    if isinstance(content, list) and content:
        texts = [
            part.get("text")
            for part in content
            if isinstance(part, dict) and part.get("type") in ("input_text", "text")
        ]
        if len(texts) == len(content) and all(isinstance(t, str) for t in texts):
            return role, "".join(str(t) for t in texts)
    raise _bad(f"item {index}: a {role} message's content is text (input_text parts)", "input")
