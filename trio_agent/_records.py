"""The ledger's records and errors: what a session's JSONL lines (or rows) hold.

Every record is a frozen msgspec Struct tagged by ``kind`` with a ``seq``
that runs 0, 1, 2, ... through the session. Fields added after the first
release have defaults, so older ledgers load unchanged.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

import msgspec
from msgspec import Struct

from .events import TurnEnd
from .messages import Message, ToolResultMessage
from .model import Usage

__all__ = [
    "FORMAT_VERSION",
    "AttemptFailedRecord",
    "CompactedRecord",
    "EventsReservedRecord",
    "LedgerCorruptError",
    "LedgerError",
    "MessageRecord",
    "Record",
    "SessionChangedError",
    "SessionClosedRecord",
    "SessionExistsError",
    "SessionLockedError",
    "SessionStartRecord",
    "StepEndRecord",
    "StepStartRecord",
    "ToolCallRecord",
    "ToolCancelledRecord",
    "ToolFailedRecord",
    "ToolResultRecord",
    "ToolSkippedRecord",
    "TurnEndRecord",
    "TurnStartRecord",
    "encode_records",
    "record_decoder",
    "record_encoder",
    "session_exists",
]

FORMAT_VERSION: Final = 1


class LedgerError(Exception):
    """A ledger that cannot be read or written as asked."""


class LedgerCorruptError(LedgerError):
    """A ledger whose middle is damaged, or a record where it cannot be; nothing is guessed."""


class SessionLockedError(LedgerError):
    """The session already has a writer (in this process or another); the message names it."""


class SessionChangedError(LedgerError):
    """The session was appended to after it was loaded: load it again before writing."""


class SessionExistsError(LedgerError):
    """A new session was asked for under an id a stored session has; the message says
    how to continue that one instead (``Agent.resume``)."""


def session_exists(session_id: str, where: object) -> SessionExistsError:
    """The error for creating ``session_id`` again in the store at ``where``."""
    return SessionExistsError(
        f"session {session_id!r} already exists in {where}: use "
        f"Agent.resume(store, {session_id!r}) to continue it"
    )


class _Record(Struct, frozen=True, kw_only=True, tag_field="kind"):
    seq: int


class SessionStartRecord(_Record, frozen=True, tag="session/start"):
    """The first record: the format version and what the session was created with.

    ``metadata``: the run configuration the application recorded
    (``Agent(metadata=...)``, plain JSON, never a secret); ``{}`` in older ledgers.
    """

    kind: ClassVar[Literal["session/start"]] = "session/start"
    format: int
    session_id: str
    created: float
    system: str = ""
    first_request: int = 1
    first_sequence: int = 0
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class SessionClosedRecord(_Record, frozen=True, tag="session/closed"):
    """``Agent.aclose()`` closed the session cleanly; ``sequence`` is where the next
    events start. A ledger that does not end with one was left by a process that died
    (or is still being written)."""

    kind: ClassVar[Literal["session/closed"]] = "session/closed"
    sequence: int


class EventsReservedRecord(_Record, frozen=True, tag="events/reserved"):
    """Event sequences below ``until`` may be handed out by this writer. Written before
    the first event past the previous reservation, so a resume after a crash starts
    numbering above every event a consumer of the dead process can have seen."""

    kind: ClassVar[Literal["events/reserved"]] = "events/reserved"
    until: int


class TurnStartRecord(_Record, frozen=True, tag="turn/start"):
    """A turn began; ``sequence`` is the event sequence of its ``turn.started``;
    ``model`` labels the model that ran it (``"provider:model"`` for the provider
    adapters, else the model's class name; ``""`` in older ledgers)."""

    kind: ClassVar[Literal["turn/start"]] = "turn/start"
    turn: int
    sequence: int
    model: str = ""


class TurnEndRecord(_Record, frozen=True, tag="turn/end"):
    """The end of a turn (``interrupted`` when a resume closed it); ``sequence`` is
    where the next turn's events start (after an interrupted turn: above every
    sequence the dead process had reserved)."""

    kind: ClassVar[Literal["turn/end"]] = "turn/end"
    turn: int
    end: TurnEnd
    sequence: int


class StepStartRecord(_Record, frozen=True, tag="step/start"):
    """A model request is about to be opened; stored before it is."""

    kind: ClassVar[Literal["step/start"]] = "step/start"
    request_id: str


class StepEndRecord(_Record, frozen=True, tag="step/end"):
    """A step's tool batch is done. (``usage`` is read from older ledgers only: a
    response's usage is recorded with its message.)"""

    kind: ClassVar[Literal["step/end"]] = "step/end"
    request_id: str
    stop_reason: str
    usage: Usage | None = None


class MessageRecord(_Record, frozen=True, tag="message"):
    """A user or assistant message as it joined the transcript; an assistant
    message carries the usage of the response it came from."""

    kind: ClassVar[Literal["message"]] = "message"
    message: Message
    usage: Usage | None = None


class AttemptFailedRecord(_Record, frozen=True, tag="attempt/failed"):
    """A failed model attempt; never part of the transcript. ``usage``: what the
    provider reported for a response that arrived but was refused."""

    kind: ClassVar[Literal["attempt/failed"]] = "attempt/failed"
    request_id: str
    attempt: int
    error: str
    retry_in: float | None
    usage: Usage | None = None


class ToolCallRecord(_Record, frozen=True, tag="tool/call"):
    """Written just before the call is dispatched (the call itself is in its assistant message)."""

    kind: ClassVar[Literal["tool/call"]] = "tool/call"
    call_id: str


class ToolSkippedRecord(_Record, frozen=True, tag="tool/skipped"):
    """A call recorded by ``tool/call`` was not dispatched after all (cancelled first)."""

    kind: ClassVar[Literal["tool/skipped"]] = "tool/skipped"
    call_id: str


class ToolCancelledRecord(_Record, frozen=True, tag="tool/cancelled"):
    """A dispatched call was cancelled and ended without a result (it may have done
    part of its work)."""

    kind: ClassVar[Literal["tool/cancelled"]] = "tool/cancelled"
    call_id: str


class ToolFailedRecord(_Record, frozen=True, tag="tool/failed"):
    """A dispatched call failed fatally (``FatalToolError``) and has no result."""

    kind: ClassVar[Literal["tool/failed"]] = "tool/failed"
    call_id: str
    error: str


class ToolResultRecord(_Record, frozen=True, tag="tool/result"):
    """A tool result as it joined the transcript; ``code`` marks one a resume wrote."""

    kind: ClassVar[Literal["tool/result"]] = "tool/result"
    result: ToolResultMessage
    code: str | None = None


class CompactedRecord(_Record, frozen=True, tag="context/compacted"):
    """The transcript was replaced by ``messages`` (compaction)."""

    kind: ClassVar[Literal["context/compacted"]] = "context/compacted"
    messages: tuple[Message, ...]


Record = (
    SessionStartRecord
    | SessionClosedRecord
    | EventsReservedRecord
    | TurnStartRecord
    | TurnEndRecord
    | StepStartRecord
    | StepEndRecord
    | MessageRecord
    | AttemptFailedRecord
    | ToolCallRecord
    | ToolSkippedRecord
    | ToolCancelledRecord
    | ToolFailedRecord
    | ToolResultRecord
    | CompactedRecord
)

record_decoder: Final = msgspec.json.Decoder(Record)
record_encoder: Final = msgspec.json.Encoder()


def encode_records(records: list[Record] | tuple[Record, ...]) -> bytes:
    """Records as JSON lines."""
    return b"".join(record_encoder.encode(r) + b"\n" for r in records)
