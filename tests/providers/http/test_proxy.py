"""Models behind a proxy (issue 16 item 2, DESIGN 11.3), through a real one
(proxy.py, tests/support/proxyserver.py): the environment's proxy variables (as curl
reads them, and HTTP_PROXY as urllib does), ``proxy=`` over them and
``proxy=None`` without, https through a CONNECT tunnel with TLS inside it,
plain http in absolute form, credentials from the URL sent and kept out of
every error, and pooled connections through the proxy."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trustme
from loopback import Loopback, Reply
from proxyserver import PROXY_PASSWORD, PROXY_USER
from rawserver import Raw
from sse_bodies import DONE, anthropic_hello, choice, read, sse

from trio_agent import (
    ModelAuthenticationError,
    ModelRequest,
    ModelRequestError,
    TextDelta,
    TransientModelError,
    UserMessage,
)
from trio_agent.providers import AnthropicModel, OpenAIChatModel
from trio_agent.providers.http._proxy import parse_proxy, refused

REQUEST = ModelRequest(id="request-001", messages=(UserMessage("u1", "hi"),), tools=())
HELLO = sse(choice({"content": "Hello"}), choice({"content": " world"}), choice({}, "stop")) + DONE
VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


@pytest.fixture(autouse=True)
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*VARIABLES, "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)


async def serving(server: Loopback, nursery: trio.Nursery) -> Loopback:
    await nursery.start(server.serve)
    server.replies = [Reply(body=HELLO, chunked=True) for _ in range(5)]
    return server


@pytest.fixture
async def plain() -> AsyncIterator[Loopback]:
    async with trio.open_nursery() as nursery:
        yield await serving(Loopback(keep_alive=True), nursery)
        nursery.cancel_scope.cancel()


@pytest.fixture
async def tls(proxy_ca: trustme.CA) -> AsyncIterator[Loopback]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    proxy_ca.issue_cert("127.0.0.1").configure_cert(context)
    server = Loopback(tls=context, keep_alive=True)
    async with trio.open_nursery() as nursery:
        yield await serving(server, nursery)
        nursery.cancel_scope.cancel()


def https_url(server: Loopback) -> str:
    return f"https://127.0.0.1:{server.port}/v1"  # the certificate is for 127.0.0.1


def trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def peer_port(model: OpenAIChatModel) -> int:
    """The port the model's pooled connection goes to: the proxy's, or the server's."""
    (connection,) = [c for run in model.pool._runs.values() for c in run.idle]
    return int(connection._socket.getpeername()[1])


def text_of(chunks: list[object]) -> str:
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


async def test_https_proxy_from_the_environment_tunnels_and_keeps_the_tunnel(
    tls, proxy_server, proxy_ca, monkeypatch
):
    monkeypatch.setenv("HTTPS_PROXY", proxy_server.url)
    async with OpenAIChatModel(
        "m", api_key="k", base_url=https_url(tls), ssl_context=trusting(proxy_ca)
    ) as model:
        assert model.proxy is not None and model.proxy.port == proxy_server.port
        for _ in range(3):
            chunks, _ = await read(model, REQUEST)
            assert text_of(chunks) == "Hello world"
        assert peer_port(model) == proxy_server.port
    assert tls.connections == 1  # one tunnel, three requests
    assert tls.requests[0].path == "/v1/chat/completions"  # origin form inside the tunnel
    assert "proxy-authorization" not in tls.requests[0].headers


async def test_plain_http_goes_to_the_proxy_in_absolute_form(plain, proxy_server, monkeypatch):
    monkeypatch.setenv("http_proxy", proxy_server.url)
    async with OpenAIChatModel("m", api_key="k", base_url=f"{plain.url}/v1") as model:
        chunks, _ = await read(model, REQUEST)
        assert text_of(chunks) == "Hello world"
        assert peer_port(model) == proxy_server.port
    assert plain.requests[0].path == "/v1/chat/completions"  # the proxy forwarded it


async def test_upper_case_http_proxy_is_read_except_under_cgi(plain, proxy_server, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy_server.url)  # read as urllib, requests, httpx read it
    monkeypatch.delenv("REQUEST_METHOD", raising=False)
    async with OpenAIChatModel("m", api_key="k", base_url=f"{plain.url}/v1") as model:
        assert model.proxy is not None and model.proxy.port == proxy_server.port
        chunks, _ = await read(model, REQUEST)
        assert text_of(chunks) == "Hello world"
        assert peer_port(model) == proxy_server.port
    monkeypatch.setenv("REQUEST_METHOD", "GET")  # CGI: HTTP_PROXY is a request's Proxy: header
    async with OpenAIChatModel("m", api_key="k", base_url=f"{plain.url}/v1") as model:
        assert model.proxy is None
        chunks, _ = await read(model, REQUEST)
        assert text_of(chunks) == "Hello world"
        assert peer_port(model) == plain.port
    assert [seen.path for seen in plain.requests] == ["/v1/chat/completions"] * 2


async def test_all_proxy_serves_when_nothing_more_specific_is_set(
    tls, proxy_server, proxy_ca, monkeypatch
):
    monkeypatch.setenv("ALL_PROXY", proxy_server.url)
    async with OpenAIChatModel(
        "m", api_key="k", base_url=https_url(tls), ssl_context=trusting(proxy_ca)
    ) as model:
        await read(model, REQUEST)
        assert peer_port(model) == proxy_server.port


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "*", "127.0.0.0/8", "localhost,127.0.0.1"])
async def test_no_proxy_sends_the_request_directly(
    tls, proxy_server, proxy_ca, monkeypatch, no_proxy
):
    monkeypatch.setenv("HTTPS_PROXY", proxy_server.url)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    async with OpenAIChatModel(
        "m", api_key="k", base_url=https_url(tls), ssl_context=trusting(proxy_ca)
    ) as model:
        assert model.proxy is None
        await read(model, REQUEST)
        assert peer_port(model) == tls.port


async def test_proxy_none_ignores_the_environment_and_proxy_overrides_it(
    tls, proxy_server, proxy_ca, monkeypatch
):
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:1")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "*")
    context = trusting(proxy_ca)
    async with OpenAIChatModel(
        "m", api_key="k", base_url=https_url(tls), ssl_context=context, proxy=None
    ) as direct:
        await read(direct, REQUEST)
        assert peer_port(direct) == tls.port
    async with OpenAIChatModel(
        "m", api_key="k", base_url=https_url(tls), ssl_context=context, proxy=proxy_server.url
    ) as proxied:  # explicit: NO_PROXY does not apply to it
        await read(proxied, REQUEST)
        assert peer_port(proxied) == proxy_server.port


async def test_credentials_in_the_proxy_url_are_sent(tls, auth_proxy_server, proxy_ca):
    async with AnthropicModel(
        "m",
        api_key="k",
        base_url=f"https://127.0.0.1:{tls.port}",
        ssl_context=trusting(proxy_ca),
        proxy=auth_proxy_server.auth_url,
    ) as model:
        tls.replies = [Reply(body=anthropic_hello(), chunked=True)]
        chunks, _ = await read(model, REQUEST)
    assert text_of(chunks) == "Hi"
    assert "proxy-authorization" not in tls.requests[0].headers  # only the proxy saw them


async def test_wrong_proxy_credentials_are_an_authentication_error_without_them(
    tls, auth_proxy_server, proxy_ca
):
    url = auth_proxy_server.url_with(PROXY_USER, "not-" + PROXY_PASSWORD)
    async with OpenAIChatModel(
        "m", api_key="k", base_url=https_url(tls), ssl_context=trusting(proxy_ca), proxy=url
    ) as model:
        with pytest.raises(ModelAuthenticationError, match="407") as caught:
            await read(model, REQUEST)
        assert model.pool.connections == 0
    text = str(caught.value)
    assert auth_proxy_server.url in text and "not-" not in text and PROXY_PASSWORD not in text
    assert "pä" not in repr(model) and "pä" not in repr(model.proxy)
    assert tls.requests == []


async def test_a_proxy_password_a_server_echoes_is_redacted(plain, auth_proxy_server):
    echo = f'{{"error": {{"message": "bad request from {PROXY_USER}:{PROXY_PASSWORD}"}}}}'
    plain.replies = [Reply(400, echo.encode())]
    async with OpenAIChatModel(
        "m", api_key="k", base_url=f"{plain.url}/v1", proxy=auth_proxy_server.auth_url
    ) as model:
        with pytest.raises(ModelRequestError, match="400") as caught:
            await read(model, REQUEST)
    assert PROXY_PASSWORD not in str(caught.value) and "[redacted]" in str(caught.value)


async def test_through_an_https_proxy_tls_inside_tls(tls, tls_proxy_server, proxy_ca):
    async with OpenAIChatModel(
        "m",
        api_key="k",
        base_url=https_url(tls),
        ssl_context=trusting(proxy_ca),  # trusts the proxy's and the server's certificates
        proxy=tls_proxy_server.url,
    ) as model:
        for _ in range(2):
            chunks, _ = await read(model, REQUEST)
            assert text_of(chunks) == "Hello world"
    assert tls.connections == 1


async def test_a_proxy_that_is_not_there_is_a_transient_error_naming_it(tls, proxy_ca):
    with trio.socket.socket() as free:
        await free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    async with OpenAIChatModel(
        "m",
        api_key="k",
        base_url=https_url(tls),
        ssl_context=trusting(proxy_ca),
        proxy=f"http://127.0.0.1:{port}",
    ) as model:
        with pytest.raises(TransientModelError, match=f"proxy http://127.0.0.1:{port}"):
            await read(model, REQUEST)


async def test_the_proxy_cannot_reach_the_server_is_transient(proxy_server, proxy_ca):
    with trio.socket.socket() as free:
        await free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    async with OpenAIChatModel(
        "m",
        api_key="k",
        base_url=f"https://127.0.0.1:{port}/v1",
        ssl_context=trusting(proxy_ca),
        proxy=proxy_server.url,
    ) as model:
        with pytest.raises(TransientModelError, match="502"):
            await read(model, REQUEST)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("HTTPS_PROXY", "socks5://127.0.0.1:1080", "HTTPS_PROXY"),
        ("https_proxy", "http://:3128", "https_proxy"),
        ("ALL_PROXY", "http://proxy:99999", "ALL_PROXY"),
    ],
)
def test_a_bad_proxy_variable_is_an_error_at_construction_naming_it(
    monkeypatch, variable, value, message
):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=message):
        OpenAIChatModel("m", api_key="k", base_url="https://api.example.com/v1")


def test_a_bad_proxy_argument_is_an_error_at_construction():
    with pytest.raises(ValueError, match="proxy="):
        OpenAIChatModel("m", api_key="k", proxy="ftp://proxy:21")
    with pytest.raises(TypeError, match="proxy must be"):
        OpenAIChatModel("m", api_key="k", proxy=3128)  # type: ignore[arg-type]


def test_the_proxy_password_is_not_in_the_models_repr():
    model = OpenAIChatModel("m", api_key="k", proxy="http://user:s3cret-pw@proxy:3128")
    assert "s3cret" not in repr(model) and "s3cret" not in repr(model.proxy)
    assert model.proxy is not None and model.proxy.shown == "http://proxy:3128"


async def test_a_forwarding_proxy_refusing_credentials_is_an_authentication_error(
    plain, auth_proxy_server
):
    # Before: "OpenAI answered HTTP 407", a ModelRequestError blaming the API.
    url = auth_proxy_server.url_with(PROXY_USER, "not-" + PROXY_PASSWORD)
    async with OpenAIChatModel("m", api_key="k", base_url=f"{plain.url}/v1", proxy=url) as model:
        with pytest.raises(ModelAuthenticationError, match="407") as caught:
            await read(model, REQUEST)
    text = str(caught.value)
    assert f"proxy {auth_proxy_server.url}" in text and "refused the credentials" in text
    assert PROXY_PASSWORD not in text and plain.requests == []


TINYPROXY_401 = (
    b"HTTP/1.0 401 Unauthorized\r\nServer: tinyproxy/1.11.1\r\nContent-Type: text/html\r\n"
    b'WWW-Authenticate: Basic realm="Tinyproxy"\r\nConnection: close\r\n\r\n'
    b'<?xml version="1.0" encoding="UTF-8" ?>\n<html>\n<head><title>401 Unauthorized'
    b"</title></head>\n<body>\n<h1>Unauthorized</h1>\n<p>The administrator of this proxy "
    b"has not configured it to service requests from you.</p>\n<hr />\n<p><em>Generated by "
    b"tinyproxy version 1.11.1.</em></p>\n</body>\n</html>\n"
)
JSON_401 = b'{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}'


def answer_401(body: bytes, *headers: str) -> bytes:
    head = ["HTTP/1.1 401 Unauthorized", f"content-length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def forwarded_answer(answer: bytes, credentials: str = "agent:s3cret-pw@") -> str:
    """The message of the ``ModelAuthenticationError`` a chat model's request to
    http://api.test:8080 raises when its forwarding proxy (scripted, on
    loopback) answers ``answer``; the proxy's port is written ``PORT``."""

    async def handler(raw: Raw, stream: Any, index: int) -> None:
        if await raw.read_request(stream):
            await stream.send_all(answer)

    raw = Raw(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        proxy = f"http://{credentials}127.0.0.1:{raw.port}"
        base = "http://api.test:8080/v1"
        async with OpenAIChatModel("m", api_key="sk-key", base_url=base, proxy=proxy) as model:
            with pytest.raises(ModelAuthenticationError) as caught:
                await read(model, REQUEST)
        nursery.cancel_scope.cancel()
    assert raw.requests[0].startswith(b"POST http://api.test:8080/v1/chat/completions ")
    return str(caught.value).replace(str(raw.port), "PORT")


@pytest.mark.parametrize("credentials", ["agent:s3cret-pw@", ""])
async def test_a_forwarding_proxys_own_401_is_the_proxy_refusing_not_the_api_key(credentials):
    """issue 32: tinyproxy answers a forwarded request whose proxy credentials it
    does not take with 401 and its own HTML page; that was "ModelAuthenticationError:
    OpenAI answered HTTP 401", sending the user to their API key. A 401 of a
    forwarded request whose body is no JSON object is the proxy's, in the words
    of a refused tunnel."""
    message = await forwarded_answer(TINYPROXY_401, credentials)
    shown = "OpenAI: proxy http://127.0.0.1:PORT"
    where = "(401 Unauthorized) to forward a request to http://api.test:8080"
    if credentials:
        assert message == f"{shown} refused the credentials {where}"
    else:
        assert message == (
            f"{shown} asks for credentials {where}: put them in the proxy URL, "
            "http://user:password@host:port"
        )
    proxy = parse_proxy(f"http://{credentials}127.0.0.1:3128", "proxy=")
    tunnel = str(refused(proxy, 401, {}, "api.test:8080", "OpenAI"))  # through CONNECT
    assert message == tunnel.replace("3128", "PORT").replace(
        "open a tunnel to api.test", "forward a request to http://api.test"
    )


async def test_a_forwarded_401_asking_for_proxy_credentials_is_the_proxys():
    """issue 32: a 401 with ``Proxy-Authenticate`` asks for the proxy's
    credentials, whatever its body."""
    answer = answer_401(JSON_401, 'Proxy-Authenticate: Basic realm="corp"')
    assert "refused the credentials (401 Unauthorized)" in await forwarded_answer(answer)


async def test_the_apis_json_401_relayed_by_a_forwarding_proxy_is_the_apis():
    """issue 32: the API's own 401 (a JSON error) that the proxy relays stays the
    API's refusal of the key, with its words."""
    message = await forwarded_answer(answer_401(JSON_401))
    assert message.startswith("OpenAI answered HTTP 401") and "Incorrect API key" in message
