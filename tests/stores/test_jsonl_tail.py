"""How a JSONL ledger is read: ``_read_tail`` (the bytes from the last whole
snapshot line, read backwards in growing blocks) against a plain search of the
whole file, and ``parse_jsonl``'s one-call decode of whole lines against the
line-by-line parse it stands in for, on random files and random damage."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_agent import LedgerCorruptError, TurnCompleted
from trio_agent.ledger import (
    SessionStartRecord,
    SnapshotRecord,
    TurnEndRecord,
    TurnStartRecord,
    encode_records,
)
from trio_agent.stores import _base, _jsonl, parse_jsonl

MARK = b'\n{"kind":"snapshot",'


def reference_tail(data: bytes) -> tuple[bytes, int]:
    """From the last snapshot line that has its line end (or from 0)."""
    last_end = data.rfind(b"\n")
    if last_end < 0:
        return data, 0
    found = data.rfind(MARK, 0, last_end - 1 + len(MARK))
    return (data[found + 1 :], found + 1) if found >= 0 else (data, 0)


lines = st.lists(
    st.tuples(st.booleans(), st.integers(0, 60)).map(
        lambda kind: (MARK[1:] if kind[0] else b"{") + b"x" * kind[1] + b"\n"
    ),
    max_size=30,
)


@settings(max_examples=400, deadline=None)
@given(lines, st.binary(max_size=40), st.integers(1, 48))
def test_the_tail_read_backwards_is_the_one_a_search_of_the_whole_file_finds(
    tmp_path_factory, body, torn, first
):
    # Blocks as small as one byte, so a mark runs across two, three or more.
    path = Path(tmp_path_factory.mktemp("tail")) / "s.jsonl"
    data = b"".join(body) + torn.replace(b"\n", b"")
    path.write_bytes(data)
    assert _jsonl._read_tail(path, first) == reference_tail(data)


def _records(turns: int, snapshot_at: int | None) -> list:
    records: list = [SessionStartRecord(seq=0, format=1, session_id="s", created=0.0)]
    for turn in range(1, turns + 1):
        records.append(TurnStartRecord(seq=len(records), turn=turn, sequence=turn))
        records.append(
            TurnEndRecord(seq=len(records), turn=turn, end=TurnCompleted(), sequence=turn + 1)
        )
        if snapshot_at == turn:
            state = msgspec.Raw(b'{"a":1}')
            records.append(SnapshotRecord(seq=len(records), state=state, crc32=7))
    return records


DAMAGE = [
    "none",
    "blank line",
    "two on a line",
    "split and two on a line",
    "torn",
    "snapshot not json",
    "bad seq",
    "junk",
]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 6),
    st.one_of(st.none(), st.integers(1, 6)),
    st.sampled_from(DAMAGE),
    st.integers(0, 100),
    st.booleans(),
)
def test_whole_lines_decoded_at_once_say_what_a_line_at_a_time_says(
    turns, snapshot_at, damage, where, from_a_tail
):
    data = encode_records(_records(turns, snapshot_at))
    rows = data.split(b"\n")[:-1]
    at = where % len(rows)
    if damage == "blank line":
        rows.insert(at, b"")
    elif damage == "two on a line" and len(rows) > 1:
        rows[at - 1 : at + 1] = [rows[at - 1] + b" " + rows[at]]
    elif damage == "split and two on a line" and len(rows) > 2:
        # a record broken before a nested object starts one more line with "{"
        # where two records joined take one away: the counts alone still agree
        end = next((i for i, row in enumerate(rows) if b'{"reason"' in row), None)
        if end is not None:
            cut = rows[end].index(b'{"reason"')
            rows[end : end + 1] = [rows[end][:cut], rows[end][cut:]]
            other = 1 if end > 2 else len(rows) - 1
            rows[other - 1 : other + 1] = [rows[other - 1] + b" " + rows[other]]
    elif damage == "snapshot not json":
        rows = [row[:40] + b"}}}" if row.startswith(MARK[1:]) else row for row in rows]
    elif damage == "bad seq":
        rows[at] = rows[at].replace(b'"seq":', b'"seq":9', 1)
    elif damage == "junk":
        rows[at] = rows[at][: len(rows[at]) // 2]
    data = b"\n".join(rows) + b"\n"
    if damage == "torn":
        data = data[: len(data) - 1 - (where % 7)]
    first_seq = None if from_a_tail else 0
    try:
        expected = _base._line_by_line("s", data, first_seq, 5)
    except LedgerCorruptError as exc:
        with pytest.raises(LedgerCorruptError) as caught:
            parse_jsonl("s", data, first_seq=first_seq, offset=5)
        assert str(caught.value) == str(exc)
        return
    assert parse_jsonl("s", data, first_seq=first_seq, offset=5) == expected


def test_the_records_parsed_keep_no_view_of_the_bytes_read():
    """Decoded in one call, a snapshot's state was a view of all the bytes read
    (at 100,000 turns 55 MB, 15 MB more than its own line), kept for as long as
    the session keeps its history; it is a copy of its own."""
    data = encode_records(_records(3, 2))
    before = sys.getrefcount(data)
    loaded = parse_jsonl("s", data)
    assert any(type(record) is SnapshotRecord for record in loaded.records)
    assert sys.getrefcount(data) == before


def test_a_record_split_over_two_lines_is_refused_even_when_another_line_holds_two():
    """A record broken before a nested object (``..."end":`` / ``{"reason":...}}``)
    adds a line that starts with ``{``; two records joined on one line take one
    away. The one-call decode counted lines, ``\\n{`` and records, all equal, and
    accepted the file the line-by-line parse refuses."""
    start, turn, end = encode_records(_records(1, None)).splitlines()
    cut = end.index(b'{"reason"')
    data = start + b" " + turn + b"\n" + end[:cut] + b"\n" + end[cut:] + b"\n"
    with pytest.raises(LedgerCorruptError) as slow:
        _base._line_by_line("s", data, 0, 0)
    with pytest.raises(LedgerCorruptError) as fast:
        parse_jsonl("s", data)
    assert str(fast.value) == str(slow.value)
