"""The HTTP client (``HTTPStream``), each over a real loopback socket: the probe rows
of issue 16 (item 6) that live in it (bare CR line ends, content codings, a JSON or
HTML 200, an error that is a bare string, a request upload the server does not
read); and what the review of issue 16's transport found (a bodiless status on a
kept connection, an answer sent before the request was all taken, a 401 cut short),
an interim 103 and an IPv6 host."""

from __future__ import annotations

import gzip
import json
import zlib
from functools import partial
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from loopback import Reply, fixture
from rawserver import Raw, hello_body, sized
from sse_bodies import DONE, anthropic_hello, choice, openai_model, read, sse
from sse_bodies import read as read_stream
from waiting import WAIT

from trio_agent import (
    Agent,
    ContextOverflowError,
    JsonlStore,
    ModelAuthenticationError,
    ModelError,
    ModelRequest,
    ModelRequestError,
    ModelResponseError,
    TextBlock,
    TextDelta,
    TransientModelError,
    UserMessage,
)
from trio_agent.providers import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel
from trio_agent.providers.http._http import HTTPStream
from trio_agent.providers.http._sse import SSEParser

KEY = "sk-probe/KEY+0123456789=abcdef"
REQUEST = ModelRequest(id="request-001", messages=(UserMessage("u1", "hi"),), tools=())


def openai(loopback):
    return OpenAIChatModel("m", api_key=KEY, base_url=f"{loopback.url}/v1")


def anthropic(loopback):
    return AnthropicModel("m", api_key=KEY, base_url=loopback.url)


def responses(loopback):
    return OpenAIResponsesModel("m", api_key=KEY, base_url=f"{loopback.url}/v1")


MAKERS = pytest.mark.parametrize("make", [openai, anthropic, responses])

HELLO = sse(choice({"content": "Hello"}), choice({"content": " world"}), choice({}, "stop")) + DONE


def parse(pieces: list[bytes]) -> list[bytes]:
    parser = SSEParser()
    out: list[bytes] = []
    for piece in pieces:
        out += parser.feed(piece)
    return out


def test_bare_cr_line_ends_give_every_event_including_the_last():
    assert parse([b"data: 1\r\rdata: 2\r\r"]) == [b"1", b"2"]
    assert parse([b"data: 1\r", b"\r", b"data: 2\r", b"\r"]) == [b"1", b"2"]


def test_an_event_a_bare_cr_completes_goes_out_with_its_read():
    # not held back until the next read shows whether a LF follows
    parser = SSEParser()
    assert parser.feed(b"data: 1\r\r") == [b"1"]
    assert parser.feed(b"\ndata: 2\r\n\r\n") == [b"2"]  # the LF ended the CR's line: no event


def test_mixed_line_ends_in_one_event_and_across_events():
    stream = b"event: x\rdata: a\r\ndata: b\n\r: comment\r\n\ndata: c\r\n\rdata: d\n\r"
    assert parse([stream]) == [b"a\nb", b"c", b"d"]


LINE_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(["openai_tools.sse", "anthropic_tools.sse"]),
    st.data(),
    st.lists(st.integers(1, 300), max_size=40),
)
def test_any_mix_of_line_ends_under_any_split_gives_the_lf_events(name, data, sizes):
    stream = fixture(name)
    lines = stream.split(b"\n")
    ends: list[bytes] = []
    for line in lines[:-1]:
        end = data.draw(LINE_ENDS)
        if ends and ends[-1] == b"\r" and not line and end == b"\n":
            end = b"\r\n"  # a CR then a LF is one CRLF: not the blank line meant here
        ends.append(end)
    mixed = b"".join(line + end for line, end in zip(lines, ends, strict=False)) + lines[-1]
    pieces, at = [], 0
    for size in sizes:
        pieces.append(mixed[at : at + size])
        at += size
    pieces.append(mixed[at:])
    assert parse(pieces) == parse([stream])
    assert len(parse(pieces)) == stream.count(b"data:") - stream.count(b"data: [DONE]")


@pytest.mark.parametrize("piece", [0, 1, 7])
async def test_a_bare_cr_stream_is_read_whole_by_the_adapters(loopback, piece):
    body = HELLO.replace(b"\n", b"\r")
    loopback.replies.append(Reply(body=body, piece=piece, chunked=True))
    _, response = await read(openai(loopback))
    assert response.content == (TextBlock("Hello world"),) and response.stop_reason == "stop"
    loopback.replies.append(Reply(body=anthropic_hello().replace(b"\n", b"\r"), piece=piece))
    _, response = await read(anthropic(loopback))
    assert response.content == (TextBlock("Hi"),) and response.stop_reason == "stop"


async def test_every_request_asks_for_no_content_coding(loopback):
    loopback.replies.append(Reply(body=HELLO))
    await read(openai(loopback))
    assert loopback.requests[0].headers["accept-encoding"] == "identity"


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-15)
    return compressor.compress(data) + compressor.flush()


CODINGS = pytest.mark.parametrize(
    "coding, encode",
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", raw_deflate),
        ("GZIP", gzip.compress),
    ],
    ids=["gzip", "x-gzip", "deflate-zlib", "deflate-raw", "upper-case"],
)


@CODINGS
@pytest.mark.parametrize("piece, chunked", [(0, False), (1, True), (13, False)])
async def test_a_compressed_stream_is_decoded(loopback, coding, encode, piece, chunked):
    headers = {"content-encoding": coding}
    reply = Reply(body=encode(HELLO), headers=headers, piece=piece, chunked=chunked)
    loopback.replies.append(reply)
    _, response = await read(openai(loopback))
    assert response.content == (TextBlock("Hello world"),) and response.stop_reason == "stop"


async def test_a_compressed_anthropic_stream_is_decoded(loopback):
    body = gzip.compress(anthropic_hello())
    loopback.replies.append(Reply(body=body, headers={"content-encoding": "gzip"}, piece=5))
    _, response = await read(anthropic(loopback))
    assert response.content == (TextBlock("Hi"),)


async def test_a_compressed_error_body_is_decoded_into_the_status_error(loopback):
    body = gzip.compress(json.dumps({"error": {"message": f"slow down {KEY}"}}).encode())
    reply = Reply(status=429, body=body, headers={"content-encoding": "gzip"})
    loopback.replies.append(reply)
    with pytest.raises(TransientModelError, match="slow down") as caught:
        await read(openai(loopback))
    assert KEY not in str(caught.value) and "[redacted]" in str(caught.value)


@pytest.mark.parametrize("coding", ["br", "zstd", "compress", "gzip, br"])
async def test_another_coding_is_refused_permanently_by_name(loopback, coding):
    loopback.replies.append(Reply(body=b"\x1b\x00garbage", headers={"content-encoding": coding}))
    with pytest.raises(ModelResponseError) as caught:
        await read(openai(loopback))
    assert repr(coding) in str(caught.value) and "content encoding" in str(caught.value)
    assert not isinstance(caught.value, TransientModelError)


async def test_another_coding_on_an_error_status_keeps_the_status_meaning(loopback):
    headers = {"content-encoding": "br", "retry-after": "3"}
    loopback.replies.append(Reply(status=503, body=b"\x1b\x00garbage", headers=headers))
    with pytest.raises(TransientModelError, match="'br' content encoding") as caught:
        await read(openai(loopback))
    assert caught.value.retry_after == 3


async def test_a_body_that_inflates_past_the_cap_is_refused(loopback):
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)
    comments = b": keep-alive\n\n" * (65 * 1024 * 1024 // 14)  # no event: only the cap stops it
    body = bomb.compress(comments) + bomb.flush()
    assert len(body) < 200_000
    loopback.replies.append(Reply(body=body, headers={"content-encoding": "gzip"}))
    with pytest.raises(ModelResponseError, match="inflates past 67108864 bytes"):
        await read(openai(loopback))


async def test_a_compressed_body_that_does_not_decode_is_refused(loopback):
    headers = {"content-encoding": "gzip"}
    loopback.replies.append(Reply(body=b"data: plain text\n\n", headers=headers))
    with pytest.raises(ModelResponseError, match="gzip body does not decode"):
        await read(openai(loopback))


async def test_a_compressed_body_cut_off_is_transient(loopback):
    body = gzip.compress(HELLO)[:-12]  # close-delimited: only the gzip end tells
    loopback.replies.append(Reply(body=body, headers={"content-encoding": "gzip"}))
    with pytest.raises(TransientModelError, match="cut off"):
        await read(openai(loopback))


JSON = {"content-type": "application/json"}


@MAKERS
@pytest.mark.parametrize(
    "error",
    [
        {"message": f"model is overloaded {KEY}", "type": "server_error", "code": 503},
        f"model is overloaded {KEY}",
        {"message": f"model is overloaded {KEY}", "type": None, "code": None, "param": None},
    ],
    ids=["object", "string", "nulls"],
)
async def test_a_json_200_with_an_error_is_a_response_error_with_its_message(loopback, make, error):
    loopback.replies.append(Reply(body=json.dumps({"error": error}).encode(), headers=JSON))
    with pytest.raises(ModelResponseError, match="model is overloaded") as caught:
        await read(make(loopback))
    assert "HTTP 200" in str(caught.value)
    assert KEY not in str(caught.value) and "[redacted]" in str(caught.value)


async def test_a_json_200_error_is_not_retried(loopback, tmp_path):
    body = json.dumps({"type": "error", "error": {"type": "x", "message": "no such model"}})
    loopback.replies += [Reply(body=body.encode(), headers=JSON)] * 3
    agent = Agent(model=anthropic(loopback), store=JsonlStore(tmp_path), session_id="s1")
    events = []
    async with agent.turn(UserMessage("u1", "hi")) as run:
        async for event in run:
            events.append(event)
    await agent.aclose()
    assert len(loopback.requests) == 1
    assert "no such model" in repr(events[-1])


async def test_a_whole_json_completion_is_kept_for_the_adapter_and_not_read_as_events(
    loopback,
):
    # A server that ignored "stream": true. Taking it is adapter work (DESIGN
    # 11.3); the client reads it whole as `document` and reading events from it
    # is a ModelResponseError that quotes it, never a transient "stream ended".
    completion = {"id": "c", "choices": [{"index": 0, "message": {"content": "Hi"}}]}
    body = json.dumps(completion).encode()
    loopback.replies += [Reply(body=body, headers={"content-type": "application/json"})] * 2
    http = HTTPStream(f"{loopback.url}/v1/chat/completions", {}, b"{}", "P", None, 5.0, 5.0)
    try:
        await http.open()
        assert http.document == body
        with pytest.raises(ModelResponseError, match="one JSON document") as caught:
            await http.next_events()
        assert '"message": {"content": "Hi"}' in str(caught.value)
    finally:
        await http.aclose()
    with pytest.raises(ModelResponseError, match="not an event stream"):
        await read(openai(loopback))


@pytest.mark.parametrize("kind", ["application/json", "text/html"])
@pytest.mark.parametrize("start", [b"", b"\n", b": ping\n\n", b"event: x\n", b"id: 1\n"])
async def test_an_event_stream_under_a_json_or_html_label_still_streams(loopback, kind, start):
    # Servers that label their stream wrongly worked before: they still do, and
    # the events are not held back until the body ends.
    first = start + sse(choice({"content": "Hello"}))
    body = first + sse(choice({}, "stop")) + DONE
    reply = Reply(body=body, headers={"content-type": kind}, piece=1, chunked=True)
    loopback.replies += [reply, Reply(body=body, headers=reply.headers, hang_after=len(first))]
    _, response = await read(openai(loopback))
    assert response.content == (TextBlock("Hello"),)
    with trio.fail_after(WAIT):  # held back, it would wait for the body's end: for ever
        async with openai(loopback).stream(REQUEST) as stream:
            assert await anext(stream) == TextDelta("Hello")


PORTAL = (
    "<!DOCTYPE html><html><head><title>Hotel Wi-Fi &amp; Login</title>"
    "<style>body { color: red }</style><script>var k = 1;</script></head>"
    f"<body><p>Please sign in to continue. Ref: {KEY}</p>" + "<p>filler</p>" * 200 + "</body>"
)


@pytest.mark.parametrize("kind", ["text/html; charset=utf-8", "application/xhtml+xml"])
async def test_an_html_200_says_so_with_its_first_text(loopback, kind):
    loopback.replies.append(Reply(body=PORTAL.encode(), headers={"content-type": kind}))
    with pytest.raises(ModelResponseError) as caught:
        await read(anthropic(loopback))
    text = str(caught.value)
    assert "answered HTML" in text and "not an event stream" in text
    assert "Hotel Wi-Fi & Login Please sign in to continue. Ref: [redacted]" in text
    assert "color: red" not in text and "var k" not in text and "<p>" not in text
    assert KEY not in text and text.endswith(" [cut]") and len(text) < 400


async def test_a_key_the_html_preview_cut_crosses_goes_whole(loopback):
    for at in range(185, 205, 3):
        page = "<html><body>" + "a" * at + KEY + "</body></html>"
        loopback.replies.append(Reply(body=page.encode(), headers={"content-type": "text/html"}))
        with pytest.raises(ModelResponseError) as caught:
            await read(openai(loopback))
        assert not any(KEY[:n] in str(caught.value) for n in range(6, len(KEY) + 1))


@MAKERS
async def test_an_in_stream_error_that_is_a_string_keeps_its_text(loopback, make):
    loopback.replies.append(Reply(body=sse({"error": "upstream connect error"})))
    with pytest.raises(ModelError, match="upstream connect error") as caught:
        await read(make(loopback))
    assert "does not decode" not in str(caught.value)
    assert isinstance(caught.value, TransientModelError)  # Envoy's 503


@MAKERS
async def test_an_in_stream_error_in_an_odd_shape_keeps_its_text(loopback, make):
    error = {"error": {"message": f"quota gone {KEY}", "type": 7, "code": ["x"]}}
    loopback.replies.append(Reply(body=sse(error)))
    with pytest.raises(ModelError, match="quota gone") as caught:
        await read(make(loopback))
    assert KEY not in str(caught.value)


@MAKERS
async def test_an_event_without_an_error_that_does_not_decode_is_still_a_decode_error(
    loopback, make
):
    loopback.replies.append(Reply(body=sse({"type": 5, "choices": "x", "error": None})))
    with pytest.raises(ModelResponseError, match="does not decode"):
        await read(make(loopback))


async def test_a_request_the_server_does_not_read_is_a_write_timeout():
    # The server accepts the connection and never reads: the socket buffers fill
    # and the upload stalls. That is a write timeout (read_seconds, per piece
    # sent), not a failure to connect (connect_seconds).
    async def never_read(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, never_read, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        body = b"x" * (48 * 1024 * 1024)
        http = HTTPStream(f"http://127.0.0.1:{port}/", {}, body, "P", None, 600.0, 0.5)
        start = trio.current_time()
        try:
            with pytest.raises(TransientModelError) as caught:
                await http.open()
        finally:
            await http.aclose()
        assert trio.current_time() - start < WAIT  # not the connect deadline of ten minutes
        text = str(caught.value)
        assert "could not send the request in time" in text and "write timeout" in text
        assert "connect" not in text
        nursery.cancel_scope.cancel()


async def test_a_compressed_error_body_that_does_not_decode_keeps_the_status_meaning(loopback):
    headers = {"content-encoding": "gzip", "retry-after": "2"}
    loopback.replies.append(Reply(status=429, body=b"not gzip at all", headers=headers))
    with pytest.raises(TransientModelError, match=r"HTTP 429.*does not decode") as caught:
        await read(openai(loopback))
    assert caught.value.retry_after == 2


HI_REQUEST = ModelRequest(id="r1", messages=(UserMessage("u1", "hi"),), tools=())


async def streamed_text(model: OpenAIChatModel, request: ModelRequest = HI_REQUEST) -> str:
    async with model.stream(request) as stream:
        return "".join(c.text for c in [c async for c in stream] if isinstance(c, TextDelta))


@pytest.mark.parametrize("status", ["204 No Content", "304 Not Modified"])
async def test_a_bodyless_status_on_a_kept_connection_does_not_wait_for_the_read_timeout(status):
    """Issue 16 (review of the transport): a 204 or 304 on a kept connection waited for the read
    timeout."""

    async def handler(raw: Raw, stream: Any, index: int) -> None:
        await raw.read_request(stream)
        await stream.send_all(f"HTTP/1.1 {status}\r\nserver: x\r\n\r\n".encode())
        await trio.sleep_forever()  # keep-alive: the connection stays open

    raw = Raw(handler)
    read_seconds = 3 * WAIT
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        base_url = f"{raw.url}/v1"
        async with OpenAIChatModel(
            "m", api_key="k", base_url=base_url, read_seconds=read_seconds
        ) as m:
            start = trio.current_time()
            with pytest.raises(ModelRequestError, match=status[:3]):
                await streamed_text(m)
            assert trio.current_time() - start < read_seconds / 3
        nursery.cancel_scope.cancel()


BIG = ModelRequest(id="r1", messages=(UserMessage("u1", "x" * 8_000_000),), tools=())


@pytest.mark.parametrize("pooled_first", [False, True])
async def test_an_early_413_while_the_body_is_still_being_sent_is_the_answer(pooled_first):
    """Issue 16 (review of the transport): a 413 sent while the body was still going out (as nginx
    does) was lost in a send error, and the request retried; the 413 is the answer."""

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
                assert await streamed_text(model) == "ok"
            with pytest.raises(ModelError) as caught:
                await streamed_text(model, BIG)
            assert isinstance(caught.value, ContextOverflowError | ModelRequestError)
            assert "413" in str(caught.value)
        nursery.cancel_scope.cancel()
    assert len(raw.requests) == 1 + pooled_first  # the big request went once


async def test_a_401_whose_body_is_cut_short_is_still_an_authentication_error():
    """Issue 16 (review of the transport): a 401 whose body was cut short became a transient
    error."""

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
                await streamed_text(model)
        nursery.cancel_scope.cancel()


async def test_an_interim_103_response_is_skipped(loopback):
    """An interim 103 Early Hints response was taken for the answer; it is skipped."""
    head = (
        b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    )
    loopback.replies.append(Reply(body=fixture("openai_text.sse"), head=head))
    _, response = await read_stream(openai_model(loopback))
    assert response.content == (TextBlock("The sum is 42."),)


def test_an_ipv6_host_header_keeps_its_brackets():
    """An IPv6 host lost its brackets in the Host header."""
    stream = HTTPStream("http://[::1]:8080/v1/x", {}, b"", "P", None, 1.0, 1.0)
    assert b"host: [::1]:8080\r\n" in stream._head


@pytest.mark.parametrize("end", [b"\n", b"\r\n"])
async def test_a_response_head_whose_lines_end_in_a_bare_lf_is_read(end):
    """A response head whose lines end in a bare LF (as some servers and proxies send, and h11
    accepts) was reported as cut off; it is read, CRLF or LF, mixed as they come."""
    body = hello_body("bare")
    head = b"HTTP/1.1 200 OK\ncontent-type: text/event-stream\r\ncontent-length: %d\n" % len(body)

    async def handler(raw: Raw, stream: Any, index: int) -> None:
        await raw.read_request(stream)
        await stream.send_all(head + end + body)
        await trio.sleep_forever()  # the body's length ends it, not the close

    raw = Raw(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        async with OpenAIChatModel("m", api_key="k", base_url=f"{raw.url}/v1") as model:
            assert await streamed_text(model) == "bare"
        nursery.cancel_scope.cancel()
