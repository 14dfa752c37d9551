"""The HTTP routes of the session API (Starlette), each a thin step from a
checked request to the ``Hub`` and back as JSON; every error is JSON
``{"error": "..."}`` with its status, bad input a 4xx."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any, Final, final

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._agui import AguiFraming, AguiInput, answers_of, decisions_of, message_of, offers_of
from ._auth import BearerAuth
from ._bodies import (
    ApiError,
    Decision,
    TurnInput,
    cursor_of,
    decode_body,
    read_body,
    session_id_of,
)
from ._hub import SERVE, Hub
from ._openai_route import cancel_response, openai_error, responses, retrieve
from ._page import Page
from ._responses import TurnStarts
from ._sse import EventStream

__all__ = ["CallDecision", "build_app", "json_response"]

MAX_CALL_ID: Final = 256


class CallDecision(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /sessions/{id}/approvals``: the decision on the held call ``call_id``,
    named in the body: a path cannot carry every id (``.`` and ``..`` are taken
    out of a URL by browsers and HTTP clients before it is sent)."""

    call_id: str
    approved: bool
    reason: str = ""


def call_id_of(text: str) -> str:
    """A held call's id as asked for; ``ApiError(400)`` when none can have it."""
    if not 1 <= len(text) <= MAX_CALL_ID:
        raise ApiError(400, f"a call id has 1 to {MAX_CALL_ID} characters")
    return text


def json_response(value: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status, media_type="application/json")


@final
class _Routes:
    """The handlers, over ``hub``."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.starts = TurnStarts()  # where retrieved responses' turns start in their logs

    async def sessions(self, request: Request) -> Response:
        return json_response({"sessions": await self.hub.sessions()})

    async def session(self, request: Request) -> Response:
        session_id = session_id_of(request.path_params["session_id"])
        return json_response(await self.hub.state(session_id))

    async def turns(self, request: Request) -> Response:
        """202 ``{"turn": n}``; or, for a session another server holds (``--dsn``),
        202 ``{"queued": n}``: input ``n`` of the fleet's inbox, which that server
        runs (no turn number: it numbers the turn when it runs it)."""
        session_id = session_id_of(request.path_params["session_id"])
        given = decode_body(await _body(request), TurnInput)
        kind, number = await self.hub.post_turn(session_id, given.message)
        return json_response({kind: number}, 202)

    async def events(self, request: Request) -> Response:
        session_id = session_id_of(request.path_params["session_id"])
        cursor = cursor_of(request.headers.get("last-event-id"), request.query_params.get("after"))
        return EventStream(await self.hub.watch(session_id), cursor)

    async def cancel(self, request: Request) -> Response:
        session_id = session_id_of(request.path_params["session_id"])
        return json_response({"turn": await self.hub.cancel(session_id)}, 202)

    async def approvals(self, request: Request) -> Response:
        """The decision on the call named in the path (``%2F`` for a ``/`` in it)."""
        session_id = session_id_of(request.path_params["session_id"])
        call_id = call_id_of(request.path_params["call_id"])
        given = decode_body(await _body(request), Decision)
        return await self._decide(session_id, call_id, given.approved, given.reason)

    async def approval(self, request: Request) -> Response:
        """The decision on the call named in the body (any id: ``.`` and ``..`` too)."""
        session_id = session_id_of(request.path_params["session_id"])
        given = decode_body(await _body(request), CallDecision)
        call_id = call_id_of(given.call_id)
        return await self._decide(session_id, call_id, given.approved, given.reason)

    async def _decide(self, session_id: str, call_id: str, approved: bool, reason: str) -> Response:
        await self.hub.decide(session_id, call_id, approved, reason)
        return json_response({"call": call_id, "approved": approved})

    async def agui(self, request: Request) -> Response:
        return await _agui_run(self.hub, decode_body(await _body(request), AguiInput))

    async def responses(self, request: Request) -> Response:
        try:
            body = await _body(request)
        except ApiError as exc:
            return openai_error(exc.status, exc.message)
        return await responses(self.hub, body, request.receive)

    async def response(self, request: Request) -> Response:
        stream = request.query_params.get("stream")
        return await retrieve(self.hub, request.path_params["response_id"], stream, self.starts)

    async def cancel_response(self, request: Request) -> Response:
        return await cancel_response(self.hub, request.path_params["response_id"], self.starts)


async def _agui_run(hub: Hub, given: AguiInput) -> EventStream:
    """An AG-UI run: the resume entries decided (all, or none when one cannot be),
    then a turn, streamed as AG-UI."""
    session_id = session_id_of(given.thread_id)
    if not 1 <= len(given.run_id) <= MAX_CALL_ID:
        raise ApiError(400, f"a runId has 1 to {MAX_CALL_ID} characters")
    decided, offers, answers = decisions_of(given), offers_of(given), answers_of(given)
    # the input refused before anything is opened (a thread's event log, its agent);
    # a run that may go on from its answers knows its message once they are given
    goes_on = bool(answers) and given.messages[-1].role == "tool"
    message = None if given.resume or goes_on else message_of(given)
    frontend: frozenset[str] = frozenset()
    if offers or answers:
        frontend = await hub.offer_tools(session_id, offers)
    cursor = await hub.last_sequence(session_id)
    answered = await hub.answer_calls(session_id, answers, decided)  # all, or none
    if goes_on and not given.resume:
        message = message_of(given, answered)
    if decided:  # all recorded, or none (a refused run), then the turn, under one lock
        turn = await hub.respond(session_id, decided, message)
    else:
        turn = await hub.start_turn(session_id, message)
    framing = AguiFraming(given.thread_id, given.run_id, turn, frontend)
    return EventStream(await hub.watch(session_id), cursor, framing)


async def _body(request: Request) -> bytes:
    """The request's body, capped; a body refused part way is not read further."""
    announced = request.headers.get("content-length")
    async with aclosing(request.stream()) as chunks:
        return await read_body(chunks, announced=announced)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return json_response({"error": exc.message}, exc.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no route, a method not served): under ``/v1/`` in
    OpenAI's error shape, which the official SDKs read (``responses.delete`` got
    Starlette's ``{"error": "Method Not Allowed"}``)."""
    assert isinstance(exc, HTTPException)
    if not request.url.path.startswith("/v1/"):
        return json_response({"error": exc.detail}, exc.status_code)
    said = f"{request.method} is not served at {request.url.path[:200]!r}"  # a client's path
    if exc.status_code == 405 and request.method == "DELETE":
        said += ": responses are kept, as their session's history is (append-only)"
    answer = openai_error(exc.status_code, f"{exc.detail}: {said}")
    answer.headers.update(exc.headers or {})
    return answer


async def _server_error(request: Request, exc: Exception) -> Response:
    SERVE.error("%s %s failed: %r", request.method, request.url.path, exc)
    return json_response({"error": "the server failed; see its log"}, 500)


def build_app(hub: Hub, *, token: str | None = None) -> BearerAuth:
    """The ASGI application of ``hub``'s sessions, behind ``token`` if given."""
    routes = _Routes(hub)
    page = Page()
    app = Starlette(
        routes=[
            Route("/", page.index, methods=["GET"]),
            Route("/page/{name}", page.asset, methods=["GET"]),
            Route("/sessions", routes.sessions, methods=["GET"]),
            Route("/sessions/{session_id}", routes.session, methods=["GET"]),
            Route("/sessions/{session_id}/turns", routes.turns, methods=["POST"]),
            Route("/sessions/{session_id}/events", routes.events, methods=["GET"]),
            Route("/sessions/{session_id}/cancel", routes.cancel, methods=["POST"]),
            # a model names its calls: in the body, any id; in the path, one may hold
            # "/" (sent as %2F, decoded before routing) but cannot be "." or ".."
            Route("/sessions/{session_id}/approvals", routes.approval, methods=["POST"]),
            Route(
                "/sessions/{session_id}/approvals/{call_id:path}",
                routes.approvals,
                methods=["POST"],
            ),
            Route("/ag-ui", routes.agui, methods=["POST"]),
            Route("/v1/responses", routes.responses, methods=["POST"]),
            # any id, "/" too, reaches the handler: an id none of ours has is an
            # OpenAI-shaped 404 (POST .../cancel is matched first)
            Route(
                "/v1/responses/{response_id:path}/cancel",
                routes.cancel_response,
                methods=["POST"],
            ),
            Route("/v1/responses/{response_id:path}", routes.response, methods=["GET"]),
        ],
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            Exception: _server_error,
        },
    )
    app.router.redirect_slashes = False  # a path of no route is a 404, not a redirect
    return BearerAuth(app, token)
