"""The session ledger: append-only records, and the state derived from them.

A session is written as records with a contiguous ``seq`` as it happens.
The transcript is never stored on its own: it is derived from the records
(``derive``), so what a resumed session sees is exactly what was recorded.
Each message is recorded once, when it joins the transcript (``message``
for user and assistant messages, ``tool/result`` for tool results);
``tool/call`` is recorded just before a call is dispatched, so a resume can
tell a call that never started from one whose outcome is unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar, Final, Literal, Protocol, final

import attrs
import msgspec
from msgspec import Struct

from .engine import Conversation
from .events import TurnEnd
from .messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    TranscriptError,
    _Linker,
    tool_result,
)
from .model import Usage

__all__ = [
    "FORMAT_VERSION",
    "FsyncPolicy",
    "Ledger",
    "SessionWriter",
    "TOOL_NOT_STARTED",
    "TOOL_OUTCOME_UNKNOWN",
    "AttemptFailedRecord",
    "CompactedRecord",
    "DerivedSession",
    "LedgerCorruptError",
    "LedgerError",
    "MessageRecord",
    "Record",
    "SessionStartRecord",
    "StepEndRecord",
    "StepStartRecord",
    "ToolCallRecord",
    "ToolResultRecord",
    "TurnEndRecord",
    "TurnStartRecord",
    "derive",
    "record_decoder",
]

FORMAT_VERSION: Final = 1
TOOL_NOT_STARTED: Final = "TOOL_NOT_STARTED"
TOOL_OUTCOME_UNKNOWN: Final = "TOOL_OUTCOME_UNKNOWN"

_CLOSING_TEXT = {
    TOOL_NOT_STARTED: (
        "TOOL_NOT_STARTED: the session stopped before this call was dispatched; "
        "call it again if it is still needed."
    ),
    TOOL_OUTCOME_UNKNOWN: (
        "TOOL_OUTCOME_UNKNOWN: this call was dispatched but the session stopped before "
        "its result was recorded; call it again only if it is idempotent, otherwise "
        "check the external state first."
    ),
}


class LedgerError(Exception):
    """A ledger that cannot be read or written as asked."""


class LedgerCorruptError(LedgerError):
    """A ledger whose middle is damaged or whose ``seq`` has a gap; nothing is guessed."""


class _Record(Struct, frozen=True, kw_only=True, tag_field="kind"):
    seq: int


class SessionStartRecord(_Record, tag="session/start"):
    """The first record: the format version and what the session was created with."""

    kind: ClassVar[str] = "session/start"
    format: int
    session_id: str
    created: float
    system: str = ""
    first_request: int = 1
    first_sequence: int = 0


class TurnStartRecord(_Record, tag="turn/start"):
    """A turn began; ``sequence`` is the event sequence of its ``turn.started``."""

    kind: ClassVar[str] = "turn/start"
    turn: int
    sequence: int


class TurnEndRecord(_Record, tag="turn/end"):
    """The end of a turn (``interrupted`` when a resume closed it); ``sequence`` is
    where the next turn's events start. After an interrupted turn that is an
    estimate (its ``turn/start``): events themselves are not recorded."""

    kind: ClassVar[str] = "turn/end"
    turn: int
    end: TurnEnd
    sequence: int


class StepStartRecord(_Record, tag="step/start"):
    kind: ClassVar[str] = "step/start"
    request_id: str


class StepEndRecord(_Record, tag="step/end"):
    kind: ClassVar[str] = "step/end"
    request_id: str
    stop_reason: str
    usage: Usage | None = None


class MessageRecord(_Record, tag="message"):
    """A user or assistant message as it joined the transcript."""

    kind: ClassVar[str] = "message"
    message: Message


class AttemptFailedRecord(_Record, tag="attempt/failed"):
    """A failed model attempt; never part of the transcript."""

    kind: ClassVar[str] = "attempt/failed"
    request_id: str
    attempt: int
    error: str
    retry_in: float | None


class ToolCallRecord(_Record, tag="tool/call"):
    """Written just before the call is dispatched (the call itself is in its assistant message)."""

    kind: ClassVar[str] = "tool/call"
    call_id: str


class ToolSkippedRecord(_Record, tag="tool/skipped"):
    """A call recorded by ``tool/call`` was not dispatched after all (cancelled first)."""

    kind: ClassVar[str] = "tool/skipped"
    call_id: str


class ToolResultRecord(_Record, tag="tool/result"):
    """A tool result as it joined the transcript; ``code`` marks one a resume wrote."""

    kind: ClassVar[str] = "tool/result"
    result: ToolResultMessage
    code: str | None = None


class CompactedRecord(_Record, tag="context/compacted"):
    """The transcript was replaced by ``messages`` (compaction)."""

    kind: ClassVar[str] = "context/compacted"
    messages: tuple[Message, ...]


Record = (
    SessionStartRecord
    | TurnStartRecord
    | TurnEndRecord
    | StepStartRecord
    | StepEndRecord
    | MessageRecord
    | AttemptFailedRecord
    | ToolCallRecord
    | ToolSkippedRecord
    | ToolResultRecord
    | CompactedRecord
)

record_decoder: Final = msgspec.json.Decoder(Record)
record_encoder: Final = msgspec.json.Encoder()

FsyncPolicy = Literal["always", "step", "never"]
_POLICIES: Final = ("always", "step", "never")


def check_fsync(fsync: object) -> None:
    """``ValueError`` unless ``fsync`` is a durability policy."""
    if fsync not in _POLICIES:
        raise ValueError(f"fsync must be one of {_POLICIES}, got {fsync!r}")


class SessionWriter(Protocol):
    """Appends one session's encoded records; a store's half that writes.

    ``append`` must not await: for a file it writes to the OS at once.
    ``flush`` makes everything appended so far written (to the OS) and, with
    ``durable=True``, on disk; it returns at once when there is nothing to do.
    """

    def append(self, line: bytes) -> None: ...
    async def flush(self, durable: bool) -> None: ...
    async def aclose(self) -> None: ...


@final
class Ledger:
    """Writes a session's records in order, under an fsync policy.

    ``always``: every record is on disk before the event it matches is
    observed (and a call's ``tool/call`` before it is dispatched).
    ``step``: records reach the OS at once and disk at the end of each step
    and turn (a process crash loses nothing written; a machine crash can
    lose the step in progress). ``never``: the OS decides when to write.
    The trio thread never waits on an fsync it was not asked to: fsyncs run
    in the writer's own thread, many records at a time.
    """

    def __init__(self, writer: SessionWriter, next_seq: int, fsync: FsyncPolicy = "step") -> None:
        check_fsync(fsync)
        self._writer = writer
        self._seq = next_seq
        self._event_durable = fsync == "always"
        self._step_durable = fsync != "never"

    @property
    def next_seq(self) -> int:
        return self._seq

    def _write(self, record: Record) -> None:
        self._writer.append(record_encoder.encode(record) + b"\n")
        self._seq += 1

    # -- records
    def session_started(
        self,
        session_id: str,
        created: float,
        system: str,
        first_request: int = 1,
        first_sequence: int = 0,
    ) -> None:
        self._write(
            SessionStartRecord(
                seq=self._seq,
                format=FORMAT_VERSION,
                session_id=session_id,
                created=created,
                system=system,
                first_request=first_request,
                first_sequence=first_sequence,
            )
        )

    def turn_started(self, turn: int, sequence: int) -> None:
        self._write(TurnStartRecord(seq=self._seq, turn=turn, sequence=sequence))

    def turn_ended(self, turn: int, end: TurnEnd, sequence: int) -> None:
        self._write(TurnEndRecord(seq=self._seq, turn=turn, end=end, sequence=sequence))

    def message(self, message: Message, code: str | None = None) -> None:
        if type(message) is ToolResultMessage:
            self._write(ToolResultRecord(seq=self._seq, result=message, code=code))
        else:
            self._write(MessageRecord(seq=self._seq, message=message))

    def compacted(self, messages: tuple[Message, ...]) -> None:
        self._write(CompactedRecord(seq=self._seq, messages=messages))

    def step_started(self, request_id: str) -> None:
        self._write(StepStartRecord(seq=self._seq, request_id=request_id))

    def step_ended(self, request_id: str, stop_reason: str, usage: Usage | None = None) -> None:
        self._write(
            StepEndRecord(
                seq=self._seq, request_id=request_id, stop_reason=stop_reason, usage=usage
            )
        )

    def tool_call(self, call: ToolCall) -> None:
        self._write(ToolCallRecord(seq=self._seq, call_id=call.id))

    def tool_skipped(self, call: ToolCall) -> None:
        self._write(ToolSkippedRecord(seq=self._seq, call_id=call.id))

    def attempt_failed(
        self, request_id: str, attempt: int, error: str, retry_in: float | None
    ) -> None:
        self._write(
            AttemptFailedRecord(
                seq=self._seq,
                request_id=request_id,
                attempt=attempt,
                error=error,
                retry_in=retry_in,
            )
        )

    # -- durability
    async def barrier(self, point: Literal["event", "step", "turn"]) -> None:
        """Wait until the records so far are as durable as the policy asks at ``point``."""
        durable = self._event_durable if point == "event" else self._step_durable
        await self._writer.flush(durable)

    async def aclose(self) -> None:
        """Make everything durable (unless the policy is ``never``) and close the writer."""
        await self._writer.flush(self._step_durable)
        await self._writer.aclose()


@attrs.define(eq=False)
class DerivedSession:
    """What the records say: the transcript, the counters, and what was left open."""

    session_id: str
    system: str
    messages: list[Message]
    turns: int
    requests: int
    sequence: int
    next_seq: int
    open_turn: int | None
    dispatched: set[str]

    def closed_messages(self) -> list[Message]:
        """The transcript with ``closing_results`` in their calls' places."""
        closed = Conversation(list(self.messages), _Linker())
        for message in self.messages:
            closed.linker.add(message)
        closed._find_batch()
        for result, _ in self.closing_results():
            closed.append(result)
        return closed.messages

    def closing_results(self) -> list[tuple[ToolResultMessage, str]]:
        """Explicit results for the calls of the last assistant message left without one.

        ``TOOL_NOT_STARTED`` when no ``tool/call`` was recorded,
        ``TOOL_OUTCOME_UNKNOWN`` when it was. Nothing is ever re-run.
        """
        answered = {m.tool_call_id for m in self.messages if type(m) is ToolResultMessage}
        last = next((m for m in reversed(self.messages) if type(m) is AssistantMessage), None)
        if last is None:
            return []
        closing = []
        for block in last.content:
            if type(block) is ToolCall and block.id not in answered:
                code = TOOL_OUTCOME_UNKNOWN if block.id in self.dispatched else TOOL_NOT_STARTED
                closing.append((tool_result(block, _CLOSING_TEXT[code], True), code))
        return closing


def derive(records: Iterable[Record]) -> DerivedSession:
    """Replay ``records``: check ``seq`` is contiguous from 0 and the transcript valid.

    Raises ``LedgerCorruptError`` for a gap, a missing ``session/start``, an
    unknown format, or records that do not make a valid transcript (a
    transcript cut after a tool call is valid here: calls may be open).
    """
    session: DerivedSession | None = None
    conversation = Conversation([], _Linker())  # the live transcript's own rules
    expected = 0
    for record in records:
        if record.seq != expected:
            raise LedgerCorruptError(f"record seq {record.seq} where {expected} was expected")
        expected += 1
        kind = type(record)
        if session is None:
            if kind is not SessionStartRecord:
                raise LedgerCorruptError("the ledger does not begin with session/start")
            if record.format != FORMAT_VERSION:  # type: ignore[union-attr]
                raise LedgerCorruptError(
                    f"ledger format {record.format} is not {FORMAT_VERSION}"  # type: ignore[union-attr]
                )
            session = DerivedSession(
                session_id=record.session_id,  # type: ignore[union-attr]
                system=record.system,  # type: ignore[union-attr]
                messages=conversation.messages,
                turns=0,
                requests=record.first_request - 1,  # type: ignore[union-attr]
                sequence=record.first_sequence,  # type: ignore[union-attr]
                next_seq=0,
                open_turn=None,
                dispatched=set(),
            )
            continue
        try:
            if kind is MessageRecord:
                conversation.append(record.message)  # type: ignore[union-attr]
            elif kind is ToolResultRecord:
                # recorded as calls complete; placed in call order, as live
                conversation.append(record.result)  # type: ignore[union-attr]
            elif kind is ToolCallRecord:
                session.dispatched.add(record.call_id)  # type: ignore[union-attr]
            elif kind is ToolSkippedRecord:
                session.dispatched.discard(record.call_id)  # type: ignore[union-attr]
            elif kind is StepStartRecord:
                session.requests += 1
            elif kind is TurnStartRecord:
                session.turns = record.turn  # type: ignore[union-attr]
                session.open_turn = record.turn  # type: ignore[union-attr]
                session.sequence = record.sequence  # type: ignore[union-attr]
            elif kind is TurnEndRecord:
                session.open_turn = None
                session.sequence = record.sequence  # type: ignore[union-attr]
            elif kind is CompactedRecord:
                conversation.replace(record.messages)  # type: ignore[union-attr]
                session.messages = conversation.messages
        except TranscriptError as exc:
            raise LedgerCorruptError(f"record {record.seq}: {exc}") from None
    if session is None:
        raise LedgerCorruptError("the ledger is empty")
    session.next_seq = expected
    return session


def encode_records(records: Sequence[Record]) -> bytes:
    """Records as JSON lines."""
    return b"".join(record_encoder.encode(r) + b"\n" for r in records)
