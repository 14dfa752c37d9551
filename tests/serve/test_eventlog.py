"""The JSONL event log read by cursor: a bounded prefix of the events after it,
found by a binary search of the file, so that a reader far behind holds one
batch at a time, and reading on from each batch's last gives every event once."""

from __future__ import annotations

import tracemalloc

import pytest

from trio_agent.events import TurnStarted
from trio_agent.serve import _eventlog
from trio_agent.serve._eventlog import EventLog, encode_event


def _write(log: EventLog, sequences: range, tail: bytes = b"") -> None:
    log.directory.mkdir(parents=True, exist_ok=True)
    lines = b"".join(encode_event(TurnStarted(sequence=s, turn=1)) + b"\n" for s in sequences)
    log.path("s").write_bytes(lines + tail)


async def test_a_reader_far_behind_holds_one_batch_not_the_whole_log(tmp_path):
    """Bug: a read of the JSONL log loaded the whole file and gave every event after
    the cursor at once, so each reader far behind (from the first event of a long
    session) held the log several times over in memory (the bytes, the lines, the
    frames joined into one body), unbounded; PostgreSQL's read gives a page."""
    log = EventLog(tmp_path)
    _write(log, range(200_000))
    assert log.path("s").stat().st_size > 12 << 20
    tracemalloc.start()
    try:
        first = await log.read("s", -1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(first) <= 4096  # _eventlog.READ_EVENTS, PostgreSQL's page too
    assert [s for s, _ in first] == list(range(len(first)))
    assert peak < 4 << 20


@pytest.mark.parametrize("step", [1, 3, 7])
async def test_reading_on_from_each_batch_gives_every_event_once(tmp_path, monkeypatch, step):
    """From any cursor, batches read one after another give exactly the events
    above it, whatever the batch and search sizes; a torn last line and a line
    that does not decode are passed over."""
    monkeypatch.setattr(_eventlog, "READ_EVENTS", step)
    monkeypatch.setattr(_eventlog, "_SCAN_BYTES", 64)
    log = EventLog(tmp_path)
    _write(log, range(0, 300, 2), tail=b"not json\n" + b'{"schema":1,"event":{"seq')
    for cursor in range(-1, 302, 5):
        got: list[int] = []
        while batch := await log.read("s", got[-1] if got else cursor):
            assert len(batch) <= step
            got += [s for s, _ in batch]
        assert got == [s for s in range(0, 300, 2) if s > cursor]
