"""The three adapters and their HTTP client against a hostile model server, on a
real loopback socket: what a server may send (a head, a body, events) is bounded
in memory and time, fails closed with a clear error, and loses nothing of what
it did say. Each test is named after the behaviour it pins; its docstring says
what went wrong before."""

from __future__ import annotations

import pytest
from loopback import Reply
from sse_bodies import openai_model, read

from trio_agent import ModelResponseError
from trio_agent.providers.http._wire import MAX_HEAD_BYTES, parse_head

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
