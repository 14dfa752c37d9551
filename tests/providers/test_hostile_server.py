"""The three adapters and their HTTP client against a hostile model server, on a
real loopback socket: what a server may send (a head, a body, events) is bounded
in memory and time, fails closed with a clear error, and loses nothing of what
it did say. Each test is named after the behaviour it pins; its docstring says
what went wrong before."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from loopback import Reply
from rawserver import Raw
from sse_bodies import DONE, choice, openai_model, read, sse
from waiting import WAIT

from trio_agent import ModelResponseError, TextBlock
from trio_agent.providers import OpenAIChatModel
from trio_agent.providers.http._http import MAX_DOCUMENT_BYTES
from trio_agent.providers.http._sse import SSEParser
from trio_agent.providers.http._wire import MAX_HEAD_BYTES, parse_head

KEY = "sk-test-SECRET-0123456789"
HELLO = sse(choice({"content": "Hi"}), choice({}, "stop")) + DONE


def chat(url: str, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("m", api_key=KEY, base_url=f"{url}/v1", proxy=None, **options)


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
