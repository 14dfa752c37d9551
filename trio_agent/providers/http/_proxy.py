"""HTTP proxies: which one a request goes through, and the tunnel through it.

``proxy_for`` picks the proxy for a URL from ``proxy=`` or from the environment
variables, read as curl reads them (``NO_PROXY`` included, ported from curl's
``lib/proxy.c``: users set these variables for curl first, so the same value
must mean the same here), except that ``HTTP_PROXY`` counts too, as in Python's
``urllib`` (and so requests and httpx), unless running under CGI. An https
request goes through a ``CONNECT`` tunnel (``open_tunnel``), TLS to the server
inside it; a plain http request is sent to the proxy with its absolute URL as
the target (``absolute_target``). ``refused`` is what a proxy's refusal stands
for, of a tunnel or of a forwarded request.

Everything here is pure except ``open_tunnel``. No message ever quotes a proxy
password: errors name a proxy by ``Proxy.shown`` (``scheme://host:port``), and
``Proxy.secrets`` is what a ``Redactor`` must hide besides the API key.
"""

from __future__ import annotations

import base64
import socket
import ssl
import urllib.parse
from collections.abc import Mapping
from typing import Final, final

import attrs
import trio

from ...model import (
    ModelAuthenticationError,
    ModelError,
    ModelRequestError,
    ModelResponseError,
    TransientModelError,
)
from ._errors import lenient, retry_after, transport_error
from ._redirect import request_target
from ._wire import HeadReader

ENVIRONMENT: Final = "environment"
"""The default of ``proxy=``: take the proxy from the environment variables."""

_HTTPS_VARIABLES = ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
_HTTP_VARIABLES = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")
"""With ``HTTP_PROXY``, which curl never reads, as Python's
``urllib.request.getproxies_environment`` (so requests and httpx) reads it, and
as DESIGN 11.3 promises; but see ``_CGI_HTTP_VARIABLES``."""
_CGI_HTTP_VARIABLES = ("http_proxy", "all_proxy", "ALL_PROXY")
"""Under CGI (``_CGI_VARIABLE`` set) a request's ``Proxy:`` header reaches the
program as ``HTTP_PROXY`` ("httpoxy", CVE-2016-5385, CVE-2016-1000110): the
upper-case name is then the client's, not the user's, and only the lower-case
``http_proxy`` counts (urllib's rule)."""
_CGI_VARIABLE = "REQUEST_METHOD"
"""Set (to any value, even empty) under CGI: what urllib tests for."""
_NO_PROXY_VARIABLES = ("no_proxy", "NO_PROXY")
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
"""As httpx and requests (curl takes 1080 for a proxy URL without a port)."""
_TRANSIENT_STATUS = frozenset({408, 429})
"""Statuses under 500 from a proxy that another attempt may get past (any 5xx
may too): 408, the proxy's own request timeout, and 429, its rate limit.
Deliberately not ``_errors``' list for a provider's answers, which adds 409 and
425 (and 529, a 5xx anyway): 409 is there because the providers' own SDKs retry
their API's 409 (a conflict on their side), which means nothing from a proxy;
425 Too Early refuses TLS early data, which this client never sends (and never
in a CONNECT, sent before any TLS to the server)."""
MIN_SECRET_CHARS: Final = 6
"""The fewest characters a form of a proxy's credentials must have to go into
``Proxy.secrets``. A ``Redactor`` hides every occurrence of a secret, in any
case and encoding, wherever it stands: a shorter one (a password "1", "abc")
cannot be told from ordinary text, and hiding it would mangle every message
(``127.0.0.1`` becoming ``[redacted]27.0.0.[redacted]`` for a password "1")."""
_HOST_CHARACTERS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:%[]"
)
"""What a host in a ``CONNECT`` line may hold (RFC 3986 reg-name and IP literals)."""


@final
@attrs.frozen
class Proxy:
    """An HTTP proxy: ``scheme`` is how we talk to the proxy itself ("http", or
    "https" for TLS to it), ``authorization`` the ``Proxy-Authorization`` value
    for the credentials of its URL (Basic), ``secrets`` the texts that give them
    away (the password, the Basic token), those of at least
    ``MIN_SECRET_CHARS``. Neither shows in its repr."""

    scheme: str
    host: str
    port: int
    authorization: str | None = attrs.field(default=None, repr=False)
    secrets: tuple[str, ...] = attrs.field(default=(), repr=False)

    @property
    def shown(self) -> str:
        """``scheme://host:port``, never the credentials: how errors name it."""
        return f"{self.scheme}://{_bracketed(self.host)}:{self.port}"


def parse_proxy(url: str, source: str) -> Proxy:
    """The proxy a URL names; ``source`` (``"proxy="`` or a variable's name) starts
    every error. Without a scheme (``proxy.corp:3128``) it is http, as in curl;
    without a port, 80 for http and 443 for https. User and password are
    percent-decoded into a Basic ``Proxy-Authorization``. ``ValueError`` for an
    unsupported scheme (socks), no host or a bad port; no message quotes the URL,
    which may hold the password."""
    text = url.strip()
    if not text:
        raise ValueError(f"{source}: an empty proxy URL (proxy=None means no proxy)")
    if "://" not in text:
        text = f"http://{text}"
    parts = _split(text)
    if parts is None:
        raise ValueError(
            f"{source}: the proxy URL does not parse (a bad [IPv6] host, or a '[' or ']' "
            "in the user or password: percent-encode it)"
        )
    if parts.scheme not in _DEFAULT_PORTS:
        kind = f"{parts.scheme}:// proxies are" if parts.scheme else "a URL without a scheme is"
        raise ValueError(
            f"{source}: {kind} not supported: only http:// and https:// proxies (CONNECT)"
        )
    if "@" in parts.path + parts.query + parts.fragment:
        raise ValueError(
            f"{source}: the proxy URL's user or password holds a '/', '?' or '#': "
            "percent-encode it (%2F, %3F, %23)"
        )
    port = _port(parts)
    if port is None:
        raise ValueError(f"{source}: the proxy URL's port is not a number from 1 to 65535")
    host = parts.hostname
    if not host:
        raise ValueError(f"{source}: the proxy URL has no host")
    if not set(host) <= _HOST_CHARACTERS:
        raise ValueError(f"{source}: the proxy URL's host is not a host name or an address")
    authorization, secrets = _credentials(parts)
    return Proxy(parts.scheme, host, port or _DEFAULT_PORTS[parts.scheme], authorization, secrets)


def _split(text: str) -> urllib.parse.SplitResult | None:
    try:
        return urllib.parse.urlsplit(text)
    except ValueError:  # an unclosed '[': its message quotes nothing, but say it our way
        return None


def _port(parts: urllib.parse.SplitResult) -> int | None:
    """The URL's port, 0 if it has none, None if it is not one (urllib's error
    would quote the text, which a password with an unencoded '/' becomes)."""
    try:
        port = parts.port
    except ValueError:
        return None
    if port is None:
        return 0
    return port if port > 0 else None


def _credentials(parts: urllib.parse.SplitResult) -> tuple[str | None, tuple[str, ...]]:
    """The ``Proxy-Authorization`` value of the URL's user and password, and the
    texts to redact: the Basic token and the password (decoded, and as written
    if that differs), each if it has at least ``MIN_SECRET_CHARS`` characters.
    The token always has, but for credentials of 3 bytes or fewer in all
    ("a:b", 4 characters of base64): it is 4 characters per 3 bytes of
    ``user:password``, so 8 or more from 4 bytes on."""
    user, password = parts.username, parts.password
    if not user and password is None:
        return None, ()
    raw = urllib.parse.unquote_to_bytes(user or "") + b":"
    raw += urllib.parse.unquote_to_bytes(password or "")
    token = base64.b64encode(raw).decode("ascii")
    secrets = [token]
    if password:
        secrets.append(urllib.parse.unquote(password, errors="replace"))
        secrets.append(password)
    kept = (secret for secret in secrets if len(secret) >= MIN_SECRET_CHARS)
    return f"Basic {token}", tuple(dict.fromkeys(kept))


def proxy_for(url: str, proxy: str | None, environ: Mapping[str, str]) -> Proxy | None:
    """The proxy a request to ``url`` goes through, None for a direct connection.

    ``proxy=None``: none. ``proxy="environment"`` (the default): from the
    variables, as curl reads them: for https ``https_proxy``, ``HTTPS_PROXY``,
    then ``all_proxy``, ``ALL_PROXY``; for http ``http_proxy``, ``HTTP_PROXY``
    (which curl never reads: here as in Python's urllib), then ``all_proxy``,
    ``ALL_PROXY``, except under CGI (``REQUEST_METHOD`` in ``environ``, even
    empty), where ``HTTP_PROXY`` is skipped: it is then a request's ``Proxy:``
    header (httpoxy). The lower-case name wins; an empty value counts as unset,
    as in curl (urllib would take an empty ``http_proxy`` as "no proxy for
    http"); a host that ``no_proxy`` (or ``NO_PROXY``) matches goes direct
    (``no_proxy_matches``; localhost too only if listed there). Any other string
    is the proxy's URL, used for every request: ``NO_PROXY`` does not apply to
    it. ``ValueError`` names the variable (or ``proxy=``) whose URL is wrong."""
    if proxy is None:
        return None
    if proxy != ENVIRONMENT:
        return parse_proxy(proxy, "proxy=")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS:
        raise ValueError(f"not an http or https URL (its scheme: {parts.scheme!r})")
    names: tuple[str, ...] = _HTTPS_VARIABLES
    if parts.scheme == "http":
        names = _CGI_HTTP_VARIABLES if _CGI_VARIABLE in environ else _HTTP_VARIABLES
    found = _variable(environ, names)
    if found is None:
        return None
    excluded = _variable(environ, _NO_PROXY_VARIABLES)
    if excluded is not None and no_proxy_matches(parts.hostname or "", excluded[1]):
        return None
    return parse_proxy(found[1], found[0])


def _variable(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of ``names`` set to a non-empty value, and the value."""
    for name in names:
        value = environ.get(name)
        if value:
            return name, value
    return None


# ----------------------------------------------------------------- NO_PROXY
#
# A port of curl's proxy_check_noproxy, cidr4_match and cidr6_match (lib/proxy.c,
# formerly lib/noproxy.c), byte for byte: tests/providers/http/test_proxy_env.py runs the
# vectors of curl's tests/unit/unit1614.c against it.


def no_proxy_matches(host: str, no_proxy: str) -> bool:
    """Whether ``no_proxy`` exempts ``host`` from the proxy, as curl decides.

    ``*`` alone matches every host. Otherwise the value is a list of names
    separated by commas, with blanks (space, tab) around them: a blank not
    followed by a comma ends the list, as in curl (``"a b"`` is ``"a"``). A name
    matches the host itself or a domain it is in, at a label boundary
    (``example.com`` and ``.example.com`` both match ``example.com`` and
    ``www.example.com``, not ``nonexample.com``), case-insensitively, a trailing
    dot ignored on either side. A host that is an IPv4 or IPv6 address is
    compared to addresses only, with an optional ``/bits`` CIDR suffix (curl's
    rules: ``/0`` or none compares whole addresses for IPv4). Host names are not
    resolved. Beyond curl: an address in brackets (``[::1]``, ``[::1]/64``) is
    taken as the address, where curl would never match it."""
    if not host or not no_proxy:
        return False
    if no_proxy == "*":
        return True
    name = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    family = _address_family(name)
    encoded = name.encode("utf-8", "surrogateescape")
    if family is None and encoded.endswith(b"."):
        encoded = encoded[:-1]
    for token in _tokens(no_proxy.encode("utf-8", "surrogateescape")):
        if family is None:
            if _match_host(token, encoded):
                return True
        elif _match_ip(family, token, name):
            return True
    return False


def _tokens(value: bytes) -> list[bytes]:
    """The names of a ``NO_PROXY`` value, split as curl's loop does."""
    tokens: list[bytes] = []
    at, end = 0, len(value)
    while at < end:
        at = _pass_blanks(value, at)
        start = at
        while at < end and value[at] not in b" \t,":
            at += 1
        if at > start:
            tokens.append(value[start:at])
        at = _pass_blanks(value, at)
        if at >= end or value[at] != ord(","):
            break  # not a comma: this ends the list
        while at < end and value[at] == ord(","):
            at += 1
    return tokens


def _pass_blanks(value: bytes, at: int) -> int:
    while at < len(value) and value[at] in b" \t":
        at += 1
    return at


def _address_family(name: str) -> int | None:
    for family in (socket.AF_INET, socket.AF_INET6):
        if _packed(family, name) is not None:
            return family
    return None


def _packed(family: int, address: str) -> bytes | None:
    """``inet_pton``, None for anything that is not an address of ``family``."""
    try:
        return socket.inet_pton(family, address)
    except (OSError, ValueError):  # UnicodeEncodeError is a ValueError
        return None


def _match_host(token: bytes, name: bytes) -> bool:
    """curl's match_host: ``name`` (its trailing dot already dropped) is the token
    (one leading and one trailing dot ignored) or in its domain."""
    if token.endswith(b"."):
        token = token[:-1]
    if token.startswith(b"."):
        token = token[1:]
    if len(token) == len(name):
        return token.lower() == name.lower()
    if len(token) < len(name):
        cut = len(name) - len(token)
        return name[cut - 1 : cut] == b"." and name[cut:].lower() == token.lower()
    return False


def _match_ip(family: int, token: bytes, name: str) -> bool:
    """curl's match_ip: ``token`` is an address, with an optional ``/bits``."""
    if len(token) >= 128:  # curl's buffer: such a token cannot match
        return False
    text = token.decode("latin-1")
    if text.startswith("[") and "]" in text:  # beyond curl: [::1], [::1]/64
        inside, _, after = text[1:].partition("]")
        if after and not after.startswith("/"):
            return False
        text = inside + after
    address, slash, digits = text.partition("/")
    bits = 0
    if slash:
        if not (digits.isascii() and digits.isdigit()) or int(digits) > 128:
            return False
        bits = int(digits)
    if family == socket.AF_INET6:
        return cidr6_match(name, address, bits)
    return cidr4_match(name, address, bits)


def cidr4_match(ipv4: str, network: str, bits: int) -> bool:
    """curl's cidr4_match: ``ipv4`` is in ``network/bits`` (0 or 32: equal)."""
    if bits > 32:
        return False
    address, check = _packed(socket.AF_INET, ipv4), _packed(socket.AF_INET, network)
    if address is None or check is None:
        return False
    if bits and bits != 32:
        mask = (0xFFFFFFFF << (32 - bits)) & 0xFFFFFFFF
        return not (int.from_bytes(address) ^ int.from_bytes(check)) & mask
    return address == check


def cidr6_match(ipv6: str, network: str, bits: int) -> bool:
    """curl's cidr6_match: ``ipv6`` is in ``network/bits`` (0: all 128 bits)."""
    bits = bits or 128
    whole, rest = divmod(bits, 8)
    if whole > 16 or (whole == 16 and rest):
        return False
    address, check = _packed(socket.AF_INET6, ipv6), _packed(socket.AF_INET6, network)
    if address is None or check is None:
        return False
    if address[:whole] != check[:whole]:
        return False
    return not (rest and (address[whole] ^ check[whole]) & (0xFF << (8 - rest)) & 0xFF)


# ---------------------------------------------------------- through a proxy


def _bracketed(host: str) -> str:
    """An IPv6 address in brackets, as a URL or a ``host:port`` writes it."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def absolute_target(url: str) -> str:
    """The request target of a plain http request sent to a proxy: the absolute
    URL (RFC 9112 absolute-form), ``http://host[:port]/path?query``: the scheme,
    host and port as ``url`` writes them, never its user and password, and the
    path and query as ``_redirect.request_target`` gives them (the fragment
    dropped)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an http or https URL (its scheme: {parts.scheme!r})")
    authority = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{authority}{request_target(url)}"


async def open_tunnel(
    stream: trio.abc.Stream, proxy: Proxy, host: str, port: int, seconds: float, provider: str
) -> bytes:
    """Ask the proxy at the other end of ``stream`` for a tunnel to ``host:port``
    (``CONNECT``, with ``Proxy-Authorization`` if the proxy has credentials) and
    read its answer; on a 2xx the stream is the tunnel, ready for TLS. Returns
    the bytes read past the answer's head: always ``b""`` (a proxy that sends
    more before we spoke is a ``ModelResponseError``).

    Sending and each wait for bytes is bounded by ``seconds``
    (``TransientModelError``). A proxy that closes or breaks the connection is a
    ``TransientModelError``; a refusal (any status but 2xx) the error
    ``refused`` gives for it. Each names the proxy by ``Proxy.shown`` and the
    target, never the credentials.

    It closes nothing: on an error or a cancellation (which propagates from any
    send or receive, leaving the exchange half done) the caller, which owns the
    stream, closes it."""
    authority = _authority(host, port)
    where = f"{provider}: proxy {proxy.shown}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    if proxy.authorization is not None:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
    try:
        with trio.CancelScope(deadline=trio.current_time() + seconds) as scope:
            await stream.send_all(request)
        if scope.cancelled_caught:
            raise TransientModelError(
                f"{where} did not take the CONNECT to {authority} within {seconds} s "
                "(write timeout)"
            )
        return await _answer(stream, proxy, authority, seconds, provider)
    except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
        raise transport_error(f"{where} (CONNECT {authority})", exc) from None


async def _answer(
    stream: trio.abc.Stream, proxy: Proxy, authority: str, seconds: float, provider: str
) -> bytes:
    """Read the proxy's answer to the CONNECT: the bytes after its head, or the
    error its status stands for."""
    where = f"{provider}: proxy {proxy.shown}"
    reader = HeadReader(where)  # each byte parsed once, whatever the reads
    head = None
    while head is None:
        with trio.CancelScope(deadline=trio.current_time() + seconds):
            data = await stream.receive_some(65536)
            if not data:
                raise TransientModelError(
                    f"{where} closed the connection before answering the CONNECT to {authority}"
                )
            head = reader.feed(bytes(data))
            continue
        raise TransientModelError(  # only the deadline ends the scope early
            f"{where} did not answer the CONNECT to {authority} within {seconds} s (read timeout)"
        )
    status, headers, rest = head
    if not 200 <= status < 300:
        raise refused(proxy, status, headers, authority, provider)
    if rest:
        raise ModelResponseError(
            f"{where} sent {len(rest)} bytes after accepting the CONNECT to {authority}, "
            "before the client spoke: not a tunnel"
        )
    return rest


def proxy_answered(status: int, headers: Mapping[str, str], body: bytes) -> bool:
    """Whether the answer to a request forwarded through a proxy (plain http) is
    the proxy refusing its credentials rather than the server's: a 407 always;
    a 401 that asks for proxy credentials (``Proxy-Authenticate``) or whose body
    is not a JSON object (a provider's API answers a 401 with a JSON error; a
    proxy, as tinyproxy does, with its own page). Any other status may be the
    server's, and is left to it."""
    if status == 407:
        return True
    if status != 401:
        return False
    return "proxy-authenticate" in headers or type(lenient(body)) is not dict


def refused(
    proxy: Proxy, status: int, headers: Mapping[str, str], target: str, provider: str
) -> ModelError:
    """The error a proxy's refusal (any status but 2xx) stands for, for
    ``open_tunnel`` and for a plain http request forwarded through the proxy
    (the HTTP client's, on an answer ``proxy_answered`` says is the proxy's).
    ``target`` is the request target as sent: the authority form
    of a ``CONNECT`` (``host:port``, "a tunnel to" it), or the absolute URL of a
    forwarded request ("a request to" its ``scheme://host:port``: the path and
    query are left out, and any user and password).

    A 407 or a 401 is a ``ModelAuthenticationError``: the proxy "asks for
    credentials" when the proxy URL gave none, "refused the credentials" when it
    did (and says so if the proxy asks for a scheme other than Basic). A 5xx,
    408 or 429 is a ``TransientModelError`` carrying any ``Retry-After``; any
    other status a ``ModelRequestError``. Each starts ``"{provider}: proxy
    {Proxy.shown}"`` and names the target, never the credentials."""
    where = f"{provider}: proxy {proxy.shown}"
    if "://" in target:  # absolute form: never in an authority (no '/' in a host)
        parts = urllib.parse.urlsplit(target)
        action = f"forward a request to {parts.scheme}://{parts.netloc.rpartition('@')[2]}"
    else:
        action = f"open a tunnel to {target}"
    if status in (401, 407):
        answer = "407 Proxy Authentication Required" if status == 407 else "401 Unauthorized"
        asked = headers.get("proxy-authenticate", "").split(" ", 1)[0]
        other = (
            f"; it asks for {asked[:40]} authentication, this client sends only Basic"
            if asked and asked.lower() != "basic"
            else ""
        )
        if proxy.authorization is None:
            return ModelAuthenticationError(
                f"{where} asks for credentials ({answer}) to {action}: put them in the "
                f"proxy URL, http://user:password@host:port{other}"
            )
        return ModelAuthenticationError(
            f"{where} refused the credentials ({answer}) to {action}{other}"
        )
    message = f"{where} refused to {action}: HTTP {status}"
    if status >= 500 or status in _TRANSIENT_STATUS:
        return TransientModelError(message, retry_after=retry_after(headers))
    return ModelRequestError(message)


def _authority(host: str, port: int) -> str:
    """``host:port`` for a CONNECT line (an IPv6 address in brackets, an
    international name in its ASCII form); ``ValueError`` for anything that could
    break the request line."""
    if not host.isascii():
        host = host.encode("idna").decode("ascii")  # UnicodeError is a ValueError
    if not host or not set(host) <= _HOST_CHARACTERS or not 0 < port < 65536:
        raise ValueError(f"not a host and port to tunnel to: {host!r}, {port!r}")
    return f"{_bracketed(host)}:{port}"
