"""The three adapters and their HTTP client against a hostile model server, on a
real loopback socket: what a server may send (a head, a body, events) is bounded
in memory and time, fails closed with a clear error, and loses nothing of what
it did say. Each test is named after the behaviour it pins; its docstring says
what went wrong before."""

from __future__ import annotations

import json
import zlib
from typing import Any

import pytest
import trio
from loopback import Reply
from rawserver import Raw
from sse_bodies import DONE, choice, openai_model, read, sse
from waiting import WAIT

from trio_agent import ModelResponseError, TextBlock, ToolCall
from trio_agent.limits import MAX_ASSISTANT_BLOCKS, MAX_STEP_TEXT
from trio_agent.providers import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel
from trio_agent.providers.http._http import MAX_DOCUMENT_BYTES
from trio_agent.providers.http._sse import SSEParser
from trio_agent.providers.http._wire import MAX_HEAD_BYTES, parse_head

KEY = "sk-test-SECRET-0123456789"
HELLO = sse(choice({"content": "Hi"}), choice({}, "stop")) + DONE


def events(*payloads: dict[str, Any]) -> bytes:
    """Named events (Anthropic's and the Responses API's streams name each one)."""
    return b"".join(
        b"event: %s\ndata: %s\n\n" % (p["type"].encode(), json.dumps(p).encode()) for p in payloads
    )


def anthropic(url: str, **options: Any) -> AnthropicModel:
    return AnthropicModel("m", api_key=KEY, base_url=url, proxy=None, **options)


def responses(url: str, **options: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("m", api_key=KEY, base_url=f"{url}/v1", proxy=None, **options)


def chat(url: str, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("m", api_key=KEY, base_url=f"{url}/v1", proxy=None, **options)


MESSAGE_START = {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}}
MESSAGE_END = [
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 1}},
    {"type": "message_stop"},
]


def block_start(index: int, kind: str = "text", **fields: Any) -> dict[str, Any]:
    return {
        "type": "content_block_start",
        "index": index,
        "content_block": {"type": kind, **fields},
    }


def text_delta(index: int, text: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    }


def tool_use(index: int, call_id: str) -> list[dict[str, Any]]:
    return [
        block_start(index, "tool_use", id=call_id, name="echo", input={}),
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "input_json_delta", "partial_json": "{}"},
        },
        {"type": "content_block_stop", "index": index},
    ]


def function_call(index: int, call_id: str) -> list[dict[str, Any]]:
    item = {"type": "function_call", "id": f"fc_{index}", "call_id": call_id, "name": "echo"}
    return [
        {"type": "response.output_item.added", "output_index": index, "item": item},
        {
            "type": "response.output_item.done",
            "output_index": index,
            "item": {**item, "arguments": "{}"},
        },
    ]


COMPLETED = {
    "type": "response.completed",
    "response": {"id": "resp_1", "status": "completed", "usage": {"input_tokens": 1}},
}


# ------------------------------------------------------------------ the head


@pytest.mark.parametrize(
    "before", [b"HTTP/1.1 100 Continue\r\n\r\n", b"\r\n"], ids=["interim", "blank"]
)
async def test_interim_responses_or_blank_lines_without_end_are_refused_not_held(loopback, before):
    """Interim (1xx) responses and blank lines before the head were skipped without
    a bound: the client kept every byte of them and parsed them all again at each
    read, so a server sending them without end held the request (and a growing
    buffer) for ever. Past ``MAX_HEAD_BYTES`` of them, it is refused."""
    loopback.replies.append(Reply(head=before * (4 * MAX_HEAD_BYTES // len(before))))
    with pytest.raises(ModelResponseError, match="interim responses and blank lines"):
        await read(openai_model(loopback))


def test_the_head_after_a_few_interim_responses_is_still_read():
    head = b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\r\nHTTP/1.1 200 OK\r\nx: y\r\n\r\n"
    found = parse_head(head + b"rest", "P")
    assert found is not None and found[0] == 200 and found[2] == b"rest"


# ------------------------------------------------------------------ the body


async def test_a_json_200_of_blanks_without_end_is_not_read_for_ever():
    """A 200 labelled JSON was read until six bytes that are not blanks came, with
    nothing else to stop it: a body of blanks without end was read and held for
    ever (and stripped again at every read). Past ``MAX_DOCUMENT_BYTES`` it is the
    error of a JSON body that is too long, and the connection is closed."""
    sent = 0
    left = trio.Event()

    async def blanks(raw: Raw, stream: Any, index: int) -> None:
        nonlocal sent
        await raw.read_request(stream)
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
        await stream.send_all(head)
        piece = b" " * 65536
        try:
            while sent < 8 * MAX_DOCUMENT_BYTES:  # the bound only a failing test reaches
                await stream.send_all(piece)
                sent += len(piece)
        finally:
            left.set()

    server = Raw(blanks)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        async with chat(server.url) as model:
            with pytest.raises(ModelResponseError, match="longer than"):
                await read(model)
        with trio.fail_after(WAIT):
            await left.wait()
        nursery.cancel_scope.cancel()
    assert sent < 2 * MAX_DOCUMENT_BYTES  # the client went away soon after the limit


@pytest.mark.parametrize("split", range(len("\ufeffdata: ".encode()) + 1))
def test_a_byte_order_mark_starting_the_stream_is_dropped_wherever_the_reads_split(split):
    """A byte order mark before the first event made its ``data:`` line unreadable,
    and the event was dropped without a word (the SSE rules drop the mark)."""
    body = "\ufeff".encode() + HELLO
    parser = SSEParser()
    datas = parser.feed(body[:split]) + parser.feed(body[split:])
    assert len(datas) == 2 and b'"Hi"' in datas[0] and parser.done


async def test_a_byte_order_mark_before_the_first_event_loses_nothing(loopback):
    """The first event after a byte order mark was lost: the answer came out empty."""
    loopback.replies.append(Reply(body="\ufeff".encode() + HELLO))
    chunks, response = await read(openai_model(loopback))
    assert response.content == (TextBlock("Hi"),)


def test_a_byte_order_mark_later_in_the_stream_is_not_dropped():
    parser = SSEParser()
    assert parser.feed(b"data: a\n\n") == [b"a"]
    assert parser.feed("\ufeffdata: b\n\n".encode()) == []  # not at the start: not a field


# ------------------------------------------------------------------ held content


async def test_tool_calls_past_the_block_limit_are_refused_as_they_come(loopback):
    """A chat stream's tool calls were held until the body ended, however many
    came (hundreds of megabytes of them); the server could also put the end off
    for ever. One more than ``MAX_ASSISTANT_BLOCKS`` is refused at once."""
    calls = [
        choice({"tool_calls": [{"index": i, "id": f"c{i}", "function": {"name": "echo"}}]})
        for i in range(MAX_ASSISTANT_BLOCKS + 1)
    ]
    body = sse(*calls)
    loopback.replies.append(Reply(body=body, hang_after=len(body)))  # and then nothing
    model = openai_model(loopback, read_seconds=WAIT)
    with pytest.raises(ModelResponseError, match=f"more than {MAX_ASSISTANT_BLOCKS} blocks"):
        await read(model)


async def test_as_many_calls_as_the_limit_are_taken(loopback):
    calls = [
        choice({"tool_calls": [{"index": i, "id": f"c{i}", "function": {"name": "echo"}}]})
        for i in range(MAX_ASSISTANT_BLOCKS)
    ]
    loopback.replies.append(Reply(body=sse(*calls, choice({}, "tool_calls")) + DONE))
    chunks, response = await read(openai_model(loopback))
    assert len(response.content) == MAX_ASSISTANT_BLOCKS
    assert all(type(block) is ToolCall for block in response.content)


def text_after_a_call(kind: str) -> bytes:
    """A stream making a tool call, then more text than a step may have (held back
    by the adapter until the end), and not ending."""
    piece = "y" * 4096
    count = MAX_STEP_TEXT // len(piece) + 1
    if kind == "anthropic":
        deltas = [text_delta(1, piece) for _ in range(count)]
        return events(MESSAGE_START, *tool_use(0, "t1"), block_start(1), *deltas)
    deltas = [{"type": "response.output_text.delta", "delta": piece} for _ in range(count)]
    return events(*function_call(0, "c1"), *deltas)


@pytest.mark.parametrize("kind", ["anthropic", "responses"])
async def test_text_held_after_a_tool_call_is_bounded_as_it_comes(loopback, kind):
    """What streams after a tool call (held until the stop reason says whether the
    call stands) was held without a bound: a server streaming text there without
    end filled the memory (half a gigabyte in a few seconds). More than a step's
    ``MAX_STEP_TEXT`` is refused at once."""
    body = text_after_a_call(kind)
    loopback.replies.append(Reply(body=body, hang_after=len(body)))
    make = anthropic if kind == "anthropic" else responses
    async with make(loopback.url, read_seconds=WAIT) as model:
        with pytest.raises(ModelResponseError, match="characters of text held back"):
            await read(model)


@pytest.mark.parametrize("kind", ["anthropic", "responses"])
async def test_blocks_past_the_limit_are_refused_as_they_come(loopback, kind):
    """Anthropic content blocks and Responses function calls were held without a
    bound until the end (hundreds of megabytes). One more than
    ``MAX_ASSISTANT_BLOCKS`` is refused at once."""
    count = MAX_ASSISTANT_BLOCKS + 1
    if kind == "anthropic":
        body = events(MESSAGE_START, *(e for i in range(count) for e in tool_use(i, f"t{i}")))
    else:
        body = events(*(e for i in range(count) for e in function_call(i, f"c{i}")))
    loopback.replies.append(Reply(body=body, hang_after=len(body)))
    make = anthropic if kind == "anthropic" else responses
    async with make(loopback.url, read_seconds=WAIT) as model:
        with pytest.raises(ModelResponseError, match=f"more than {MAX_ASSISTANT_BLOCKS} blocks"):
            await read(model)


# ------------------------------------------------------------------ events


NEGATIVE_USAGE = {
    "openai": sse(
        choice({"content": "Hi"}),
        choice({}, "stop"),
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": -(10**9)}},
    )
    + DONE,
    "anthropic": events(
        MESSAGE_START,
        block_start(0),
        text_delta(0, "Hi"),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": -7},
        },
        {"type": "message_stop"},
    ),
    "responses": events(
        {"type": "response.output_text.delta", "delta": "Hi"},
        {**COMPLETED, "response": {**COMPLETED["response"], "usage": {"output_tokens": -7}}},
    ),
}


@pytest.mark.parametrize("kind", ["openai", "anthropic", "responses"])
@pytest.mark.parametrize("count", ["-7", "1" + "0" * 30])
async def test_a_token_count_below_zero_or_past_64_bits_is_refused(loopback, kind, count):
    """Usage counts were taken as sent: a negative one lowered the turn's totals, so
    a server could pass the user's ``UsageLimits`` unseen, and one past 64 bits went
    on to telemetry and stores that cannot take it. Either is an event that does
    not decode."""
    body = NEGATIVE_USAGE[kind].replace(b"-1000000000", b"-7").replace(b"-7", count.encode())
    loopback.replies.append(Reply(body=body))
    make = {"openai": chat, "anthropic": anthropic, "responses": responses}[kind]
    async with make(loopback.url) as model:
        with pytest.raises(ModelResponseError, match=r"does not decode|malformed"):
            await read(model)


@pytest.mark.parametrize("piece", [0, 7])
async def test_anthropic_events_after_message_stop_are_not_taken(loopback, piece):
    """An event after ``message_stop`` in the same read was taken into the message
    (a later read's was not): what the answer said hung on how the bytes were
    split. Nothing after the message's end is taken, however they are split."""
    body = events(
        MESSAGE_START,
        block_start(0),
        text_delta(0, "Hi"),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
        block_start(1),
        text_delta(1, "MORE"),
    )
    loopback.replies.append(Reply(body=body, piece=piece))
    async with anthropic(loopback.url) as model:
        chunks, response = await read(model)
    assert response.content == (TextBlock("Hi"),)
    assert [chunk.text for chunk in chunks] == ["Hi"]


async def test_an_anthropic_block_started_twice_is_refused(loopback):
    """A second ``content_block_start`` for an index already started replaced the
    first block: a tool call there vanished without a word and the other ran."""
    body = events(MESSAGE_START, *tool_use(0, "a"), *tool_use(0, "b"), *MESSAGE_END)
    loopback.replies.append(Reply(body=body))
    async with anthropic(loopback.url) as model:
        with pytest.raises(ModelResponseError, match="started content block 0 twice"):
            await read(model)


async def test_a_responses_call_added_twice_at_one_index_is_refused(loopback):
    """A second ``output_item.added`` function call at the index of one still open
    replaced it: the first call vanished without a word."""
    item = {"type": "function_call", "id": "fc", "call_id": "a", "name": "echo"}
    added = {"type": "response.output_item.added", "output_index": 0, "item": item}
    body = events(added, {**added, "item": {**item, "call_id": "b"}}, COMPLETED)
    loopback.replies.append(Reply(body=body))
    async with responses(loopback.url) as model:
        with pytest.raises(ModelResponseError, match="added output item 0 twice"):
            await read(model)


# ------------------------------------------------------------------ content codings


def gzipped(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(data) + packer.flush()


def test_a_read_that_inflates_to_megabytes_comes_out_a_piece_at_a_time():
    """A read of a few kilobytes that inflated to 64 MiB came out whole, in one
    piece (and was copied again into the event parser's buffer): 130 MB for one
    small read of a gzip bomb. Each ``feed`` now gives at most ``PIECE_BYTES``,
    the rest on ``feed(b"")`` while ``backlog`` says so."""
    from trio_agent.providers.http._inflate import PIECE_BYTES, Inflater

    body = b"data: " + b"x" * (8 * 1024 * 1024)
    inflater = Inflater("gzip", "P")
    pieces = [inflater.feed(gzipped(body))]
    while inflater.backlog:
        pieces.append(inflater.feed(b""))
    assert max(map(len, pieces)) <= PIECE_BYTES
    assert b"".join(pieces) == body and not inflater.cut_off


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_a_compressed_stream_read_in_pieces_is_whole(loopback, coding):
    texts = [f"{i:06d}" * 2000 for i in range(40)]  # more than a piece, inflated
    plain = sse(*(choice({"content": t}) for t in texts), choice({}, "stop")) + DONE
    packed = gzipped(plain) if coding == "gzip" else zlib.compress(plain, 9)
    loopback.replies.append(Reply(body=packed, headers={"content-encoding": coding}))
    async with chat(loopback.url) as model:
        chunks, response = await read(model)
    assert response.content == (TextBlock("".join(texts)),)
