"""The library's loggers: standard ``logging``, silent unless the application
configures it.

One logger per part, under ``trio_agent`` (which has a ``NullHandler``, so
nothing reaches the terminal through logging's last resort): ``.loop``
(turns, steps, tool calls, retries), ``.session`` (resume), ``.ledger``,
``.providers`` (HTTP requests), ``.tools``, ``.mcp``, ``.fleet`` (sessions a
worker takes, lets go or cannot run). What they never carry:
a key, or the content of a message or of a tool's arguments or result.
A dependency whose loggers would print through the last resort is made as
silent with ``quiet_dependency`` (the MCP SDK's, by ``trio_agent.mcp``).
"""

from __future__ import annotations

import logging
import urllib.parse

__all__ = [
    "FLEET",
    "LEDGER",
    "LOOP",
    "MCP",
    "PROVIDERS",
    "SESSION",
    "TOOLS",
    "quiet_dependency",
    "safe_url",
]

logging.getLogger("trio_agent").addHandler(logging.NullHandler())

LOOP = logging.getLogger("trio_agent.loop")
SESSION = logging.getLogger("trio_agent.session")
LEDGER = logging.getLogger("trio_agent.ledger")
PROVIDERS = logging.getLogger("trio_agent.providers")
TOOLS = logging.getLogger("trio_agent.tools")
MCP = logging.getLogger("trio_agent.mcp")
FLEET = logging.getLogger("trio_agent.fleet")


def quiet_dependency(name: str) -> None:
    """Make a dependency's logger ``name`` as silent as ours unless the application
    configures logging: a ``NullHandler`` on it, so that logging's last resort
    never prints its records (a traceback on stderr); an application's handlers
    still get them by propagation. Idempotent."""
    logger = logging.getLogger(name)
    if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
        logger.addHandler(logging.NullHandler())


def safe_url(url: str) -> str:
    """``url`` without what may carry a secret: user info, the query, the fragment."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
