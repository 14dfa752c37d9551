"""Who may talk to the server: a bearer token, required beyond loopback.

``check_binding`` refuses to serve on an address other than loopback without a
token. ``BearerAuth`` wraps the application: with a token, every request needs
``Authorization: Bearer <token>`` (compared in constant time), else 401 with a
JSON error and nothing of the request is read. A browser cannot put a header on
an ``EventSource`` or a page load, so the token is also taken from the cookie
``trio_agent_token`` (percent-encoded; the page sets it ``SameSite=Strict``, so
no other site's request carries it), and the page's own files, which hold no
data, are served to anyone: ``GET /``, ``/page/page.js``, ``/page/page.css``.
A request that changes something (not ``GET`` or ``HEAD``) is taken on the
cookie only with the header ``x-trio-agent-page``, which the page sends and a
form or a page of another origin cannot (a browser asks the server first,
which says no): a page on another port of the same host is the same site and
would carry the cookie.

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
from urllib.parse import unquote_to_bytes, urlsplit

import msgspec

__all__ = ["BearerAuth", "check_binding", "check_token", "from_this_machine", "is_loopback"]

_CHALLENGE: Final = (b"www-authenticate", b'Bearer realm="trio-agent"')
COOKIE: Final = "trio_agent_token"
PAGE_HEADER: Final = b"x-trio-agent-page"
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
    """``ValueError`` when ``host`` is reachable beyond this machine and no token is set."""
    if token is None and not is_loopback(host):
        raise ValueError(
            f"serving on {host} (beyond loopback) needs a bearer token: --token or TRIO_AGENT_TOKEN"
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

    def allowed(self, headers: list[tuple[bytes, bytes]], safe: bool = True) -> bool:
        """Whether the request carries the token (``safe``: it changes nothing)."""
        if self._token is None:
            return True
        given = [value for name, value in headers if name.lower() == b"authorization"]
        if given:
            return len(given) == 1 and hmac.compare_digest(given[0], b"Bearer " + self._token)
        if not safe and not any(name.lower() == PAGE_HEADER for name, _ in headers):
            return False  # a cross-site form would carry the cookie, never this header
        cookies = [_cookie(value) for name, value in headers if name.lower() == b"cookie"]
        found = [value for value in cookies if value is not None]
        return len(found) == 1 and hmac.compare_digest(found[0], self._token)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        if self._token is None and not from_this_machine(headers):
            await _refuse(scope, send, 403, _LOOPBACK_ONLY)
            return
        safe = scope["type"] != "http" or scope["method"] in ("GET", "HEAD")
        public = scope["type"] == "http" and safe and scope["path"] in PUBLIC
        if public or self.allowed(headers, safe):
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


def _cookie(header: bytes) -> bytes | None:
    """The token cookie's value in a ``Cookie`` header, percent-decoded; None when
    absent (or given twice: refused, as two Authorization headers are)."""
    values = []
    for pair in header.split(b";"):
        name, sep, value = pair.strip().partition(b"=")
        if sep and name == COOKIE.encode():
            values.append(unquote_to_bytes(value))
    return values[0] if len(values) == 1 else None
