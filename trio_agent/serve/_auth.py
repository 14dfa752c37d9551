"""Who may talk to the server: a bearer token, required beyond loopback.

``check_binding`` refuses to serve on an address other than loopback without a
token. ``BearerAuth`` wraps the application: with a token, every request needs
``Authorization: Bearer <token>`` (compared in constant time), else 401 with a
JSON error and nothing of the request is read.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any, Final, final

import msgspec

__all__ = ["BearerAuth", "check_binding", "check_token", "is_loopback"]

_CHALLENGE: Final = (b"www-authenticate", b'Bearer realm="trio-agent"')


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback name or address (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token: str | None) -> str | None:
    """The token if usable: printable ASCII without spaces, 16 to 4096 characters;
    ``ValueError`` saying why not (None: no token)."""
    if token is None:
        return None
    if not 16 <= len(token) <= 4096 or not token.isascii() or not token.isprintable():
        raise ValueError("the token must be 16 to 4096 printable ASCII characters")
    if " " in token:
        raise ValueError("the token must hold no space")
    return token


def check_binding(host: str, token: str | None) -> None:
    """``ValueError`` when ``host`` is reachable beyond this machine and no token is set."""
    if token is None and not is_loopback(host):
        raise ValueError(
            f"serving on {host} (beyond loopback) needs a bearer token: --token or TRIO_AGENT_TOKEN"
        )


@final
class BearerAuth:
    """The ASGI application ``app``, behind ``token`` (None: open, for loopback)."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self._expected = None if token is None else b"Bearer " + token.encode()

    def allowed(self, headers: list[tuple[bytes, bytes]]) -> bool:
        if self._expected is None:
            return True
        given = [value for name, value in headers if name.lower() == b"authorization"]
        return len(given) == 1 and hmac.compare_digest(given[0], self._expected)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" or self.allowed(scope.get("headers", [])):
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # a websocket: refused before it is accepted
            await send({"type": "websocket.close", "code": 1008})
            return
        body = msgspec.json.encode({"error": "a bearer token is needed (Authorization: Bearer)"})
        headers = [(b"content-type", b"application/json"), _CHALLENGE]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})
