"""``POST /v1/responses``, OpenAI Responses-compatible: a response is a turn of a
session (a new one, or the session ``previous_response_id`` names), streamed as
the Responses API's events, answered whole once the turn ends, or (``background``)
answered ``in_progress`` at once. ``GET /v1/responses/{id}`` gives a response as
its turn's logged events make it (so far, while it runs); ``POST
/v1/responses/{id}/cancel`` cancels its turn and gives it once the turn ended.
Errors are OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``,
so the official SDKs raise them as their own ``BadRequestError`` and the like."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Final

import msgspec
import trio
from starlette.responses import Response

from ..ledger._derive import derive
from ..ledger._records import LedgerError, Record
from ..session._fork import fork_session
from ._bodies import ApiError, decode_body
from ._hub import Hub, Watch
from ._responses import ResponsesFraming, TurnStarts, replay
from ._responses_input import (
    ResponsesBody,
    ResponsesRequest,
    new_session_id,
    parse_response_id,
    response_id,
)
from ._sse import EventStream, client_gone, pump
from ._views import Decision, Moved, check_decisions

__all__ = ["cancel_response", "openai_error", "responses", "retrieve"]

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


Receive = Callable[[], Awaitable[Any]]


async def responses(hub: Hub, body: bytes, receive: Receive) -> Response:
    """The response to a Responses request ``body``, or its error; ``receive``: the
    request's ASGI channel (read whole), on which a client waiting for a whole
    response is heard going away."""
    try:
        request = ResponsesRequest.of(decode_body(body, ResponsesBody))
        session_id, turn, cursor = await _start(hub, request)
        framing = ResponsesFraming(request, response_id(session_id, turn), turn)
        if request.body.background and not request.body.stream:  # the turn goes on
            return _json(framing.response)  # in_progress: retrieve it, or cancel it
        watch = await hub.watch(session_id)
    except ApiError as exc:
        return openai_error(exc.status, exc.message)
    if request.body.stream:  # a background one's client may go: its turn is detached
        return EventStream(watch, cursor, framing)
    return await _whole(watch, cursor, framing, receive)


async def _start(hub: Hub, request: ResponsesRequest) -> tuple[str, int, int]:
    """Start the request's turn: in a new session, in the session it continues
    (its previous response's, still the latest when the turn starts), or in a
    branch: a response older than its session's latest (by then) is continued in a
    new session forked from that turn's end, as the Responses API branches
    (``Agent.fork``; the original is left as it is). Its answers to held calls
    are recorded all or none, in the session the turn runs in; a refused request
    leaves nothing behind. The session, the turn and the cursor its events
    follow."""
    decisions, message = request.decisions, request.message
    respond = partial(hub.respond, detached=bool(request.body.background))
    if request.previous is None:
        session_id = new_session_id()
        cursor = await hub.last_sequence(session_id)
        return session_id, await respond(session_id, decisions, message, after=0), cursor
    source, turn = request.previous
    if turn == await _latest(hub, request):
        cursor = await hub.last_sequence(source)
        try:
            return source, await respond(source, decisions, message, after=turn), cursor
        except Moved:  # another continuation of that response came first
            pass
    session_id = await _branch(hub, source, turn, decisions)
    cursor = await hub.last_sequence(session_id)
    return session_id, await respond(session_id, decisions, message, after=turn), cursor


async def _latest(hub: Hub, request: ResponsesRequest) -> int:
    """The latest turn of the session the request's previous response is of;
    ``ApiError(400)`` when that response is not there."""
    assert request.previous is not None
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
    return int(state["turns"])


async def _branch(hub: Hub, session_id: str, turn: int, decisions: Sequence[Decision]) -> str:
    """A new session whose history is ``session_id``'s through turn ``turn``, made
    only when ``decisions`` name calls that wait there (else ``ApiError``)."""

    def check(records: Sequence[Record]) -> None:
        derived = derive(records)
        done = derived.decisions
        waiting = (call.id for call in derived.pending_approvals if call.id not in done)
        check_decisions(decisions, waiting, done)

    store = hub.place.store
    try:
        return await fork_session(store, session_id, turn, new_session_id(), None, check)
    except LedgerError as exc:  # the source is damaged, or the database is away
        raise ApiError(503, f"cannot branch from response {turn} of {session_id}: {exc}") from None


async def _whole(
    watch: Watch, cursor: int, framing: ResponsesFraming, receive: Receive
) -> Response:
    """The response once the turn has ended (the client waits). The feed closing
    first (the server stops) is a 503; the turn goes on being recorded. A client
    that goes away first leaves as a reader of the session's events does (under
    ``on_disconnect="cancel"``, the last one cancels the turn)."""
    gone = False

    async def out(body: bytes) -> None:
        pass

    async def until_gone(scope: trio.CancelScope) -> None:
        nonlocal gone
        await client_gone(receive)
        gone = True
        scope.cancel()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(until_gone, nursery.cancel_scope)
            await pump(watch.feed, framing, cursor, out)
            nursery.cancel_scope.cancel()
    finally:
        watch.leave(gone)
    if not framing.done:
        return openai_error(503, "the server stopped before the response was whole")
    return _json(framing.response)


def _json(response: dict[str, Any]) -> Response:
    return Response(msgspec.json.encode(response), 200, media_type="application/json")


async def retrieve(hub: Hub, text: str, stream: str | None, starts: TurnStarts) -> Response:
    """``GET /v1/responses/{id}``: the response ``text`` names, from its session's
    event log (from its turn's start, when ``starts`` knows it), or its error (404
    for an id none of ours has)."""
    try:
        if stream not in (None, "false"):
            raise ApiError(
                400,
                "stream: a response is not streamed again here; its session's "
                "events are (GET /sessions/{id}/events)",
            )
        return _json(await _stored(hub, text, starts))
    except ApiError as exc:
        return openai_error(exc.status, exc.message)


async def cancel_response(hub: Hub, text: str, starts: TurnStarts) -> Response:
    """``POST /v1/responses/{id}/cancel``: cancel the response's turn if it runs (as
    ``POST /sessions/{id}/cancel`` does) and give the response once the turn has
    ended (``cancelled``); a response already ended is given as it is, as the
    OpenAI API does for a background response. 409 for a turn another server
    runs (cancel it there)."""
    try:
        session_id, turn = _named(text)
        if await _running(hub, session_id, turn, text):
            await _cancel(hub, session_id, turn, text)
        return _json(await _stored(hub, text, starts))
    except ApiError as exc:
        return openai_error(exc.status, exc.message)


_PATH: Final = "/v1/responses/{id}"


def _named(text: str) -> tuple[str, int]:
    """The session and turn of a response id; 404 for an id none of ours has (the
    id, from a client, is not echoed), or for a response's path that is not
    served (``/input_items``: it says what is, not that there is no response)."""
    named = parse_response_id(text)
    if named is None:
        head, slash, _ = text.partition("/")
        if slash and parse_response_id(head) is not None:  # input_items, say
            raise ApiError(404, f"only GET {_PATH} and POST {_PATH}/cancel are served")
        raise ApiError(404, "No response found with this id: ids are resp_<session>_<turn>")
    return named


def _not_found(text: str) -> ApiError:
    return ApiError(404, f"No response found with id {text!r}")


async def _state(hub: Hub, session_id: str, text: str) -> dict[str, Any]:
    """The session's state (its running turn, here or on another server, and its
    turns recorded); 404 for no session."""
    try:
        return await hub.state(session_id)
    except ApiError as exc:
        raise _not_found(text) if exc.status == 404 else exc from None


async def _running(hub: Hub, session_id: str, turn: int, text: str) -> bool:
    """Whether the turn runs (here, or on another server); 404 for no session."""
    return bool((await _state(hub, session_id, text))["running_turn"] == turn)


async def _stored(hub: Hub, text: str, starts: TurnStarts) -> dict[str, Any]:
    """The response ``text`` names, rebuilt from its turn's logged events: whole once
    its end is logged; ``in_progress`` with its output so far while it runs;
    ``incomplete`` (``interrupted``) when it ended with no end logged."""
    session_id, turn = _named(text)
    # asked before reading: a turn that ended by then has its end logged
    state = await _state(hub, session_id, text)
    running = state["running_turn"] == turn
    if not running and turn > state["turns"]:  # never was (its start is recorded
        raise _not_found(text)  # before it is logged): no log is read for it
    framing, started = await replay(hub.place.events, session_id, turn, starts)
    if not started and not running:
        raise _not_found(text)
    if framing.done:
        return framing.response
    if running:
        return framing.so_far()
    framing.cut()
    return framing.response


async def _cancel(hub: Hub, session_id: str, turn: int, text: str) -> None:
    """Cancel the turn and wait until it has ended here (its end logged; the feed
    wakes its readers once the turn is cleared), or the server stops."""
    try:
        await hub.cancel(session_id, turn)
    except ApiError as exc:  # a 409: it ended meanwhile, or runs elsewhere
        if exc.status != 409 or await _running(hub, session_id, turn, text):
            raise
        return
    watch = await hub.watch(session_id)
    try:
        while True:
            changed = watch.feed.changed  # taken first: its end meanwhile sets it
            if hub.running_turn(session_id) != turn or watch.feed.closed:
                return
            await changed.wait()
    finally:
        watch.leave(False)
