"""Sessions over HTTP: ``trio-agent serve`` and ``Server`` (the ``[serve]`` extra:
Starlette on Hypercorn's trio worker).

- ``POST /sessions/{id}/turns`` ``{"message": "..."}``: start a turn (the
  session made if new); 202 ``{"turn": n}`` at once, 409 while a turn runs;
  with ``dsn=``, for a session another server holds, 202 ``{"queued": n}``:
  the message queued in the fleet's inbox (input ``n``, for
  ``fleet.wait_for_turn``), and that server runs it;
- ``GET /sessions/{id}/events``: the session's events as server-sent events,
  ``id:`` the event's sequence, ``data:`` its ``--json`` line; with
  ``Last-Event-ID`` or ``?after=N`` exactly the events after N, from the
  event log and then live, across server restarts too;
- ``POST /sessions/{id}/cancel``; ``POST /sessions/{id}/approvals/{call_id}``
  ``{"approved": bool, "reason": "..."}``;
- ``GET /sessions/{id}`` (its derived state) and ``GET /sessions``;
- AG-UI 1.0 at ``POST /ag-ui`` (``threadId`` is the session): a run is a
  turn, held calls are interrupts, a resume entry decides them;
- OpenAI Responses at ``POST /v1/responses`` (a response is a turn;
  ``previous_response_id`` continues its session), ``GET /v1/responses/{id}``
  (rebuilt from the turn's logged events) and ``POST /v1/responses/{id}/cancel``.

Bad input is a 4xx with a JSON ``{"error": ...}``. Importing ``trio_agent``
imports none of this.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._bodies import MAX_BODY_BYTES as MAX_BODY_BYTES
from ._hub import SessionFactory as SessionFactory
from ._server import Server as Server

__all__ = ["MAX_BODY_BYTES", "Server", "SessionFactory"]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
