"""Regressions from the review of issue 16's transport, each named after what it
pinned: the sans-IO wire layer's strictness (h11's rules), bytes after a body
over TLS, bodiless statuses, an answer sent before the request was all taken,
and a redirect through a forwarding proxy. The socket tests use a scripted raw
server (tests/support/rawserver.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import urllib.parse
from typing import Any

import pytest
import trio
from helpers import tls_contexts
from rawserver import Raw, hello_body, sized

from trio_agent import (
    ContextOverflowError,
    ModelAuthenticationError,
    ModelError,
    ModelRequest,
    ModelRequestError,
    ModelResponseError,
    TextDelta,
    UserMessage,
)
from trio_agent.providers import OpenAIChatModel
from trio_agent.providers.http._proxy import absolute_target
from trio_agent.providers.http._redirect import Redirects
from trio_agent.providers.http._wire import ChunkedReader, body_reader, keep_alive, parse_head

REQUEST = ModelRequest(id="r1", messages=(UserMessage("u1", "hi"),), tools=())


async def text_of(model: OpenAIChatModel, request: ModelRequest = REQUEST) -> str:
    async with model.stream(request) as stream:
        return "".join(c.text for c in [c async for c in stream] if isinstance(c, TextDelta))


def dechunk(wire: bytes) -> tuple[ChunkedReader, bytes]:
    reader = ChunkedReader("P", wire)
    out = b""
    while data := reader.read():
        out += data
    return reader, out


# ------------------------------------------------------------ the wire, pure


@pytest.mark.parametrize("size", [b"-5", b"+5", b"0x5", b" 5", b"5_0", b"-0x5", b"1" * 17])
def test_a_negative_or_odd_chunk_size_is_refused_not_an_endless_loop(size):
    with pytest.raises(ModelResponseError, match="bad chunk size"):
        dechunk(b"3\r\nabc\r\n" + size + b"\r\nhello\r\n0\r\n\r\n")
    with pytest.raises(ModelResponseError, match="bad chunk size"):
        dechunk(size + b"\r\nhello\r\n0\r\n\r\n")


def test_chunk_sizes_with_extensions_and_blanks_before_them_are_read():
    reader, out = dechunk(b"5 ;x=1\r\nhello\r\n0\r\n\r\n")
    assert out == b"hello" and reader.done


@pytest.mark.parametrize("split", [1, 3, 7, 100])
def test_a_chunk_not_followed_by_its_line_end_is_refused(split):
    wire = b"5\r\nhello6\r\nworld!\r\n0\r\n\r\n"
    reader = ChunkedReader("P")
    with pytest.raises(ModelResponseError, match="not followed by its line end"):
        for at in range(0, len(wire), split):
            reader.feed(wire[at : at + split])
            while reader.read():
                pass


def test_conflicting_content_lengths_are_refused():
    with pytest.raises(ModelResponseError, match="two different content-lengths"):
        parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 5\r\n\r\n", "P")
    _, headers, _ = parse_head(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n", "P"
    )  # type: ignore[misc]
    assert headers["content-length"] == "3"


@pytest.mark.parametrize(
    "line", [b"  folded", b"\tfolded", b"Content-Length : 5", b"no colon", b": nameless"]
)
def test_a_folded_or_malformed_header_line_is_refused(line):
    with pytest.raises(ModelResponseError, match="header line"):
        parse_head(b"HTTP/1.1 200 OK\r\nx-a: 1\r\n" + line + b"\r\n\r\n", "P")


@pytest.mark.parametrize("value", ["Keep-Alive", "keep-alive", "KEEP-ALIVE"])
def test_http_1_0_keep_alive_in_any_case_keeps_the_connection(value):
    head = f"HTTP/1.0 200 OK\r\nConnection: {value}\r\ncontent-length: 1\r\n\r\nx".encode()
    _, headers, _ = parse_head(head, "P")  # type: ignore[misc]
    assert keep_alive(headers)[0]
    _, plain, _ = parse_head(b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\nx", "P")  # type: ignore[misc]
    assert not keep_alive(plain)[0]


@pytest.mark.parametrize("status", [204, 304])
def test_a_bodyless_status_has_an_empty_body_whatever_its_headers(status):
    head = b"HTTP/1.1 %d X\r\ncontent-length: 40\r\n\r\n" % status
    found = parse_head(head, "P")
    assert found is not None
    reader = body_reader("P", *found)
    assert reader.done and reader.read() == b""


def test_a_head_found_in_one_read_is_still_bounded():
    with pytest.raises(ModelResponseError, match="longer than"):
        parse_head(b"HTTP/1.1 200 OK\r\nx: " + b"a" * 100_000 + b"\r\n\r\n", "P")


def test_blank_lines_before_the_status_line_are_skipped():
    found = parse_head(b"\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", "P")
    assert found is not None and found[0] == 200


@pytest.mark.parametrize(
    ("headers", "kind"),
    [
        ({"transfer-encoding": "chunked"}, "ChunkedReader"),
        ({"transfer-encoding": "identity, chunked"}, "ChunkedReader"),
        ({"transfer-encoding": "chunked", "content-length": "5"}, "ChunkedReader"),
        ({"transfer-encoding": "identity"}, "UntilCloseReader"),
    ],
)
def test_transfer_encoding_decides_the_framing(headers, kind):
    assert type(body_reader("P", 200, headers, b"")).__name__ == kind


def test_a_transfer_coding_other_than_chunked_is_refused_by_name():
    with pytest.raises(ModelResponseError, match="'chunked, gzip'"):
        body_reader("P", 200, {"transfer-encoding": "chunked, gzip"}, b"")


def test_content_length_and_transfer_encoding_together_are_never_reused():
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n"
    found = parse_head(head, "P")
    assert found is not None and not keep_alive(found[1])[0]


# -------------------------------------------------------------- over sockets


CHILD = textwrap.dedent(
    """
    import sys, trio
    sys.path.insert(0, "tests")
    from rawserver import Raw
    from trio_agent import ModelRequest, UserMessage, ModelError
    from trio_agent.providers import OpenAIChatModel

    async def handler(raw, stream, index):
        await raw.read_request(stream)
        await stream.send_all(b"HTTP/1.1 200 OK\\r\\ncontent-type: text/event-stream\\r\\n"
                              b"transfer-encoding: chunked\\r\\n\\r\\n"
                              b"3\\r\\nabc\\r\\n-5\\r\\nhello\\r\\n0\\r\\n\\r\\n")
        await trio.sleep(30)

    async def main():
        raw = Raw(handler)
        async with trio.open_nursery() as nursery:
            await nursery.start(raw.serve)
            model = OpenAIChatModel(
                "m", api_key="sk-test", base_url=f"{raw.url}/v1", read_seconds=1
            )
            request = ModelRequest(id="r", messages=(UserMessage("u", "hi"),), tools=())
            with trio.move_on_after(2):
                try:
                    async with model.stream(request) as s:
                        async for _ in s:
                            pass
                except ModelError as exc:
                    print("error:", exc)
            await model.aclose()
            nursery.cancel_scope.cancel()
    trio.run(main)
    """
)


def test_a_negative_chunk_size_is_an_error_not_a_frozen_process():
    try:
        child = subprocess.run(
            [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("the process froze: trio.move_on_after(2) never fired") from None
    assert child.returncode == 0, child.stderr[-2000:]
    assert "bad chunk size" in child.stdout


class Holding(trio.abc.Stream):
    """A transport whose sends can be held, then flushed in one socket write."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.hold, self.buf = inner, False, b""

    async def send_all(self, data: Any) -> None:
        if self.hold:
            self.buf += bytes(data)
        else:
            await self.inner.send_all(data)

    async def flush(self) -> None:
        self.hold, data, self.buf = False, self.buf, b""
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> Any:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize(
    "extra", [sized(hello_body("EVIL")), b"\r\n"], ids=["a whole response", "a stray CRLF"]
)
async def test_a_tls_record_after_a_body_is_not_read_by_the_next_request(extra):
    server_context, client_context = tls_contexts()
    holders = {}

    async def wrap(tcp: Any) -> Any:
        holding = Holding(tcp)
        tls = trio.SSLStream(holding, server_context, server_side=True, https_compatible=True)
        await tls.do_handshake()
        holders[id(tls)] = holding
        return tls

    async def handler(raw: Raw, stream: Any, index: int) -> None:
        got = await raw.read_request(stream)
        assert got
        if index > 0:  # a new connection: the second answer
            await stream.send_all(sized(hello_body("second")))
            await trio.sleep(1)
            return
        holding = holders[id(stream)]
        holding.hold = True
        await stream.send_all(sized(hello_body("first")))  # TLS record 1
        await stream.send_all(extra)  # record 2, in the same TCP write
        await holding.flush()
        got = await raw.read_request(stream, got[1])
        if got:
            await stream.send_all(sized(hello_body("second")))
            await trio.sleep(1)

    raw = Raw(handler, wrap=wrap)
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        url = f"https://localhost:{raw.port}/v1"
        async with OpenAIChatModel("m", api_key="k", base_url=url, ssl_context=client_context) as m:
            assert await text_of(m) == "first"
            await trio.sleep(0.05)
            assert await text_of(m) == "second"
        nursery.cancel_scope.cancel()
    assert raw.connections == 2


@pytest.mark.parametrize("status", ["204 No Content", "304 Not Modified"])
async def test_a_bodyless_status_on_a_kept_connection_does_not_wait_for_the_read_timeout(status):
    async def handler(raw: Raw, stream: Any, index: int) -> None:
        await raw.read_request(stream)
        await stream.send_all(f"HTTP/1.1 {status}\r\nserver: x\r\n\r\n".encode())
        await trio.sleep(30)  # keep-alive: the connection stays open

    raw = Raw(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        async with OpenAIChatModel("m", api_key="k", base_url=f"{raw.url}/v1", read_seconds=3) as m:
            start = trio.current_time()
            with pytest.raises(ModelRequestError, match=status[:3]):
                await text_of(m)
            assert trio.current_time() - start < 1
        nursery.cancel_scope.cancel()


BIG = ModelRequest(id="r1", messages=(UserMessage("u1", "x" * 8_000_000),), tools=())


@pytest.mark.parametrize("pooled_first", [False, True])
async def test_an_early_413_while_the_body_is_still_being_sent_is_the_answer(pooled_first):
    async def handler(raw: Raw, stream: Any, index: int) -> None:
        buf = b""
        if pooled_first and index == 0:
            got = await raw.read_request(stream)
            assert got
            await stream.send_all(sized(hello_body("ok")))
            buf = got[1]
        while b"\r\n\r\n" not in buf:
            buf += await stream.receive_some(65536)
        raw.requests.append(buf.partition(b"\r\n\r\n")[0])
        body = b'{"error":{"message":"request body too large","type":"invalid_request_error"}}'
        head = "connection: close\r\n"
        await stream.send_all(sized(body, head, "413 Payload Too Large", "application/json"))
        await trio.sleep(0.05)  # then close without reading the rest (as nginx does)

    raw = Raw(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        async with OpenAIChatModel("m", api_key="k", base_url=f"{raw.url}/v1") as model:
            if pooled_first:
                assert await text_of(model) == "ok"
            with pytest.raises(ModelError) as caught:
                await text_of(model, BIG)
            assert isinstance(caught.value, ContextOverflowError | ModelRequestError)
            assert "413" in str(caught.value)
        nursery.cancel_scope.cancel()
    assert len(raw.requests) == 1 + pooled_first  # the big request went once


async def test_a_401_whose_body_is_cut_short_is_still_an_authentication_error():
    async def handler(raw: Raw, stream: Any, index: int) -> None:
        await raw.read_request(stream)
        await stream.send_all(
            b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n"
            b'content-length: 200\r\n\r\n{"error":{"message":"Incorrect API key"'
        )

    raw = Raw(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        async with OpenAIChatModel("m", api_key="k", base_url=f"{raw.url}/v1") as model:
            with pytest.raises(ModelAuthenticationError, match="401"):
                await text_of(model)
        nursery.cancel_scope.cancel()


def test_a_redirect_through_a_forwarding_proxy_keeps_the_target_quoted():
    redirects = Redirects("http://h:8/v1/chat/completions", "P")
    target = redirects.follow(307, {"location": "/v2/chat completions"})
    assert target == "/v2/chat%20completions"
    # what HTTPStream sends through a forwarding proxy
    assert absolute_target(urllib.parse.urljoin(redirects.url, target)) == (
        "http://h:8/v2/chat%20completions"
    )


@pytest.mark.parametrize("line", [b"HTTP/1.1 2000 OK", b"HTTP/1.1 200OK", b"HTTP/1.1 20 OK"])
def test_a_status_code_is_exactly_three_digits(line):
    with pytest.raises(ModelResponseError, match="not an HTTP response"):
        parse_head(line + b"\r\ncontent-length: 0\r\n\r\n", "P")
    assert parse_head(b"HTTP/1.1 200\r\n\r\n", "P") is not None  # no reason phrase: fine


def test_a_complete_size_line_with_a_huge_extension_is_refused():
    with pytest.raises(ModelResponseError, match="size line too long"):
        dechunk(b"3\r\nabc\r\n5;" + b"x" * 5000 + b"\r\nhello\r\n0\r\n\r\n")


async def test_a_connection_that_answered_early_is_never_reused():
    async def handler(raw: Raw, stream: Any, index: int) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += await stream.receive_some(65536)
        raw.requests.append(buf.partition(b"\r\n\r\n")[0])
        body = b'{"error":{"message":"too large"}}'
        await stream.send_all(sized(body, "", "413 Payload Too Large", "application/json"))
        await trio.sleep(0.05)  # keep-alive says the answer, but the request was cut

    raw = Raw(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        async with OpenAIChatModel("m", api_key="k", base_url=f"{raw.url}/v1") as model:
            with pytest.raises(ModelError, match="413"):
                await text_of(model, BIG)
            assert model.pool.idle == 0 and model.pool.connections == 0
        nursery.cancel_scope.cancel()
