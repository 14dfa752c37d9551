"""HTTP/1.1 on the wire, without I/O (``_wire``): a response head and the readers of a
body. Chunked decoding under any chunking and any split into network reads,
including data that looks like a chunk's size line (issue 6: the chunks of a read
are found by one regex split, checked against their sizes, and walked one by one
when the check fails), trailers and the read timeout; the strictness of h11's rules
(the review of issue 16's transport); and bodies cut short or mislabelled, read
through an adapter."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loopback import Reply, fixture
from paths import SUPPORT
from sse_bodies import openai_model
from sse_bodies import read as read_stream

from trio_agent import ModelRequest, ModelResponseError, TransientModelError, UserMessage
from trio_agent.providers import AnthropicModel
from trio_agent.providers.http._http import HTTPStream
from trio_agent.providers.http._wire import (
    MAX_HEAD_BYTES,
    ChunkedReader,
    HeadReader,
    body_reader,
    keep_alive,
    parse_head,
)


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


def dechunked(wire: bytes) -> tuple[ChunkedReader, bytes]:
    reader = ChunkedReader("P", wire)
    out = b""
    while data := reader.read():
        out += data
    return reader, out


@pytest.mark.parametrize("size", [b"-5", b"+5", b"0x5", b" 5", b"5_0", b"-0x5", b"1" * 17])
def test_a_negative_or_odd_chunk_size_is_refused_not_an_endless_loop(size):
    """Issue 16 (review of the transport): a negative or odd chunk size (a sign, hex prefix, blank,
    underscore, too many digits) made the reader loop for ever; it is refused."""
    with pytest.raises(ModelResponseError, match="bad chunk size"):
        dechunked(b"3\r\nabc\r\n" + size + b"\r\nhello\r\n0\r\n\r\n")
    with pytest.raises(ModelResponseError, match="bad chunk size"):
        dechunked(size + b"\r\nhello\r\n0\r\n\r\n")


def test_chunk_sizes_with_extensions_and_blanks_before_them_are_read():
    """Issue 16 (review of the transport): a chunk size with an extension and blanks before it is
    read, as h11 reads it."""
    reader, out = dechunked(b"5 ;x=1\r\nhello\r\n0\r\n\r\n")
    assert out == b"hello" and reader.done


@pytest.mark.parametrize("split", [1, 3, 7, 100])
def test_a_chunk_not_followed_by_its_line_end_is_refused(split):
    """Issue 16 (review of the transport): a chunk not followed by its line end was read on into the
    next; it is refused, under any split into reads."""
    wire = b"5\r\nhello6\r\nworld!\r\n0\r\n\r\n"
    reader = ChunkedReader("P")
    with pytest.raises(ModelResponseError, match="not followed by its line end"):
        for at in range(0, len(wire), split):
            reader.feed(wire[at : at + split])
            while reader.read():
                pass


def test_conflicting_content_lengths_are_refused():
    """Issue 16 (review of the transport): two different content-lengths were taken (the last one);
    they are refused, two equal ones are fine."""
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
    """Issue 16 (review of the transport): a folded or malformed header line was taken; it is
    refused."""
    with pytest.raises(ModelResponseError, match="header line"):
        parse_head(b"HTTP/1.1 200 OK\r\nx-a: 1\r\n" + line + b"\r\n\r\n", "P")


@pytest.mark.parametrize("value", ["Keep-Alive", "keep-alive", "KEEP-ALIVE"])
def test_http_1_0_keep_alive_in_any_case_keeps_the_connection(value):
    """Issue 16 (review of the transport): HTTP/1.0 ``Connection: keep-alive`` was honoured only in
    one spelling."""
    head = f"HTTP/1.0 200 OK\r\nConnection: {value}\r\ncontent-length: 1\r\n\r\nx".encode()
    _, headers, _ = parse_head(head, "P")  # type: ignore[misc]
    assert keep_alive(headers)[0]
    _, plain, _ = parse_head(b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\nx", "P")  # type: ignore[misc]
    assert not keep_alive(plain)[0]


@pytest.mark.parametrize("status", [204, 304])
def test_a_bodyless_status_has_an_empty_body_whatever_its_headers(status):
    """Issue 16 (review of the transport): a 204 or 304 with a content-length waited for a body that
    never comes."""
    head = b"HTTP/1.1 %d X\r\ncontent-length: 40\r\n\r\n" % status
    found = parse_head(head, "P")
    assert found is not None
    reader = body_reader("P", *found)
    assert reader.done and reader.read() == b""


def test_a_head_found_in_one_read_is_still_bounded():
    """Issue 16 (review of the transport): a head that arrived in one read escaped the head size
    bound."""
    with pytest.raises(ModelResponseError, match="longer than"):
        parse_head(b"HTTP/1.1 200 OK\r\nx: " + b"a" * 100_000 + b"\r\n\r\n", "P")


def test_blank_lines_before_the_status_line_are_skipped():
    """Issue 16 (review of the transport): blank lines before the status line made the head
    unreadable; they are skipped."""
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
    """Issue 16 (review of the transport): transfer-encoding decides the framing, over content-
    length."""
    assert type(body_reader("P", 200, headers, b"")).__name__ == kind


def test_a_transfer_coding_other_than_chunked_is_refused_by_name():
    """Issue 16 (review of the transport): a transfer coding other than chunked was read as chunked;
    it is refused by name."""
    with pytest.raises(ModelResponseError, match="'chunked, gzip'"):
        body_reader("P", 200, {"transfer-encoding": "chunked, gzip"}, b"")


def test_content_length_and_transfer_encoding_together_are_never_reused():
    """Issue 16 (review of the transport): a connection that sent both content-length and transfer-
    encoding was reused."""
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n"
    found = parse_head(head, "P")
    assert found is not None and not keep_alive(found[1])[0]


CHILD = textwrap.dedent(
    """
    import sys, trio
    sys.path.insert(0, sys.argv[1])  # tests/support/
    from rawserver import Raw
    from trio_agent import ModelRequest, UserMessage, ModelError
    from trio_agent.providers import OpenAIChatModel

    async def handler(raw, stream, index):
        await raw.read_request(stream)
        await stream.send_all(b"HTTP/1.1 200 OK\\r\\ncontent-type: text/event-stream\\r\\n"
                              b"transfer-encoding: chunked\\r\\n\\r\\n"
                              b"3\\r\\nabc\\r\\n-5\\r\\nhello\\r\\n0\\r\\n\\r\\n")
        await trio.sleep_forever()

    async def main():
        raw = Raw(handler)
        async with trio.open_nursery() as nursery:
            await nursery.start(raw.serve)
            model = OpenAIChatModel(
                "m", api_key="sk-test", base_url=f"{raw.url}/v1", read_seconds=30
            )
            request = ModelRequest(id="r", messages=(UserMessage("u", "hi"),), tools=())
            with trio.move_on_after(60):
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
    """Issue 16 (review of the transport): a negative chunk size over a socket froze the process: a
    busy loop no cancellation could reach."""
    try:
        child = subprocess.run(
            [sys.executable, "-c", CHILD, str(SUPPORT)], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("the process froze: trio.move_on_after(60) never fired") from None
    assert child.returncode == 0, child.stderr[-2000:]
    assert "bad chunk size" in child.stdout


@pytest.mark.parametrize("line", [b"HTTP/1.1 2000 OK", b"HTTP/1.1 200OK", b"HTTP/1.1 20 OK"])
def test_a_status_code_is_exactly_three_digits(line):
    """Issue 16 (review of the transport): a status line whose code is not exactly three digits was
    taken."""
    with pytest.raises(ModelResponseError, match="not an HTTP response"):
        parse_head(line + b"\r\ncontent-length: 0\r\n\r\n", "P")
    assert parse_head(b"HTTP/1.1 200\r\n\r\n", "P") is not None  # no reason phrase: fine


def test_a_complete_size_line_with_a_huge_extension_is_refused():
    """Issue 16 (review of the transport): a complete size line with a huge extension escaped the
    line bound."""
    with pytest.raises(ModelResponseError, match="size line too long"):
        dechunked(b"3\r\nabc\r\n5;" + b"x" * 5000 + b"\r\nhello\r\n0\r\n\r\n")


@pytest.mark.parametrize("piece", [37, 200, 100000])
async def test_a_chunked_body_one_chunk_per_event(loopback, piece):
    """A chunked body of one chunk per event, in reads of any size, gives the whole stream."""
    loopback.replies.append(Reply(body=fixture("openai_tools.sse"), chunked=True, piece=piece))
    _, response = await read_stream(openai_model(loopback))
    assert response.stop_reason == "tool_call" and len(response.content) == 2


async def test_a_chunked_body_cut_before_its_last_chunk_is_transient(loopback):
    """A chunked body cut before its last chunk was taken as whole; it is transient."""
    body = fixture("openai_text.sse")
    loopback.replies.append(Reply(body=body[: len(body) // 2], chunked=True, end_chunked=False))
    with pytest.raises(TransientModelError):
        await read_stream(openai_model(loopback))


async def test_a_sized_body_cut_short_is_transient(loopback):
    """A body shorter than its content-length was taken as whole; it is transient."""
    body = fixture("openai_text.sse")
    loopback.replies.append(Reply(body=body[:300], headers={"content-length": str(len(body))}))
    with pytest.raises(TransientModelError, match="early"):
        await read_stream(openai_model(loopback))


async def test_a_bad_content_length_is_a_response_error(loopback):
    """A content-length that is not a number is a response error, not a crash."""
    head = b"HTTP/1.1 200 OK\r\ncontent-length: lots\r\n\r\n"
    loopback.replies.append(Reply(body=b"data: x\n\n", head=head))
    with pytest.raises(ModelResponseError, match="content-length"):
        await read_stream(openai_model(loopback))


@pytest.mark.parametrize("end", [b"\n", b"\r\n"])
def test_a_head_of_bare_lf_lines_is_parsed_and_still_bounded(end):
    """Lines ending in a bare LF made a head look cut off for ever; they end lines as in h11,
    blank lines before the status line too, and the size limit still holds."""
    head = b"\nHTTP/1.1 200 OK\nx-a: 1\r\ncontent-length: 1\n" + end + b"x"
    found = parse_head(head, "P")
    assert found == (200, {"x-a": "1", "content-length": "1"}, b"x")
    assert parse_head(head[:-3], "P") is None  # the blank line not there yet: wait
    with pytest.raises(ModelResponseError, match="longer than"):
        parse_head(b"HTTP/1.1 200 OK\nx: " + b"a" * 100_000 + b"\n\n", "P")
    with pytest.raises(ModelResponseError, match="longer than"):
        parse_head(b"HTTP/1.1 200 OK\nx: " + b"a" * 100_000, "P")


class _Scanned:
    """A compiled pattern of ``_wire`` that counts the bytes its scans start over."""

    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self.pattern = pattern
        self.bytes = 0

    def match(self, buffer: bytes, pos: int = 0) -> re.Match[bytes] | None:
        self.bytes += len(buffer) - pos
        return self.pattern.match(buffer, pos)

    def search(self, buffer: bytes, pos: int = 0) -> re.Match[bytes] | None:
        self.bytes += len(buffer) - pos
        return self.pattern.search(buffer, pos)


class _Reads:
    """A connection that answers ``reads``, one a receive (as a slow server's)."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads
        self.requests_left: int | None = None

    async def receive(self, seconds: float, provider: str) -> bytes:
        return self.reads.pop(0) if self.reads else b""


_INTERIM = b"HTTP/1.1 103 Early Hints\r\nlink: </a>\n\r\n"


@pytest.mark.parametrize(
    "reads",
    [
        [bytes([byte]) for byte in b"HTTP/1.1 200 OK\n" + b"x-a: 1\r\n" * 500 + b"\n"],
        [_INTERIM] * 300 + [b"HTTP/1.1 200 OK\r\n\r\n"],
    ],
    ids=["a byte a read", "an interim response a read"],
)
async def test_a_head_sent_a_piece_a_read_is_parsed_once_not_again_at_every_read(
    monkeypatch, reads
):
    """The whole buffer was parsed again at each read: a 64 KiB head a byte a read, or of
    small interim responses one a read, cost seconds of CPU (quadratic). Each byte is now
    scanned about once: only a read that ends a blank line is parsed, and the interim
    responses parsed are dropped."""
    from trio_agent.providers.http import _wire

    scans = [_Scanned(_wire._BLANK_LINES), _Scanned(_wire._HEAD_END)]
    monkeypatch.setattr(_wire, "_BLANK_LINES", scans[0])
    monkeypatch.setattr(_wire, "_HEAD_END", scans[1])
    sent, count = sum(len(read) for read in reads), len(reads)
    http = HTTPStream("http://127.0.0.1:9/", {}, b"", "P", None, 1.0, 1.0)
    status, headers = await http._read_head(_Reads(reads))  # type: ignore[arg-type]
    assert (status, headers.get("x-a", "1")) == (200, "1")
    # each read is looked at with the two bytes before it; the head parsed once or so
    assert sum(scan.bytes for scan in scans) <= 3 * count + 4 * sent


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_a_head_fed_in_reads_is_the_head_parse_head_finds(size):
    """``HeadReader`` (the head a read at a time) answers as ``parse_head`` on the whole,
    for any split into reads: mixed CRLF and bare LF line ends, blank lines and interim
    responses first, a blank line split across reads."""
    wire = b"\r\n\n" + _INTERIM * 3 + b"HTTP/1.1 200 OK\nx-a: 1\r\nx-b: 2\n\r\nrest"
    reader = HeadReader("P")
    found = None
    for at in range(0, len(wire), size):
        found = reader.feed(wire[at : at + size])
        if found is not None:
            break
    assert found is not None
    whole = parse_head(wire, "P")
    assert whole is not None
    assert found[:2] == whole[:2] == (200, {"x-a": "1", "x-b": "2"})
    assert whole[2] == b"rest" and b"rest".startswith(found[2])  # what its read had of it


def test_interim_responses_a_read_past_the_limit_are_refused():
    """Dropped once parsed, the interim responses still count toward their limit."""
    reader = HeadReader("P")
    with pytest.raises(ModelResponseError, match="interim responses and blank lines"):
        for _ in range(2 * MAX_HEAD_BYTES // len(_INTERIM)):
            reader.feed(_INTERIM)


@pytest.mark.parametrize(
    "line", [b"content-type: text/event-stream\rx-b: 2", b"x-a: 1\r\r", b"x-a\r: 1"]
)
def test_a_bare_cr_in_a_header_line_is_refused_not_kept_in_a_value(line):
    """A bare CR ends no line (only CRLF and LF do), and it was kept inside the value:
    ``a: b\\rc: d`` read as one field whose value held a CR and a second field, which
    RFC 9112 says to refuse (or read as a space). It is refused, as h11 does."""
    with pytest.raises(ModelResponseError, match="a bad header line"):
        parse_head(b"HTTP/1.1 200 OK\r\n" + line + b"\r\nx-c: 3\n\r\n", "P")
