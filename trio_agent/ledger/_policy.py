"""When a ledger writes a snapshot (``SnapshotPolicy``, a store's setting) and the
writer's half that keeps what the next one needs (``SnapshotTaker``): the
records written since the last snapshot, replayed only when one is due.

A snapshot is written right after a ``turn/end`` once ``every_turns`` turns or
``every_bytes`` bytes of records were written since the last one, and never
before the records since the last one weigh as much as it did: a session whose
transcript is long (no compaction) writes its snapshots ever more rarely, so
they cost about what the records themselves do (at most about twice the
bytes), while a compacted session's small snapshots come every ``every_turns``.
A resume then reads the last snapshot and the records after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import attrs

from ._records import LedgerCorruptError, Record, SnapshotRecord, TurnEndRecord, record_encoder

if TYPE_CHECKING:
    from ._derive import Replay

__all__ = ["DEFAULT_SNAPSHOTS", "SnapshotPolicy", "SnapshotTaker", "check_snapshots"]


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int:
        raise TypeError(f"{attribute.name} must be an int >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"{attribute.name} must be an int >= 1, got {value!r}")


@final
@attrs.frozen
class SnapshotPolicy:
    """Write a ``snapshot`` record at a turn's end once ``every_turns`` turns or
    ``every_bytes`` bytes of records were written since the last one (and the
    records since then outweigh it). A store's setting
    (``JsonlStore(directory, snapshots=SnapshotPolicy(...))``; ``None``: never)."""

    every_turns: int = attrs.field(default=100, validator=_positive)
    every_bytes: int = attrs.field(default=1 << 20, validator=_positive)


DEFAULT_SNAPSHOTS: Final = SnapshotPolicy()


def check_snapshots(snapshots: object) -> SnapshotPolicy | None:
    """A store's ``snapshots`` setting: a ``SnapshotPolicy`` or None, else ``TypeError``."""
    if snapshots is not None and type(snapshots) is not SnapshotPolicy:
        raise TypeError(f"snapshots must be a SnapshotPolicy or None, got {snapshots!r}")
    return snapshots


@final
class SnapshotTaker:
    """A ledger's snapshots: the records written since the last snapshot (from
    the ``session/start`` or snapshot the replay starts at), fed to a replay of
    the session when the next one is due. Cheap per record (a list append); a
    snapshot costs the replay of the records since the last one and the encoding
    of the state (the transcript)."""

    __slots__ = ("_bytes", "_last", "_policy", "_replay", "_since", "_turns")

    def __init__(self, policy: SnapshotPolicy, history: list[Record]) -> None:
        self._policy = policy
        self._since = history  # from a session/start or a snapshot on
        self._replay: Replay | None = None
        # what the writers before this one wrote since the last snapshot counts
        # too: a session resumed for each turn reaches its snapshots as one
        # writer's does (each record's line measured again, once, as it was written)
        first = history[0] if history else None
        start = 1 if type(first) is SnapshotRecord else 0
        self._last = len(first.state) if type(first) is SnapshotRecord else 0  # its size
        self._turns = sum(type(record) is TurnEndRecord for record in history)
        # measured a few thousand lines an encoding call (in C; never the whole
        # history's bytes at once: a ledger without snapshots is all history)
        self._bytes = sum(
            len(record_encoder.encode_lines(history[at : at + 4096]))
            for at in range(start, len(history), 4096)
        )

    def wrote(self, record: Record, size: int) -> None:
        self._since.append(record)
        self._bytes += size

    def turn_ended(self) -> SnapshotRecord | None:
        """A turn's end was written: the snapshot to write now, if one is due.
        ``LedgerCorruptError`` when the replay refuses a record written (then
        this taker is done: drop it)."""
        self._turns += 1
        policy, written = self._policy, self._bytes
        if written < self._last or (
            self._turns < policy.every_turns and written < policy.every_bytes
        ):
            return None
        replay = self._replay
        if replay is None:
            from ._derive import replay_of  # the replay: loaded with the first snapshot

            replay = self._replay = replay_of(self._since)
            replay.trusted = True  # what it replays next, this process's session wrote
        else:
            for record in self._since:
                replay.feed(record)
        self._since = []
        try:
            return replay.take_snapshot()
        except ValueError as exc:  # inside a turn: not where a turn's end leaves it
            raise LedgerCorruptError(str(exc)) from None

    def snapshot_written(self, size: int) -> None:
        """The snapshot (``size`` bytes) was written: count from here."""
        self._turns = self._bytes = 0
        self._last = size
