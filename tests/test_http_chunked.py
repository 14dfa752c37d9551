"""The HTTP client's chunked decoding (``_wire.ChunkedReader``, fed bytes: no
I/O) under any chunking and any split into network reads, including data that
looks like a chunk's size line (issue 6: the chunks of a read are found by one
regex split, checked against their sizes, and walked one by one when the check
fails), trailers, and the read timeout."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loopback import Reply, fixture

from trio_agent import ModelRequest, ModelResponseError, TransientModelError, UserMessage
from trio_agent.providers import AnthropicModel
from trio_agent.providers.http._wire import ChunkedReader


def read_all(pieces: list[bytes]) -> tuple[ChunkedReader, bytes]:
    """A chunked reader fed ``pieces`` one by one (as network reads), then the end
    of the connection, and the body it gave."""
    reader = ChunkedReader("P")
    out = b""
    for piece in [*pieces, None]:
        if piece is None:
            reader.closed()
        else:
            reader.feed(piece)
        while data := reader.read():
            out += data
        if reader.done:
            break
    return reader, out


def dechunk(pieces: list[bytes]) -> bytes:
    reader, body = read_all(pieces)
    assert reader.done
    return body


def split(body: bytes, sizes: list[int]) -> list[bytes]:
    pieces, at = [], 0
    for size in sizes:
        pieces.append(body[at : at + size])
        at += size
    return [p for p in pieces if p] + [body[at:]]


# Data with CRLFs and lookalike size lines in it, so that the regex split finds
# size lines inside chunks and must notice.
PAYLOAD = st.lists(
    st.sampled_from(
        [b"\r\n", b"\r\n1a\r\n", b"\r\n0\r\n", b"5;x=1\r\n", b"data: x\n\n", b"a", b"\r"]
    ),
    max_size=40,
).map(b"".join)


def chunked(payload: bytes, cuts: list[int], extension: bool, upper: bool) -> bytes:
    out, at = [], 0
    for cut in [*cuts, len(payload)]:
        data = payload[at : at + cut] if cut else b""
        at += len(data)
        if data:
            size = b"%X" % len(data) if upper else b"%x" % len(data)
            out.append(size + (b";name=value" if extension else b"") + b"\r\n" + data + b"\r\n")
    if at < len(payload):
        rest = payload[at:]
        out.append(b"%x\r\n%s\r\n" % (len(rest), rest))
    return b"".join(out) + b"0\r\n\r\n"


@settings(max_examples=300, deadline=None)
@given(
    PAYLOAD,
    st.lists(st.integers(0, 30), max_size=20),
    st.lists(st.integers(1, 60), max_size=30),
    st.booleans(),
    st.booleans(),
)
def test_any_chunking_and_any_split_into_reads_gives_the_body(
    payload, cuts, reads, extension, upper
):
    body = chunked(payload, cuts, extension, upper)
    for pieces in (split(body, reads), [body]):
        reader, got = read_all(pieces)
        assert got == payload
        assert reader.done and reader.leftover == b""  # ends exactly: reusable


@settings(max_examples=200, deadline=None)
@given(PAYLOAD, st.lists(st.integers(0, 30), max_size=20), st.integers(1, 200), st.data())
def test_a_body_cut_anywhere_before_its_last_chunk_is_transient(payload, cuts, read, data):
    body = chunked(payload, cuts, False, False)
    cut = data.draw(st.integers(0, len(body) - len(b"0\r\n") - 1))
    with pytest.raises(TransientModelError):
        dechunk(split(body[:cut], [read] * (cut // read + 1)))


def test_bytes_after_the_last_chunk_are_not_read():
    reader, body = read_all([b"3\r\nabc\r\n0\r\n\r\n5\r\nhello\r\n"])
    assert body == b"abc"
    assert reader.done and reader.leftover == b"5\r\nhello\r\n"  # so not reused


@pytest.mark.parametrize("read", [1, 2, 5, 1000])
def test_trailers_are_skipped_to_their_end_and_nothing_is_left_over(read):
    body = b"3\r\nabc\r\n0\r\nx-checksum: 1\r\nx-other: 2\r\n\r\n"
    reader, got = read_all([body[i : i + read] for i in range(0, len(body), read)])
    assert got == b"abc" and reader.done and reader.leftover == b""


def test_a_body_cut_in_its_trailers_is_transient():
    with pytest.raises(TransientModelError, match="trailers were cut off"):
        read_all([b"3\r\nabc\r\n0\r\nx-checksum: 1\r\n"])


def test_blank_lines_between_chunks_are_skipped():
    assert dechunk([b"3\r\nabc\r\n\r\n\r\n2\r\nde\r\n0\r\n\r\n"]) == b"abcde"


def test_a_bad_size_line_is_a_response_error():
    with pytest.raises(ModelResponseError, match="bad chunk size"):
        dechunk([b"3\r\nabc\r\nzz\r\nde\r\n0\r\n\r\n"])


def test_the_events_of_a_chunked_stream_are_the_same_whatever_the_reads():
    body = fixture("anthropic_tools.sse")
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e]
    whole = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    assert dechunk([whole]) == b"".join(events)
    assert dechunk([whole[i : i + 7] for i in range(0, len(whole), 7)]) == b"".join(events)


async def test_a_stream_that_stalls_is_a_transient_read_timeout(loopback):
    body = fixture("anthropic_tools.sse")
    loopback.replies.append(Reply(body=body, hang_after=40))
    model = AnthropicModel("m", api_key="k", base_url=loopback.url, read_seconds=0.05)
    request = ModelRequest(id="r", messages=(UserMessage("u", "hi"),), tools=())
    with pytest.raises(TransientModelError, match="read timeout"):
        async with model.stream(request) as stream:
            async for _ in stream:
                pass
