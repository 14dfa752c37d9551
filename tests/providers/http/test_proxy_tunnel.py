"""The CONNECT tunnel (``open_tunnel``) through a real proxy (proxy.py, see
tests/support/proxyserver.py) to a TLS server on loopback, TLS inside the tunnel; and
against a scripted proxy on memory streams, for the answers a real one does not
give on demand (garbage, a slow or silent proxy, extra bytes). ``refused``, what
a proxy's refusal stands for, of a tunnel or of a forwarded request, the same
words for both."""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
import trustme
from loopback import Loopback, Reply

from trio_agent.model import (
    ModelAuthenticationError,
    ModelRequestError,
    ModelResponseError,
    TransientModelError,
)
from trio_agent.providers.http._proxy import (
    Proxy,
    absolute_target,
    open_tunnel,
    parse_proxy,
    refused,
)
from trio_agent.providers.http._wire import parse_head

BODY = b'{"object": "list", "data": []}'


@pytest.fixture
async def tls_server(proxy_ca: trustme.CA) -> AsyncIterator[Loopback]:
    """A TLS server on 127.0.0.1 (its certificate from ``proxy_ca``)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    proxy_ca.issue_cert("127.0.0.1").configure_cert(context)
    server = Loopback(tls=context)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


@pytest.fixture
async def plain_server() -> AsyncIterator[Loopback]:
    server = Loopback()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


def _client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def _read_to_end(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while part := await stream.receive_some(65536):
        data += part
    return data


async def _https_get(tunnel: trio.abc.Stream, ca: trustme.CA, port: int) -> bytes:
    """TLS to 127.0.0.1 inside ``tunnel``, one request, the whole response."""
    tls = trio.SSLStream(
        tunnel, _client_context(ca), server_hostname="127.0.0.1", https_compatible=True
    )
    async with tls:
        await tls.send_all(
            f"GET /v1/models?x=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        )
        return await _read_to_end(tls)


async def _tunnel_and_get(server: Any, url: str, ca: trustme.CA, port: int) -> bytes:
    """A tunnel through the proxy at ``url`` to 127.0.0.1:``port``, and one https
    request through it."""
    proxy = parse_proxy(url, "HTTPS_PROXY")
    assert (proxy.host, proxy.port) == (server.host, server.port)
    tcp = await trio.open_tcp_stream(server.host, server.port)
    async with tcp:
        assert await open_tunnel(tcp, proxy, "127.0.0.1", port, 5, "test") == b""
        return await _https_get(tcp, ca, port)


def _check_exchange(response: bytes, server: Loopback) -> None:
    assert response.startswith(b"HTTP/1.1 200 ")
    assert response.endswith(b"\r\n\r\n" + BODY)
    assert [(seen.method, seen.path) for seen in server.requests] == [("GET", "/v1/models?x=1")]
    assert server.requests[0].headers["host"] == f"127.0.0.1:{server.port}"


async def test_tls_through_a_real_proxys_tunnel(proxy_server, proxy_ca, tls_server):
    tls_server.replies.append(Reply(body=BODY))
    response = await _tunnel_and_get(proxy_server, proxy_server.url, proxy_ca, tls_server.port)
    _check_exchange(response, tls_server)


async def test_a_real_proxy_takes_percent_encoded_credentials(
    auth_proxy_server, proxy_ca, tls_server
):
    assert "%" in auth_proxy_server.auth_url  # the password needs encoding: it is decoded
    tls_server.replies.append(Reply(body=BODY))
    url = auth_proxy_server.auth_url
    response = await _tunnel_and_get(auth_proxy_server, url, proxy_ca, tls_server.port)
    _check_exchange(response, tls_server)


async def test_wrong_credentials_are_an_authentication_error(
    auth_proxy_server, proxy_ca, tls_server
):
    url = auth_proxy_server.url_with(auth_proxy_server.user, "wrong-password")
    proxy = parse_proxy(url, "HTTPS_PROXY")
    with pytest.raises(ModelAuthenticationError) as caught:
        await _tunnel_and_get(auth_proxy_server, url, proxy_ca, tls_server.port)
    message = str(caught.value)
    assert message.startswith(f"test: proxy {auth_proxy_server.url} refused the credentials")
    assert "(407 Proxy Authentication Required)" in message
    assert f"127.0.0.1:{tls_server.port}" in message
    assert proxy.authorization is not None
    for secret in ("wrong-password", proxy.authorization.split()[1], auth_proxy_server.password):
        assert secret not in message
    assert tls_server.requests == []


async def test_no_credentials_for_a_proxy_that_asks_for_them(
    auth_proxy_server, proxy_ca, tls_server
):
    with pytest.raises(ModelAuthenticationError, match=r"asks for credentials \(407") as caught:
        await _tunnel_and_get(auth_proxy_server, auth_proxy_server.url, proxy_ca, tls_server.port)
    assert auth_proxy_server.url in str(caught.value)
    assert "http://user:password@host:port" in str(caught.value)  # how to give them


async def test_a_closed_port_behind_a_real_proxy_is_transient(proxy_server, proxy_ca):
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(TransientModelError) as caught:
        await _tunnel_and_get(proxy_server, proxy_server.url, proxy_ca, port)
    message = str(caught.value)
    assert message == (
        f"test: proxy {proxy_server.url} refused to open a tunnel to 127.0.0.1:{port}: HTTP 502"
    )


async def test_tls_inside_a_tunnel_inside_tls_to_an_https_proxy(
    tls_proxy_server, proxy_ca, tls_server
):
    tls_server.replies.append(Reply(body=BODY))
    proxy = parse_proxy(tls_proxy_server.url, "HTTPS_PROXY")
    assert proxy.scheme == "https"
    tcp = await trio.open_tcp_stream(proxy.host, proxy.port)
    context = _client_context(proxy_ca)
    to_proxy = trio.SSLStream(tcp, context, server_hostname=proxy.host, https_compatible=True)
    async with to_proxy:
        await to_proxy.do_handshake()
        await open_tunnel(to_proxy, proxy, "127.0.0.1", tls_server.port, 5, "test")
        response = await _https_get(to_proxy, proxy_ca, tls_server.port)
    _check_exchange(response, tls_server)


async def test_plain_http_through_a_real_proxy_in_absolute_form(auth_proxy_server, plain_server):
    plain_server.replies.append(Reply(body=BODY))
    proxy = parse_proxy(auth_proxy_server.auth_url, "http_proxy")
    url = f"http://someone:secret@127.0.0.1:{plain_server.port}/v1/chat?x=1#fragment"
    body = b'{"model": "m"}'
    request = (
        f"POST {absolute_target(url)} HTTP/1.1\r\nHost: 127.0.0.1:{plain_server.port}\r\n"
        f"Proxy-Authorization: {proxy.authorization}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    async with await trio.open_tcp_stream(proxy.host, proxy.port) as stream:
        await stream.send_all(request)
        response = await _read_to_end(stream)
    assert response.startswith(b"HTTP/1.1 200 ") and response.endswith(BODY)
    (seen,) = plain_server.requests
    assert (seen.method, seen.path, seen.body) == ("POST", "/v1/chat?x=1", body)
    assert "proxy-authorization" not in seen.headers  # the proxy keeps it


@pytest.mark.parametrize("password", [None, "wrong-password"])
async def test_a_real_proxys_407_to_a_forwarded_request(auth_proxy_server, plain_server, password):
    # what the HTTP client gets for a plain http request through the proxy, and
    # hands to refused: the same words as for a tunnel
    url = auth_proxy_server.url
    if password is not None:
        url = auth_proxy_server.url_with(auth_proxy_server.user, password)
    proxy = parse_proxy(url, "http_proxy")
    target = absolute_target(f"http://127.0.0.1:{plain_server.port}/v1/chat?x=1")
    lines = [f"POST {target} HTTP/1.1", f"Host: 127.0.0.1:{plain_server.port}"]
    if proxy.authorization is not None:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    request = "\r\n".join([*lines, "Content-Length: 0", "Connection: close", "", ""])
    async with await trio.open_tcp_stream(proxy.host, proxy.port) as stream:
        await stream.send_all(request.encode())
        head = parse_head(await _read_to_end(stream), "test")
    assert head is not None
    status, headers, _ = head
    assert status == 407
    error = refused(proxy, status, headers, target, "test")
    assert type(error) is ModelAuthenticationError
    message = str(error)
    shown = f"test: proxy {auth_proxy_server.url}"
    where = f"to forward a request to http://127.0.0.1:{plain_server.port}"
    if password is None:
        assert message.startswith(f"{shown} asks for credentials (407 Proxy Authentication ")
        assert f"{where}: put them in the proxy URL" in message
    else:
        assert message == (
            f"{shown} refused the credentials (407 Proxy Authentication Required) {where}"
        )
        assert proxy.authorization is not None and proxy.authorization[6:] not in message
    assert "/v1/chat" not in message and "wrong-password" not in message
    assert plain_server.requests == []


PROXY = parse_proxy("http://agent:s3cret@proxy.test:3128", "proxy=")
ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


class ScriptedProxy:
    """The proxy end of a memory stream pair: reads the CONNECT request, then
    sends ``answer`` in pieces of ``piece`` bytes, ``pause`` seconds apart, and
    closes if ``close``; or never answers."""

    def __init__(self, answer: bytes | None, *, piece: int = 0, pause: float = 0) -> None:
        self.answer, self.piece, self.pause = answer, piece, pause
        self.request = b""
        self.close = False

    async def run(self, stream: trio.abc.Stream) -> None:
        while b"\r\n\r\n" not in self.request:
            self.request += await stream.receive_some(65536)
        if self.answer is None:
            await trio.sleep_forever()
        size = self.piece or len(self.answer) or 1
        for at in range(0, len(self.answer), size):
            await stream.send_all(self.answer[at : at + size])
            await trio.sleep(self.pause)
        if self.close:
            await stream.aclose()


async def _through(
    scripted: ScriptedProxy, proxy: Proxy = PROXY, host: str = "api.test", seconds: float = 5
) -> bytes:
    """``open_tunnel`` against ``scripted``; its error raised as it is (not in a
    nursery's group)."""
    client, server = trio.testing.memory_stream_pair()
    failure: Exception | None = None
    async with client, server, trio.open_nursery() as nursery:
        nursery.start_soon(scripted.run, server)
        try:
            rest = await open_tunnel(client, proxy, host, 443, seconds, "test")
        except Exception as exc:
            failure = exc
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return rest


async def test_the_connect_request_on_the_wire():
    scripted = ScriptedProxy(ESTABLISHED)
    assert await _through(scripted) == b""
    assert scripted.request == (
        b"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n"
        b"Proxy-Authorization: Basic YWdlbnQ6czNjcmV0\r\n\r\n"  # agent:s3cret
    )


@pytest.mark.parametrize(
    ("host", "authority"),
    [
        ("::1", b"[::1]:443"),
        ("[2001:db8::1]", b"[2001:db8::1]:443"),
        ("127.0.0.1", b"127.0.0.1:443"),
        ("b\u00fccher.example", b"xn--bcher-kva.example:443"),  # an IDN in its ASCII form
    ],
)
async def test_the_authority_of_every_kind_of_host(host, authority):
    scripted = ScriptedProxy(ESTABLISHED)
    await _through(scripted, Proxy("http", "p", 1), host)
    assert scripted.request == b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)


@pytest.mark.parametrize(("host", "port"), [("a b", 443), ("a\r\nX: y", 443), ("", 443), ("a", 0)])
async def test_a_host_that_would_break_the_request_line_is_refused(host, port):
    client, _server = trio.testing.memory_stream_pair()
    with pytest.raises(ValueError, match="not a host and port"):
        await open_tunnel(client, PROXY, host, port, 5, "test")


@pytest.mark.parametrize(
    "answer",
    [
        ESTABLISHED,
        b"HTTP/1.0 200 Connection established\r\nProxy-Agent: x\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",  # an interim answer first
        b"HTTP/1.1 204 No Content\r\n\r\n",  # any 2xx opens the tunnel (RFC 9110)
    ],
)
async def test_a_2xx_opens_the_tunnel(answer):
    assert await _through(ScriptedProxy(answer)) == b""
    assert await _through(ScriptedProxy(answer, piece=1)) == b""  # byte by byte


@pytest.mark.parametrize(
    ("answer", "error", "words"),
    [
        (b"HTTP/1.1 502 Bad Gateway\r\n\r\n", TransientModelError, "HTTP 502"),
        (b"HTTP/1.1 504 Gateway Timeout\r\n\r\n", TransientModelError, "HTTP 504"),
        (b"HTTP/1.1 500 Oops\r\n\r\n", TransientModelError, "HTTP 500"),
        (b"HTTP/1.1 429 Slow down\r\n\r\n", TransientModelError, "HTTP 429"),
        (b"HTTP/1.1 408 Request Timeout\r\n\r\n", TransientModelError, "HTTP 408"),
        (b"HTTP/1.1 529 Overloaded\r\n\r\n", TransientModelError, "HTTP 529"),  # any 5xx
        (b"HTTP/1.1 409 Conflict\r\n\r\n", ModelRequestError, "HTTP 409"),  # a provider's
        (b"HTTP/1.1 425 Too Early\r\n\r\n", ModelRequestError, "HTTP 425"),  # no early data
        (b"HTTP/1.1 403 Forbidden\r\n\r\n", ModelRequestError, "HTTP 403"),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", ModelRequestError, "HTTP 400"),
        (b"HTTP/1.1 405 Not Allowed\r\n\r\n", ModelRequestError, "HTTP 405"),
        (b"HTTP/1.1 301 Moved\r\nLocation: /x\r\n\r\n", ModelRequestError, "HTTP 301"),
        (b"HTTP/1.1 407 Who\r\n\r\n", ModelAuthenticationError, "refused the credentials"),
        (b"HTTP/1.1 401 No\r\n\r\n", ModelAuthenticationError, "credentials .401 Unauth"),
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", ModelResponseError, "not an HTTP response"),
        (ESTABLISHED + b"\x16\x03\x01", ModelResponseError, "3 bytes after accepting"),
    ],
)
async def test_what_each_answer_stands_for(answer, error, words):
    with pytest.raises(error, match=words) as caught:
        await _through(ScriptedProxy(answer))
    assert type(caught.value) is error
    message = str(caught.value)
    assert message.startswith("test: proxy http://proxy.test:3128")
    assert "s3cret" not in message and "YWdlbnQ6czNjcmV0" not in message
    if error is not ModelResponseError or b"SSH" not in answer:
        assert "api.test:443" in message
    if error is not ModelResponseError:  # a refusal: what refused gives, word for word
        head = parse_head(answer, "test")
        assert head is not None
        expected = refused(PROXY, head[0], head[1], "api.test:443", "test")
        assert (type(expected), str(expected)) == (error, message)


async def test_a_503_carries_its_retry_after():
    answer = b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\n\r\n"
    with pytest.raises(TransientModelError, match="HTTP 503") as caught:
        await _through(ScriptedProxy(answer))
    assert caught.value.retry_after == 7


async def test_a_407_for_another_scheme_says_which():
    answer = b"HTTP/1.1 407 Auth\r\nProxy-Authenticate: Negotiate\r\n\r\n"
    with pytest.raises(ModelAuthenticationError, match="asks for Negotiate authentication"):
        await _through(ScriptedProxy(answer))
    no_credentials = Proxy("http", "proxy.test", 3128)
    with pytest.raises(ModelAuthenticationError, match="asks for credentials"):
        await _through(ScriptedProxy(answer), no_credentials)


FORWARDED = "http://api.test:8080/v1/chat/completions?api-version=1"


@pytest.mark.parametrize(
    ("target", "action"),
    [
        ("api.test:443", "open a tunnel to api.test:443"),
        ("[::1]:443", "open a tunnel to [::1]:443"),
        (FORWARDED, "forward a request to http://api.test:8080"),
        ("http://api.test/x", "forward a request to http://api.test"),
        ("http://user:s3cret@[::1]:8000/x", "forward a request to http://[::1]:8000"),
    ],
)
def test_refused_names_the_proxy_and_the_target(target, action):
    shown = "test: proxy http://proxy.test:3128"
    cases = [
        (PROXY, 407, {}, ModelAuthenticationError, "refused the credentials"),
        (Proxy("http", "proxy.test", 3128), 407, {}, ModelAuthenticationError, "asks for"),
        (PROXY, 502, {}, TransientModelError, f"{shown} refused to {action}: HTTP 502"),
        (PROXY, 403, {}, ModelRequestError, f"{shown} refused to {action}: HTTP 403"),
    ]
    for proxy, status, headers, error, words in cases:
        found = refused(proxy, status, headers, target, "test")
        assert type(found) is error
        message = str(found)
        assert message.startswith(shown) and words in message
        assert action in message
        for secret in ("s3cret", "YWdlbnQ6czNjcmV0", "/v1", "api-version", "/x"):
            assert secret not in message


def test_refused_407_words():
    no_credentials = Proxy("http", "proxy.test", 3128)
    assert str(refused(PROXY, 407, {}, FORWARDED, "OpenAI")) == (
        "OpenAI: proxy http://proxy.test:3128 refused the credentials "
        "(407 Proxy Authentication Required) to forward a request to http://api.test:8080"
    )
    assert str(refused(no_credentials, 407, {}, FORWARDED, "OpenAI")) == (
        "OpenAI: proxy http://proxy.test:3128 asks for credentials "
        "(407 Proxy Authentication Required) to forward a request to http://api.test:8080: "
        "put them in the proxy URL, http://user:password@host:port"
    )
    negotiate = {"proxy-authenticate": "Negotiate abc"}
    assert str(refused(PROXY, 407, negotiate, "api.test:443", "test")).endswith(
        "to open a tunnel to api.test:443; it asks for Negotiate authentication, "
        "this client sends only Basic"
    )
    basic = {"proxy-authenticate": 'Basic realm="corp"'}
    assert str(refused(PROXY, 407, basic, "api.test:443", "test")).endswith("api.test:443")


@pytest.mark.parametrize(
    ("status", "transient"),
    [
        *((status, True) for status in (408, 429, 500, 502, 503, 504, 529, 599)),
        *((status, False) for status in (301, 302, 400, 403, 404, 409, 425)),
    ],
)
def test_which_refusals_are_transient(status, transient):
    # a proxy's own statuses: 408 (its timeout), 429 (its rate limit) and any
    # 5xx; not the 409 and 425 a provider's API is retried on
    found = refused(PROXY, status, {"retry-after": "7"}, FORWARDED, "test")
    assert isinstance(found, TransientModelError) is transient
    if transient:
        assert isinstance(found, TransientModelError) and found.retry_after == 7
    else:
        assert type(found) is ModelRequestError


async def test_a_proxy_that_closes_before_answering_is_transient():
    scripted = ScriptedProxy(b"HTTP/1.1 200 Conn")
    scripted.close = True
    with pytest.raises(TransientModelError, match="closed the connection before answering"):
        await _through(scripted)


async def test_a_connection_broken_under_the_request_is_transient():
    client, server = trio.testing.memory_stream_pair()
    await server.aclose()
    async with client:
        with pytest.raises(TransientModelError, match=r"CONNECT api.test:443\): Broken"):
            await open_tunnel(client, PROXY, "api.test", 443, 5, "test")


async def test_a_silent_proxy_is_a_read_timeout(autojump_clock):
    start = trio.current_time()
    with pytest.raises(TransientModelError, match=r"did not answer .* within 3 s \(read timeout"):
        await _through(ScriptedProxy(None), seconds=3)
    assert trio.current_time() - start == pytest.approx(3)


async def test_each_wait_has_its_own_deadline(autojump_clock):
    # one byte every 2 s: a minute in all, under a deadline of 3 s per wait
    start = trio.current_time()
    answer = b"HTTP/1.1 200 OK\r\nX-Pad: xxxxxx\r\n\r\n"
    assert await _through(ScriptedProxy(answer, piece=1, pause=2), seconds=3) == b""
    assert trio.current_time() - start >= 2 * (len(answer) - 1)


async def test_a_proxy_that_takes_no_request_is_a_write_timeout(autojump_clock):
    client, server = trio.testing.lockstep_stream_pair()  # nobody reads the other end
    async with client, server:
        with pytest.raises(TransientModelError, match=r"within 2 s \(write timeout\)"):
            await open_tunnel(client, PROXY, "api.test", 443, 2, "test")


async def test_cancelled_while_waiting_it_closes_nothing(autojump_clock):
    client, server = trio.testing.memory_stream_pair()
    async with client, server:
        with trio.move_on_after(1) as scope:
            await open_tunnel(client, PROXY, "api.test", 443, 5, "test")
        assert scope.cancelled_caught  # the cancellation went through, as Cancelled
        await client.send_all(b"still open")  # the caller owns the stream: not closed
        received = b""
        while not received.endswith(b"still open"):
            received += await server.receive_some(65536)
        assert received.startswith(b"CONNECT api.test:443 HTTP/1.1\r\n")
