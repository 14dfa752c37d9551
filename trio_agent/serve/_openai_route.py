"""``POST /v1/responses``, OpenAI Responses-compatible: a response is a turn of a
session (a new one, or the session ``previous_response_id`` names), streamed as
the Responses API's events or answered whole once the turn ends. Its errors
are OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``, so the
official SDKs raise them as their own ``BadRequestError`` and the like."""

from __future__ import annotations

from typing import Final

import msgspec
from starlette.responses import Response

from ..ledger import LedgerError
from ..session import Agent
from ._bodies import ApiError, decode_body
from ._hub import Hub, Watch
from ._responses import ResponsesFraming
from ._responses_input import (
    ResponsesBody,
    ResponsesRequest,
    new_session_id,
    response_id,
)
from ._sse import EventStream, pump

__all__ = ["openai_error", "responses"]

_TYPES: Final = {
    401: "authentication_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    503: "server_error",
}


def openai_error(status: int, message: str, *, code: str | None = None) -> Response:
    """An error as the OpenAI API answers one."""
    error = {
        "message": message,
        "type": _TYPES.get(status, "invalid_request_error" if status < 500 else "server_error"),
        "param": None,
        "code": code,
    }
    return Response(msgspec.json.encode({"error": error}), status, media_type="application/json")


async def responses(hub: Hub, body: bytes) -> Response:
    """The response to a Responses request ``body``, or its error."""
    try:
        request = ResponsesRequest.of(decode_body(body, ResponsesBody))
        session_id = await _session_of(hub, request)
        cursor = await hub.last_sequence(session_id)
        for call_id, approved, reason in request.decisions:
            await hub.decide(session_id, call_id, approved, reason)
        turn = await hub.start_turn(session_id, request.message)
        framing = ResponsesFraming(request, response_id(session_id, turn), turn)
        watch = await hub.watch(session_id)
    except ApiError as exc:
        return openai_error(exc.status, exc.message)
    if request.body.stream:
        return EventStream(watch, cursor, framing)
    return await _whole(watch, cursor, framing)


async def _session_of(hub: Hub, request: ResponsesRequest) -> str:
    """The session a request continues: its previous response's, or a new one. A
    response older than its session's latest starts a branch, as the Responses
    API does: a new session forked from that turn's end (``Agent.fork``), the
    original left as it is."""
    if request.previous is None:
        return new_session_id()
    session_id, turn = request.previous
    not_found = ApiError(400, f"previous response {request.body.previous_response_id} not found")
    try:
        state = await hub.state(session_id)
    except ApiError as exc:
        if exc.status == 404:
            raise not_found from None
        raise
    if turn > state["turns"]:
        raise not_found
    if turn < state["turns"]:
        return await _branch(hub, session_id, turn)
    return session_id


async def _branch(hub: Hub, session_id: str, turn: int) -> str:
    """A new session whose history is ``session_id``'s through turn ``turn``."""
    store = hub.place.store
    try:
        return await Agent.fork(store, session_id, at_turn=turn, new_session_id=new_session_id())
    except LedgerError as exc:  # the source is damaged, or the database is away
        raise ApiError(503, f"cannot branch from response {turn} of {session_id}: {exc}") from None


async def _whole(watch: Watch, cursor: int, framing: ResponsesFraming) -> Response:
    """The response once the turn has ended (the client waits). The feed closing
    first (the server stops) is a 503; the turn goes on being recorded."""

    async def out(body: bytes) -> None:
        pass

    try:
        await pump(watch.feed, framing, cursor, out)
    finally:
        watch.leave(False)
    if not framing.done:
        return openai_error(503, "the server stopped before the response was whole")
    return Response(msgspec.json.encode(framing.response), 200, media_type="application/json")
