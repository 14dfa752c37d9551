"""``EventLog``: the events a served session emitted, one JSON line each, in a file
per session, so that a client can resume by sequence after a server restart.

The ledger holds records, not events (a streamed answer is one ``message``
record but many ``model.chunk`` events), so events cannot be derived again
with their sequences; the server writes each one here before any client
sees it. A line is exactly the SSE ``data:`` (``{"schema": 1, "event": ...}``,
as ``--json`` prints it). A last line with no line end (the process died
writing it) is ignored when read and cut off before the next append.

A read gives a bounded prefix of the events after a cursor (``READ_EVENTS``
events, ``READ_BYTES`` bytes), found by a binary search of the file (its
sequences only grow): a reader far behind, or many of them, holds one batch
at a time, never the whole log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Final, Protocol, final

import msgspec
import trio

from ..events import SessionEvent
from ..tools._types import enc_hook

__all__ = [
    "READ_BYTES",
    "READ_EVENTS",
    "EventLog",
    "EventWriter",
    "Events",
    "LogWriter",
    "encode_event",
    "parse_log",
]

READ_EVENTS: Final = 4096
"""The most events one read of a log gives (``PostgresEvents`` reads as many rows)."""
READ_BYTES: Final = 1 << 20
"""The most bytes of lines one read gives (one event at least, whatever its size)."""
_SCAN_BYTES: Final = 1 << 16  # the binary search stops within this of the first line

_SCHEMA_VERSION = 1  # the --json lines' version (trio_agent.cli's EventLine)
_encoder = msgspec.json.Encoder(enc_hook=enc_hook)  # a typed output may be pydantic's


class _Sequence(msgspec.Struct, frozen=True):
    sequence: int


class _Line(msgspec.Struct, frozen=True):
    event: _Sequence


_line_decoder = msgspec.json.Decoder(_Line)


def encode_event(event: SessionEvent) -> bytes:
    """The event as one ``--json`` line (no line end): ``{"schema":1,"event":{...}}``,
    byte for byte what ``trio-agent run --json`` prints."""
    return b'{"schema":%d,"event":%s}' % (_SCHEMA_VERSION, _encoder.encode(event))


def parse_log(data: bytes) -> tuple[list[tuple[int, bytes]], int]:
    """The whole lines of ``data`` as (sequence, line), and where the last whole
    line ends. A line that does not decode is skipped (it cannot be resumed from)."""
    events: list[tuple[int, bytes]] = []
    position = 0
    while True:
        end = data.find(b"\n", position)
        if end == -1:
            return events, position
        line = data[position:end]
        position = end + 1
        try:
            sequence = _line_decoder.decode(line).event.sequence
        except msgspec.DecodeError:
            continue
        events.append((sequence, line))


class EventWriter(Protocol):
    """Appends one session's event lines; ``last`` is the last sequence written."""

    @property
    def last(self) -> int: ...

    async def append(self, sequence: int, line: bytes) -> bool:
        """Write the line before anyone sees it; False when it was written before."""
        ...

    def close(self) -> None: ...


class Events(Protocol):
    """Where a store's sessions' events are logged."""

    async def read(self, session_id: str, after: int) -> list[tuple[int, bytes]]:
        """The logged events above ``after``, in order (a prefix of them at least)."""
        ...

    async def writer(self, session_id: str) -> EventWriter: ...


@final
class LogWriter:
    """Appends a session's event lines (the one writer: the process that runs the
    session's turns holds its ledger's lock). ``last`` is the sequence of the last
    line; an event at or below it is not written again."""

    def __init__(self, fd: int, last: int) -> None:
        self._fd = fd
        self.last = last

    async def append(self, sequence: int, line: bytes) -> bool:
        """Write the line (to the OS, before any client sees it; no checkpoint);
        False when the event was logged already."""
        if sequence <= self.last:
            return False
        data = memoryview(line + b"\n")
        while data:
            written = os.write(self._fd, data)
            data = data[written:]
        self.last = sequence
        return True

    def close(self) -> None:
        if self._fd != -1:
            os.close(self._fd)
            self._fd = -1


@final
class EventLog:
    """The event files of a store's sessions: ``{directory}/{session_id}.jsonl``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, session_id: str) -> Path:
        return self.directory / f"{session_id}.jsonl"

    async def read(self, session_id: str, after: int) -> list[tuple[int, bytes]]:
        """The logged events with a sequence above ``after``, in order (a file read
        in a worker thread; cancellation abandons it)."""
        return await trio.to_thread.run_sync(self._read, session_id, after)

    def _read(self, session_id: str, after: int) -> list[tuple[int, bytes]]:
        try:
            file = self.path(session_id).open("rb")
        except FileNotFoundError:
            return []
        with file:
            file.seek(_near_first_after(file, after))
            events: list[tuple[int, bytes]] = []
            size = 0
            for line in file:
                if not line.endswith(b"\n"):
                    break  # a torn last line
                sequence = _sequence_of(line)
                if sequence is None or sequence <= after:
                    continue
                events.append((sequence, line[:-1]))
                size += len(line)
                if len(events) >= READ_EVENTS or size >= READ_BYTES:
                    break
            return events

    async def writer(self, session_id: str) -> LogWriter:
        """A writer appending to the session's file (made if new), its torn tail cut."""
        return await trio.to_thread.run_sync(self._open, session_id)

    def _open(self, session_id: str) -> LogWriter:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(session_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            events, whole = parse_log(Path(path).read_bytes())
            if os.fstat(fd).st_size != whole:
                os.ftruncate(fd, whole)
        except Exception:  # a worker thread: nothing else reaches it
            os.close(fd)
            raise
        return LogWriter(fd, events[-1][0] if events else -1)


def _sequence_of(line: bytes) -> int | None:
    try:
        return _line_decoder.decode(line).event.sequence
    except msgspec.DecodeError:
        return None


def _near_first_after(file: BinaryIO, after: int) -> int:
    """Where a line starts at most ``_SCAN_BYTES`` (and one line) before the first
    line whose sequence is above ``after``: a binary search over the file's bytes,
    whose lines' sequences only grow (a line that does not decode narrows it
    leftwards: the scan from there passes over it)."""
    low, high = 0, file.seek(0, os.SEEK_END)  # low: 0, or a line at or below ``after``
    while high - low > _SCAN_BYTES:
        middle = (low + high) // 2
        file.seek(middle)
        file.readline()  # to the next line's start
        start = file.tell()
        line = file.readline()
        sequence = _sequence_of(line) if line.endswith(b"\n") and start < high else None
        if sequence is not None and sequence <= after:
            low = start
        else:
            high = middle
    return low
