"""The SSE parser under any split of the stream into network reads (issue 6)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from loopback import fixture

from trio_agent.providers._http import SSEParser


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
    assert len(whole) == stream.count(b"data:")


def test_a_crlf_split_between_two_reads_is_one_line_end():
    assert parse([b"data: 1\r", b"\n\r\n", b"data: 2\r\n\r\n"]) == [b"1", b"2"]


def test_multi_line_data_is_joined_and_comments_and_names_are_dropped():
    stream = b": keep-alive\n\nevent: x\ndata: a\ndata:b\n\nevent: ping\n\ndata:c\n\n"
    assert parse([stream]) == [b"a\nb", b"c"]


def test_an_unfinished_event_waits_for_its_end():
    parser = SSEParser()
    assert parser.feed(b'data: {"a":') == []
    assert parser.feed(b" 1}\n") == []
    assert parser.feed(b"\n") == [b'{"a": 1}']
