"""The SSE parser under any split of the stream into network reads (issue 6), and
the end of a stream at ``data: [DONE]``, the same in every adapter (issue 32)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from loopback import Reply, fixture
from rawserver import Raw, sized
from wire_builders import AnthropicWire, ChatWire, ResponsesWire, wires

from trio_agent import ModelRequest, TextBlock, TextDelta, TransientModelError, UserMessage
from trio_agent.providers import OpenAIChatModel
from trio_agent.providers.http._sse import MAX_EVENT_BYTES, SSEParser


def parse(pieces) -> list[bytes]:
    parser = SSEParser()
    out: list[bytes] = []
    for piece in pieces:
        out += parser.feed(piece)
    return out


STREAMS = [fixture(name) for name in ("openai_tools.sse", "anthropic_tools.sse")]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(STREAMS), st.lists(st.integers(1, 400), max_size=60), st.booleans())
def test_any_split_into_reads_gives_the_same_events(stream, sizes, crlf):
    if crlf:
        stream = stream.replace(b"\n", b"\r\n")
    whole = parse([stream])
    pieces, at = [], 0
    for size in sizes:
        pieces.append(stream[at : at + size])
        at += size
    pieces.append(stream[at:])
    assert parse(pieces) == whole
    assert len(whole) == stream.count(b"data:") - stream.count(b"data: [DONE]")  # it ends them


def test_a_crlf_split_between_two_reads_is_one_line_end():
    assert parse([b"data: 1\r", b"\n\r\n", b"data: 2\r\n\r\n"]) == [b"1", b"2"]


def test_multi_line_data_is_joined_and_comments_and_names_are_dropped():
    stream = b": keep-alive\n\nevent: x\ndata: a\ndata:b\n\nevent: ping\n\ndata:c\n\n"
    assert parse([stream]) == [b"a\nb", b"c"]


SPLIT_DATA = (
    b"data: a\nid: 3\ndata: b\n\n"  # an id between the data lines of one event
    b"data: c\n: note\ndata: d\nevent: e\ndata:f\nretry: 5\n\n"  # a comment, a name
    b"event: x\ndata\ndata: g\n\n"  # a data line with no colon: an empty value
    b"data: h\nid: 4\n\n: ping\n\n"  # a field after the only data line
    b"data:\nid: 5\n\n"  # an empty data line and an id: still no event
)


@pytest.mark.parametrize("crlf", [False, True])
def test_data_lines_split_by_another_field_or_a_comment_are_one_event(crlf):
    """Data lines of one event with an ``id:``, ``event:`` or comment line between them were
    read as two events; all the data lines up to the blank line are one event (the SSE rules),
    wherever the reads split the bytes."""
    stream = SPLIT_DATA.replace(b"\n", b"\r\n") if crlf else SPLIT_DATA
    events = [b"a\nb", b"c\nd\nf", b"\ng", b"h"]
    assert parse([stream]) == events
    for at in range(1, len(stream)):
        assert parse([stream[:at], stream[at:]]) == events


async def test_a_chat_chunk_whose_data_lines_an_id_splits_is_one_chunk(loopback):
    """The same over a real connection: a chunk's JSON sent as two data lines with an ``id:``
    between them failed to decode as two events; it is one chunk."""
    body = (
        b'id: 1\ndata: {"id":"c","choices":[{"index":0,\nid: 2\n'
        b'data: "delta":{"content":"Hello"},"finish_reason":null}]}\n\n'
        b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    loopback.replies.append(Reply(body=body, piece=7))
    model = OpenAIChatModel("m", api_key="k", base_url=f"{loopback.url}/v1")
    async with model.stream(REQUEST) as stream:
        chunks = [c async for c in stream]
        response = await stream.response()
    assert chunks == [TextDelta("Hello")]
    assert response.content == (TextBlock("Hello"),)


def test_an_unfinished_event_waits_for_its_end():
    parser = SSEParser()
    assert parser.feed(b'data: {"a":') == []
    assert parser.feed(b" 1}\n") == []
    assert parser.feed(b"\n") == [b'{"a": 1}']


REQUEST = ModelRequest(id="request-001", messages=(UserMessage("u1", "hi"),), tools=())
DONE = b"data: [DONE]\n\n"


def ended(wire: Any, text: Any = ("Hello", " world")) -> bytes:
    """``wire``'s text stream, its terminal event followed by ``data: [DONE]`` (as
    OpenAI ends chat streams and LiteLLM its Responses and Messages streams)."""
    body = wire.text(list(text))
    return body if body.endswith(DONE) else body + DONE


class Reads:
    """The HTTP side of an adapter's stream (what ``SSEModelStream`` calls), the
    body served as exactly these reads through the real SSE parser."""

    document = None
    secret = None

    def __init__(self, reads: list[bytes]) -> None:
        self._reads = list(reads)
        self._parser = SSEParser()

    @property
    def events_ended(self) -> bool:
        return self._parser.done

    async def open(self) -> None:
        pass

    async def next_events(self) -> list[bytes] | None:
        return self._parser.feed(self._reads.pop(0)) if self._reads else None

    async def drain(self) -> None:
        self._reads.clear()

    async def aclose(self) -> None:
        pass


async def read_as(wire: Any, reads: list[bytes]) -> tuple[str, Any]:
    """The text streamed and the response of ``wire``'s adapter reading ``reads``."""
    model = wire.model(SimpleNamespace(url="http://127.0.0.1:9"))  # never connected
    kind = type(model.stream(REQUEST))
    async with kind(Reads(reads), REQUEST, model.max_argument_bytes) as stream:
        chunks = [c async for c in stream]
        response = await stream.response()
    return "".join(c.text for c in chunks if type(c) is TextDelta), response


def test_done_ends_the_events_and_nothing_after_it_is_parsed():
    """issue 32: ``[DONE]`` is the SSE layer's end of a stream, not an event to
    decode; what follows it, even past the event size limit, is dropped."""
    parser = SSEParser()
    assert parser.feed(b"data: 1\n\ndata: [DONE]\n\ndata: 2\n\n") == [b"1"]
    assert parser.done
    assert parser.feed(b"x" * (MAX_EVENT_BYTES + 10)) == []
    assert parse([b"data: 1\r\n\r\ndata:[DONE]\r\n\r\n"]) == [b"1"]
    assert parse([b"data: [DONE] \n\n"]) == [b"[DONE] "]  # not the marker: an event


@wires()
async def test_done_in_the_read_of_the_terminal_event_ends_the_stream_in_every_adapter(wire):
    """issue 32: LiteLLM ends its /v1/responses streams with ``data: [DONE]``; once
    the process was busy it arrived in the same read as ``response.completed``
    and the Responses adapter decoded it as an event: "ModelResponseError: ...
    Expected object, got array" (18 turns of 30). The Anthropic adapter did the
    same; only the chat adapter cut it. A raw server writes the whole answer,
    terminal event and ``[DONE]``, in one send."""
    body = ended(wire)

    async def handler(raw: Raw, stream: Any, index: int) -> None:
        if await raw.read_request(stream):
            await stream.send_all(sized(body))  # one write: one read on the client's side

    raw = Raw(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        async with wire.model(raw) as model, model.stream(REQUEST) as stream:
            chunks = [c async for c in stream]
            response = await stream.response()
        nursery.cancel_scope.cancel()
    assert "".join(c.text for c in chunks if type(c) is TextDelta) == "Hello world"
    assert response.content == (TextBlock("Hello world"),) and response.stop_reason == "stop"


@wires()
async def test_done_after_the_terminal_event_under_a_split_at_every_byte(wire):
    """issue 32: the answer in one read, and in two split at every byte boundary:
    the same text and response each time, for every adapter (the failure came
    only when ``[DONE]`` shared a read with the terminal event)."""
    body = ended(wire)
    whole = await read_as(wire, [body])
    assert whole[0] == "Hello world" and whole[1].stop_reason == "stop"
    for cut in range(1, len(body)):
        assert await read_as(wire, [body[:cut], body[cut:]]) == whole, cut


@pytest.mark.parametrize(
    ("wire", "missing"),
    [(ResponsesWire, "response.completed"), (AnthropicWire, "message_stop")],
    ids=["responses", "anthropic"],
)
async def test_done_before_the_terminal_event_is_a_stream_cut_short(wire, missing):
    """issue 32: ``[DONE]`` ends the events, never the message: without the
    adapter's own terminal event the answer is incomplete (transient)."""
    body = wire.text(["Hello"])
    cut = body.rindex(b"event: ")  # the terminal event's start
    with pytest.raises(TransientModelError, match=missing):
        await read_as(wire, [body[:cut] + DONE + body[cut:]])


async def test_chat_events_after_done_are_not_taken():
    """issue 32: after ``[DONE]`` the chat adapter reads nothing more, as before the
    marker moved into the SSE layer."""
    body = ended(ChatWire) + ChatWire.text(["other"])
    assert (await read_as(ChatWire, [body]))[0] == "Hello world"


class DrainLogged(Reads):
    """``Reads`` that logs when the body's end is read (``drain``)."""

    def __init__(self, reads: list[bytes], log: list[str]) -> None:
        super().__init__(reads)
        self.log = log

    async def drain(self) -> None:
        self.log.append("drain")
        await super().drain()


@wires()
async def test_the_response_does_not_wait_for_the_body_end_after_the_message_ended(wire):
    """After the message's end (``[DONE]``, or the adapter's own terminal event), the rest of
    the body was read (up to 1 s, for a body that never ends) before the response and the last
    chunks were made: the response is there at once; the body's end is read at the exit."""
    model = wire.model(SimpleNamespace(url="http://127.0.0.1:9"))  # never connected
    log: list[str] = []
    reads = DrainLogged([ended(wire)], log)
    async with type(model.stream(REQUEST))(reads, REQUEST, model.max_argument_bytes) as stream:
        chunks = [c async for c in stream]
        response = await stream.response()
        log.append("response")
    assert log == ["response", "drain"]
    assert "".join(c.text for c in chunks if type(c) is TextDelta) == "Hello world"
    assert response.content == (TextBlock("Hello world"),)


async def test_a_connection_whose_body_ends_after_the_response_is_still_reused():
    """The body's end, read at the stream's exit now, still gives the connection back: a
    server that ends the chunked body only once the client has the response serves the next
    request on the same connection."""
    body = ended(ChatWire)
    answered = trio.Event()

    async def handler(raw: Raw, stream: Any, index: int) -> None:
        buffer = b""
        while (got := await raw.read_request(stream, buffer)) is not None:
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            await stream.send_all(head + b"transfer-encoding: chunked\r\n\r\n")
            await stream.send_all(b"%x\r\n%s\r\n" % (len(body), body))
            await answered.wait()
            await stream.send_all(b"0\r\n\r\n")
            buffer = got[1]

    raw = Raw(handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        async with ChatWire.model(raw) as model:
            for _ in range(2):
                async with model.stream(REQUEST) as stream:
                    response = await stream.response()
                    answered.set()
                assert response.content == (TextBlock("Hello world"),)
        nursery.cancel_scope.cancel()
    assert raw.connections == 1


def _end_after_the_response(end: bytes, answered: trio.Event) -> Any:
    """A handler that sends a chat stream (chunked) whole, then, once the client has the
    response, ``end`` in place of the body's plain end (``b""``: never ends it)."""
    body = ended(ChatWire)

    async def handler(raw: Raw, stream: Any, index: int) -> None:
        buffer = b""
        while (got := await raw.read_request(stream, buffer)) is not None:
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            await stream.send_all(head + b"transfer-encoding: chunked\r\n\r\n")
            await stream.send_all(b"%x\r\n%s\r\n" % (len(body), body))
            await answered.wait()
            if not end:
                await trio.sleep_forever()
            await stream.send_all(end)
            buffer = got[1]

    return handler


@pytest.mark.parametrize(
    "end", [b"", b"0\r\n\r\nHTTP/1.1 200 OK\r\n", b"5\r\nxxxxx\r\n0\r\n\r\nx"], ids=str
)
async def test_a_body_end_that_never_comes_or_comes_with_more_keeps_no_connection(
    autojump_clock, end
):
    """The body's end, read at the stream's exit since the response comes at once: a server
    that never ends the body (read for ``_DRAIN_SECONDS``), or sends bytes after its end (a
    second answer nobody asked for), has its connection closed, not reused."""
    answered = trio.Event()
    raw = Raw(_end_after_the_response(end, answered))
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        async with ChatWire.model(raw) as model:
            for _ in range(2):
                async with model.stream(REQUEST) as stream:
                    response = await stream.response()
                    answered.set()
                assert response.content == (TextBlock("Hello world"),)
        nursery.cancel_scope.cancel()
    assert raw.connections == 2


async def test_cancelled_while_it_reads_the_body_end_at_exit_the_connection_is_closed():
    """Cancelled in the stream's exit, while it reads the body's end: the cancellation goes
    out, and the connection, half read, is closed, never reused."""
    answered = trio.Event()
    raw = Raw(_end_after_the_response(b"", answered))
    async with trio.open_nursery() as nursery:
        await nursery.start(raw.serve)
        async with ChatWire.model(raw) as model:
            with trio.CancelScope() as scope:
                async with model.stream(REQUEST) as stream:
                    response = await stream.response()
                    answered.set()
                    scope.cancel()  # delivered at the exit's first wait: the body's end
            assert scope.cancelled_caught and response.content == (TextBlock("Hello world"),)
            async with model.stream(REQUEST) as stream:
                await stream.response()
        nursery.cancel_scope.cancel()
    assert raw.connections == 2
