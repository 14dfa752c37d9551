"""Who may talk to the server: a bearer token, required beyond loopback.

``check_binding`` refuses to serve on an address other than loopback without a
token. ``BearerAuth`` wraps the application: with a token, every request needs
``Authorization: Bearer <token>`` (compared in constant time), else 401 with a
JSON error and nothing of the request is read. The page's own files, which
hold no data, are served to anyone: ``GET /``, ``/page/page.js``,
``/page/page.css``. The token is taken from that header only, never from a
cookie or the URL: a cookie is scoped by host, not port, so a page served on
another port of the same host could read it and send it; a URL goes to logs
and to ``Referer``. The page keeps the token in ``sessionStorage`` and sends
the header itself (its event stream too, read with ``fetch``), and a page of
another origin cannot send that header without asking the server first
(CORS), which says no: no request forged elsewhere carries the token.

Without a token (loopback only) the server trusts this machine, not the pages a
browser on it shows: a request from another site's page (its ``Origin``: a form
or a script there can send one without asking the server first) or to a name
that is no loopback name (``Host``: a page of a name its owner points at
127.0.0.1, DNS rebinding, could read the answers) is a 403.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Any, Final, final
from urllib.parse import urlsplit

import msgspec

__all__ = ["BearerAuth", "check_binding", "check_token", "from_this_machine", "is_loopback"]

_CHALLENGE: Final = (b"www-authenticate", b'Bearer realm="trio-agent"')
PUBLIC: Final = frozenset({"/", "/page/page.js", "/page/page.css"})
"""The page's files: served without the token (they hold no session's data)."""


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
    """``ValueError`` when ``host`` is reachable beyond this machine and no token is set.
    It names both ways to give one: ``Server`` reads no environment variable, so
    the command line's words alone sent a library user to a variable it ignores."""
    if token is None and not is_loopback(host):
        raise ValueError(
            f"serving on {host} (beyond loopback) needs a bearer token: Server(token=...), "
            "or --token or TRIO_AGENT_TOKEN for `trio-agent serve`"
        )


def from_this_machine(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request may be served without a token: it names a loopback host
    (``Host``, once) and, if a browser sent it, a page of that same host and port
    sent it (``Origin``)."""
    hosts = [value for name, value in headers if name.lower() == b"host"]
    origins = [value for name, value in headers if name.lower() == b"origin"]
    try:
        host = hosts[0].decode("ascii").lower()
        name = urlsplit(f"//{host}").hostname
        sites = [urlsplit(origin.decode("ascii")).netloc.lower() for origin in origins]
    except (IndexError, UnicodeDecodeError, ValueError):
        return False
    loopback = len(hosts) == 1 and name is not None and is_loopback(name)
    return loopback and all(site == host for site in sites)


@final
class BearerAuth:
    """The ASGI application ``app``, behind ``token`` (None: open, for loopback)."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self._token = None if token is None else token.encode()

    def allowed(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether the request carries the token, in one ``Authorization`` header
        (its scheme in any case, as RFC 9110 has it: ``bearer`` is ``Bearer``)."""
        if self._token is None:
            return True
        given = [value for name, value in headers if name.lower() == b"authorization"]
        if len(given) != 1 or given[0][:7].lower() != b"bearer ":
            return False
        return hmac.compare_digest(given[0][7:], self._token)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        if self._token is None and not from_this_machine(headers):
            await _refuse(scope, send, 403, _LOOPBACK_ONLY)
            return
        safe = scope["type"] == "http" and scope["method"] in ("GET", "HEAD")
        public = safe and scope["path"] in PUBLIC
        if public or self.allowed(headers):
            await self.app(scope, receive, send)
            return
        await _refuse(scope, send, 401, "a bearer token is needed (Authorization: Bearer)")


_LOOPBACK_ONLY: Final = (
    "without a token this server answers only requests to a loopback address "
    "(localhost, 127.0.0.1, [::1]) not sent by another site's page; set a token to serve others"
)


async def _refuse(scope: Any, send: Any, status: int, message: str) -> None:
    """Answer ``status`` with a JSON error, having read nothing of the request."""
    if scope["type"] != "http":  # a websocket: refused before it is accepted
        await send({"type": "websocket.close", "code": 1008})
        return
    headers = [(b"content-type", b"application/json")]
    if status == 401:
        headers.append(_CHALLENGE)
    body = msgspec.json.encode({"error": message})
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
