"""The HTTP client's chunked decoding under any chunking and any split into network
reads, including data that looks like a chunk's size line (issue 6: the chunks of
a read are found by one regex split, checked against their sizes, and walked one by
one when the check fails), and the read timeout."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from loopback import Reply, fixture

from trio_agent import ModelRequest, ModelResponseError, TransientModelError, UserMessage
from trio_agent.providers import AnthropicModel
from trio_agent.providers._http import HTTPStream


class Pieces(trio.abc.ReceiveStream):
    """A stream that hands out the given pieces, then the end of the stream."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = list(pieces)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return self._pieces.pop(0) if self._pieces else b""

    async def aclose(self) -> None:
        pass


def http(pieces: list[bytes]) -> HTTPStream:
    stream = HTTPStream("http://127.0.0.1:1/", {}, b"", "P", None, 1.0, 1.0)
    stream._stream = Pieces(pieces)  # type: ignore[assignment]
    stream._chunked = True
    return stream


def dechunk(pieces: list[bytes]) -> bytes:
    async def main() -> bytes:
        stream = http(pieces)
        out = b""
        while (data := await stream._body_bytes()) is not None:
            out += data
        return out

    return trio.run(main)


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
    assert dechunk(split(body, reads)) == payload
    assert dechunk([body]) == payload


@settings(max_examples=200, deadline=None)
@given(PAYLOAD, st.lists(st.integers(0, 30), max_size=20), st.integers(1, 200), st.data())
def test_a_body_cut_anywhere_before_its_last_chunk_is_transient(payload, cuts, read, data):
    body = chunked(payload, cuts, False, False)
    cut = data.draw(st.integers(0, len(body) - len(b"0\r\n") - 1))
    with pytest.raises(TransientModelError):
        dechunk(split(body[:cut], [read] * (cut // read + 1)))


def test_bytes_after_the_last_chunk_are_not_read():
    assert dechunk([b"3\r\nabc\r\n0\r\n\r\n5\r\nhello\r\n"]) == b"abc"


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
