"""The grammar of ``trio-agent serve``: the session API over HTTP."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Final

from ._values import agent_ref, seconds, seconds_or_never

_SERVE_MORE: Final = (
    '. POST /sessions/ID/turns {"message": ...} starts a turn (202 {"turn": N}); '
    "GET /sessions/ID/events streams the session's events as server-sent events (id: "
    "the sequence, data: the --json line; Last-Event-ID or ?after=N resumes after N); "
    'POST /sessions/ID/cancel; POST /sessions/ID/approvals/CALL {"approved": bool, '
    '"reason": ...}; GET /sessions/ID; GET /sessions; POST /ag-ui (AG-UI 1.0); POST '
    "/v1/responses (OpenAI Responses); GET / (a web page). The first SIGTERM or Ctrl-C "
    "drains (no turn starts; those under way finish, for --drain-seconds at most), a "
    "second cancels them."
)


def serve_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``serve``: the session API over HTTP (``trio_agent.serve``)."""
    serve_parser = command("serve", "serve sessions over HTTP with your own agent", _SERVE_MORE)
    serve_parser.add_argument(
        "--agent",
        type=agent_ref,
        required=True,
        metavar="MODULE:NAME",
        help="your agent: an Agent (its options make each session) or a session factory "
        "(store, session_id, new) -> Agent, as trio_agent.fleet.agent_maker returns "
        "(required)",
    )
    where = serve_parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--store",
        metavar="DIR",
        help="the JSONL store directory of the sessions (made on first use); their events "
        "are logged in DIR/.events/ (required), or --dsn",
    )
    where.add_argument(
        "--dsn",
        metavar="DSN",
        help="the sessions in this PostgreSQL database (the [postgres] extra); their events "
        "in the schema's serve_events table (required), or --store",
    )
    serve_parser.add_argument(
        "--schema",
        default="trio_agent",
        metavar="NAME",
        help="with --dsn: the schema holding the sessions (default: trio_agent)",
    )
    serve_parser.add_argument(
        "--host", default="127.0.0.1", help="the address to bind (default: 127.0.0.1)"
    )
    serve_parser.add_argument(
        "--port", type=int, default=8000, help="the port (0: any free one) (default: 8000)"
    )
    serve_parser.add_argument(
        "--token",
        metavar="TOKEN",
        help="every request needs Authorization: Bearer TOKEN (the web page at / asks for it); "
        "required beyond loopback (default: TRIO_AGENT_TOKEN, else none)",
    )
    serve_parser.add_argument(
        "--on-disconnect",
        choices=["detach", "cancel"],
        default="detach",
        help="when the last client reading a session's events goes away: detach (its "
        "turn goes on) or cancel it (default: detach)",
    )
    serve_parser.add_argument(
        "--keep-alive",
        type=seconds_or_never,
        default=15.0,
        metavar="SECONDS",
        help="an event stream with no event for this long sends a ': keep-alive' comment, "
        "so proxies keep it open; 0: never (default: 15)",
    )
    serve_parser.add_argument(
        "--idle-seconds",
        type=seconds_or_never,
        default=600.0,
        metavar="SECONDS",
        help="a session with no turn, no reader and no request for this long is released "
        "(its agent and ledger closed; opened again on the next request); 0: never "
        "(default: 600)",
    )
    serve_parser.add_argument(
        "--drain-seconds",
        type=seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long turns under way may finish at shutdown (default: 30)",
    )
