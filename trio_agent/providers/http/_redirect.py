"""Redirects the HTTP client follows (_http.py): a 307 or 308 within the same
origin, at most ``MAX_REDIRECTS`` in a row, re-sending the same request (those
two keep the method, headers and body by definition). A redirect to another
origin is refused before anything is sent there (the request carries the API
key), and a 301, 302 or 303 (a POST a client would turn into a GET) stays an
error that names where it pointed.

Like every error of the client, these quote what the server sent (the
``Location``) raw: ``SSEModelStream`` scrubs the key out of them."""

from __future__ import annotations

import string
import urllib.parse
from collections.abc import Mapping

from ...model import ModelRequestError

MAX_REDIRECTS = 3
"""307 and 308 redirects followed in a row; one more is an error."""
FOLLOWED = frozenset({307, 308})
"""The statuses that keep the method and the body: followed within the origin."""
NOT_FOLLOWED = frozenset({301, 302, 303})
"""The statuses a client answers with a GET: an error naming the ``Location``."""
_SAFE = "".join(c for c in string.printable if not c.isspace())
"""Characters a request target keeps as they are; the rest (blanks, controls,
other bytes) is percent-encoded so that no ``Location`` can break the request line."""


def origin(url: str) -> tuple[str, str, int] | None:
    """Scheme, host (lower-cased) and port (the scheme's default filled in) of an
    http(s) URL, or None for anything else."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number, a bad IPv6 literal
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def request_target(url: str) -> str:
    """The path and query of ``url`` as a request line takes them."""
    parts = urllib.parse.urlsplit(url)
    target = parts.path or "/"
    if parts.query:
        target += f"?{parts.query}"
    return target


def not_followed(status: int, headers: Mapping[str, str]) -> str:
    """What an error for a 301, 302 or 303 adds to the status: where it pointed and
    why that is not followed; empty for any other answer."""
    location = headers.get("location")
    if status not in NOT_FOLLOWED or not location:
        return ""
    return (
        f" (a redirect to {location!r}, not followed: it would turn the POST into a GET;"
        " point base_url there if it is the new address)"
    )


class Redirects:
    """The redirects of one request so far, from its first URL: ``follow`` says
    where a response sends the request next."""

    __slots__ = ("_chain", "_provider")

    def __init__(self, url: str, provider: str) -> None:
        self._chain = [url]
        self._provider = provider

    @property
    def url(self) -> str:
        """Where the request goes now."""
        return self._chain[-1]

    def follow(self, status: int, headers: Mapping[str, str]) -> str | None:
        """The request target (path and query) to send the same request to next, if
        the response is a 307 or 308 with a ``Location`` in the same origin; None if
        it is not a redirect to follow. A ``Location`` in another origin (or not an
        http(s) URL), or one redirect more than ``MAX_REDIRECTS``, raises a
        ``ModelRequestError`` naming it."""
        location = headers.get("location")
        if status not in FOLLOWED or not location:
            return None
        resolved, _ = urllib.parse.urldefrag(urllib.parse.urljoin(self.url, location))
        if origin(resolved) is None or origin(resolved) != origin(self.url):
            raise ModelRequestError(
                f"{self._provider} answered HTTP {status} redirecting to {location!r}, "
                f"another origin than {self.url!r}: not followed (the request carries the "
                "API key; point base_url there if it is the new address)"
            )
        self._chain.append(resolved)
        if len(self._chain) > MAX_REDIRECTS + 1:
            raise ModelRequestError(
                f"{self._provider}: more than {MAX_REDIRECTS} redirects in a row, not "
                f"followed: {' -> '.join(self._chain)}"
            )
        target = request_target(resolved)
        return urllib.parse.quote(target.encode("latin-1", "replace"), safe=_SAFE)
