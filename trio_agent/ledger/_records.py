"""The ledger's records: what a session's JSONL lines (or rows) hold (its errors,
``_errors``'s, are re-exported here).

Every record is a frozen msgspec Struct tagged by ``kind`` with a ``seq``
that runs 0, 1, 2, ... through the session. Fields added after the first
release have defaults, so older ledgers load unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Literal

import msgspec
from msgspec import Meta, Struct

from .._settings import ModelSettings
from ..events import ApprovalDecision, TurnEnd
from ..messages._ir import Message, ToolCall, ToolResultMessage
from ..model import Usage
from ._errors import LeaseLostError as LeaseLostError
from ._errors import LedgerCorruptError as LedgerCorruptError
from ._errors import LedgerError as LedgerError
from ._errors import SessionChangedError as SessionChangedError
from ._errors import SessionExistsError as SessionExistsError
from ._errors import SessionLockedError as SessionLockedError
from ._errors import SessionNotFoundError as SessionNotFoundError
from ._errors import session_exists as session_exists

__all__ = [
    "FORMAT_VERSION",
    "ApprovalDecidedRecord",
    "ApprovalRequestedRecord",
    "AttemptFailedRecord",
    "CompactedRecord",
    "EventsReservedRecord",
    "LedgerCorruptError",
    "LedgerError",
    "MessageRecord",
    "OutputRecord",
    "Record",
    "SessionChangedError",
    "SessionClosedRecord",
    "SessionExistsError",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionStartRecord",
    "SnapshotRecord",
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
    "LeaseLostError",
]

FORMAT_VERSION: Final = 1


# Field descriptions (the JSON Schema's); one constant per meaning that recurs.
_TURN: Final = Meta(
    description="The turn's number in its session, counting from 1 (resumes continue it)."
)
_REQUEST_ID: Final = Meta(
    description='The step\'s model request id: "request-" then its number, at least 3 digits.'
)
_CALL_ID: Final = Meta(description="The id of the tool call, as in its assistant message.")
_ERROR: Final = Meta(description="What went wrong, as text.")


class _Record(Struct, frozen=True, kw_only=True, tag_field="kind"):
    seq: Annotated[
        int,
        Meta(
            description="This record's position in the ledger: 0 for session/start, then one "
            "more per record, with no gap."
        ),
    ]


class SessionStartRecord(_Record, frozen=True, tag="session/start"):
    """The first record: the format version and what the session was created with.

    ``metadata``: the run configuration the application recorded
    (``Agent(metadata=...)``, plain JSON, never a secret); ``{}`` in older ledgers.
    """

    kind: ClassVar[Literal["session/start"]] = "session/start"
    format: Annotated[int, Meta(description="The ledger format's version (1, the only one).")]
    session_id: Annotated[str, Meta(description="The session's id.")]
    created: Annotated[
        float, Meta(description="When the session was created: seconds since the Unix epoch.")
    ]
    system: Annotated[
        str, Meta(description='The system prompt the session was created with; "" for none.')
    ] = ""
    first_request: Annotated[
        int, Meta(description="The number of the session's first model request (request-NNN).")
    ] = 1
    first_sequence: Annotated[
        int, Meta(description="The sequence of the session's first event.")
    ] = 0
    metadata: Annotated[
        dict[str, Any],
        Meta(
            description="The run configuration the application recorded (Agent(metadata=...)): "
            "plain JSON, never a secret."
        ),
    ] = msgspec.field(default_factory=dict)


class SessionClosedRecord(_Record, frozen=True, tag="session/closed"):
    """``Agent.aclose()`` closed the session cleanly; ``sequence`` is where the next
    events start. A ledger that does not end with one was left by a process that died
    (or is still being written)."""

    kind: ClassVar[Literal["session/closed"]] = "session/closed"
    sequence: Annotated[int, Meta(description="The sequence the session's next event will carry.")]


class EventsReservedRecord(_Record, frozen=True, tag="events/reserved"):
    """Event sequences below ``until`` may be handed out by this writer. Written before
    the first event past the previous reservation, so a resume after a crash starts
    numbering above every event a consumer of the dead process can have seen."""

    kind: ClassVar[Literal["events/reserved"]] = "events/reserved"
    until: Annotated[
        int,
        Meta(
            description="The writer may send events numbered below this; a resume after a crash "
            "numbers from here."
        ),
    ]


class TurnStartRecord(_Record, frozen=True, tag="turn/start"):
    """A turn began; ``sequence`` is the event sequence of its ``turn.started``;
    ``model`` labels the model that ran it (``"provider:model"`` for the provider
    adapters, else the model's class name; ``""`` in older ledgers)."""

    kind: ClassVar[Literal["turn/start"]] = "turn/start"
    turn: Annotated[int, _TURN]
    sequence: Annotated[int, Meta(description="The sequence of the turn's turn.started event.")]
    model: Annotated[
        str,
        Meta(
            description='The model that ran the turn: "provider:model" for the provider '
            'adapters, else its class\'s qualified name; "" in older ledgers.'
        ),
    ] = ""


class TurnEndRecord(_Record, frozen=True, tag="turn/end"):
    """The end of a turn (``interrupted`` when a resume closed it); ``sequence`` is
    where the next turn's events start (after an interrupted turn: above every
    sequence the dead process had reserved)."""

    kind: ClassVar[Literal["turn/end"]] = "turn/end"
    turn: Annotated[int, _TURN]
    end: Annotated[TurnEnd, Meta(description="Why the turn ended.")]
    sequence: Annotated[
        int,
        Meta(
            description="Where the next turn's events start: one past turn.finished (after an "
            "interrupted turn, above every sequence the dead writer reserved)."
        ),
    ]


class StepStartRecord(_Record, frozen=True, tag="step/start"):
    """A model request is about to be opened; stored before it is."""

    kind: ClassVar[Literal["step/start"]] = "step/start"
    request_id: Annotated[str, _REQUEST_ID]
    settings: Annotated[
        ModelSettings | None,
        Meta(description="The settings the request is sent with; null for none (older ledgers)."),
    ] = None


class StepEndRecord(_Record, frozen=True, tag="step/end"):
    """A step's tool batch is done. (``usage`` is read from older ledgers only: a
    response's usage is recorded with its message.)"""

    kind: ClassVar[Literal["step/end"]] = "step/end"
    request_id: Annotated[str, _REQUEST_ID]
    stop_reason: Annotated[
        str,
        Meta(
            description="How the step's response stopped: stop, tool_call, length, refusal or "
            "content_filter."
        ),
    ]
    usage: Annotated[
        Usage | None,
        Meta(description="The response's usage, in older ledgers only; null in newer ones."),
    ] = None


class MessageRecord(_Record, frozen=True, tag="message", omit_defaults=True):
    """A user or assistant message as it joined the transcript; an assistant
    message carries the usage of the response it came from, and, when a
    ``FallbackModel`` ran the turn, the model that gave it."""

    kind: ClassVar[Literal["message"]] = "message"
    message: Annotated[
        Message, Meta(description="The user or assistant message that joined the transcript.")
    ]
    usage: Annotated[
        Usage | None,
        Meta(
            description="For an assistant message the loop made: what the provider reported for "
            "its response; null otherwise."
        ),
    ] = None
    model: Annotated[
        str,
        Meta(
            description="The model that gave this answer when it was one of a FallbackModel's "
            '("provider:model", as turn/start names models); "" (left out) otherwise: the '
            "turn's model."
        ),
    ] = ""


class AttemptFailedRecord(_Record, frozen=True, tag="attempt/failed", omit_defaults=True):
    """A failed model attempt; never part of the transcript. ``usage``: what the
    provider reported for a response that arrived but was refused."""

    kind: ClassVar[Literal["attempt/failed"]] = "attempt/failed"
    request_id: Annotated[str, _REQUEST_ID]
    attempt: Annotated[
        int, Meta(description="The attempt that failed, counting from 1 for each request.")
    ]
    error: Annotated[str, _ERROR]
    retry_in: Annotated[
        float | None,
        Meta(
            description="Seconds until the next attempt; null when none followed (the step failed)."
        ),
    ]
    usage: Annotated[
        Usage | None,
        Meta(
            description="What the provider reported for a response that arrived but was "
            "refused; null otherwise."
        ),
    ] = None
    model: Annotated[
        str,
        Meta(
            description='The model of this attempt when a FallbackModel ran the turn ("provider:'
            'model"); "" (left out) otherwise: the turn\'s model.'
        ),
    ] = ""


class ToolCallRecord(_Record, frozen=True, tag="tool/call", omit_defaults=True):
    """Written just before the call is dispatched (the call itself is in its assistant message)."""

    kind: ClassVar[Literal["tool/call"]] = "tool/call"
    call_id: Annotated[str, _CALL_ID]
    effect: Annotated[
        Literal["once", "idempotent", "pure"],
        Meta(
            description="What running the call twice does (its tool's effect): a call "
            "dispatched with no recorded end is run again on resume unless it is once."
        ),
    ] = "once"
    rerun: Annotated[
        bool,
        Meta(
            description="The call is dispatched again: its first dispatch (an idempotent or "
            "pure call) ended with its process, outcome unknown."
        ),
    ] = False


class ToolSkippedRecord(_Record, frozen=True, tag="tool/skipped"):
    """A call recorded by ``tool/call`` was not dispatched after all (cancelled first)."""

    kind: ClassVar[Literal["tool/skipped"]] = "tool/skipped"
    call_id: Annotated[str, _CALL_ID]


class ToolCancelledRecord(_Record, frozen=True, tag="tool/cancelled"):
    """A dispatched call was cancelled and ended without a result (it may have done
    part of its work)."""

    kind: ClassVar[Literal["tool/cancelled"]] = "tool/cancelled"
    call_id: Annotated[str, _CALL_ID]


class ToolFailedRecord(_Record, frozen=True, tag="tool/failed"):
    """A dispatched call failed fatally (``FatalToolError``) and has no result."""

    kind: ClassVar[Literal["tool/failed"]] = "tool/failed"
    call_id: Annotated[str, _CALL_ID]
    error: Annotated[str, _ERROR]


class ToolResultRecord(_Record, frozen=True, tag="tool/result"):
    """A tool result as it joined the transcript; ``code`` marks one a resume wrote."""

    kind: ClassVar[Literal["tool/result"]] = "tool/result"
    result: Annotated[
        ToolResultMessage, Meta(description="The tool result message that joined the transcript.")
    ]
    code: Annotated[
        str | None,
        Meta(
            description="For a result a resume wrote for a call left open: TOOL_NOT_STARTED, "
            "TOOL_CANCELLED, TOOL_FATAL or TOOL_OUTCOME_UNKNOWN; else null."
        ),
    ] = None


class OutputRecord(_Record, frozen=True, tag="turn/output"):
    """A turn's typed answer (``output_type=``) was accepted: written after the
    step that gave it and before the turn's ``turn/end``. ``output`` is the value
    as JSON (``msgspec.to_builtins``); a value that has no JSON form (one an
    ``output_validator`` returned) is recorded as null with ``error`` saying why.
    Bookkeeping only: never part of the transcript."""

    kind: ClassVar[Literal["turn/output"]] = "turn/output"
    turn: Annotated[int, _TURN]
    request_id: Annotated[
        str,
        Meta(
            description='The request of the step whose answer was accepted: "request-" then '
            "its number, at least 3 digits."
        ),
    ]
    output: Annotated[
        Any,
        Meta(description="The accepted output as JSON; null when it has no JSON form (error)."),
    ] = None
    error: Annotated[
        str | None,
        Meta(
            description="Why the output could not be recorded as JSON (a value msgspec cannot "
            "encode); null when it was."
        ),
    ] = None


class CompactedRecord(_Record, frozen=True, tag="context/compacted"):
    """The transcript was replaced by ``messages`` (compaction)."""

    kind: ClassVar[Literal["context/compacted"]] = "context/compacted"
    messages: Annotated[
        tuple[Message, ...],
        Meta(description="The transcript as compact returned it: it replaced the whole one."),
    ]


class ApprovalRequestedRecord(_Record, frozen=True, tag="approval/requested"):
    """A call of the open step needs a person's approval: it is held, not run, and
    stays unanswered in the transcript until a later turn resolves it (after its
    ``approval/decided``). Written in the step, after the assistant message that
    makes the call; ``call_id``, ``name`` and ``arguments`` repeat that call's."""

    kind: ClassVar[Literal["approval/requested"]] = "approval/requested"
    turn: Annotated[int, _TURN]
    call_id: Annotated[str, _CALL_ID]
    name: Annotated[str, Meta(description="The name of the tool the call is to.")]
    arguments: Annotated[
        dict[str, Any],
        Meta(description="The call's arguments, as in its assistant message."),
    ]

    @property
    def call(self) -> ToolCall:
        """The held call, as its assistant message has it."""
        return ToolCall(self.call_id, self.name, self.arguments)


class ApprovalDecidedRecord(_Record, frozen=True, tag="approval/decided"):
    """A person's decision on a held call (``agent.approve``/``reject``): once per
    call, after its ``approval/requested`` and before its result; usually between
    turns. Only an approved call may have a ``tool/call``; a rejected one is
    answered by an error result carrying ``reason``."""

    kind: ClassVar[Literal["approval/decided"]] = "approval/decided"
    call_id: Annotated[str, Meta(description="The id of the held call decided on.")]
    approved: Annotated[
        bool,
        Meta(
            description="True: the call may run (once); false (and when absent): it is "
            "rejected and never runs."
        ),
    ] = False
    reason: Annotated[
        str, Meta(description='Why; a rejection\'s reason is in its error result. "" for none.')
    ] = ""
    by: Annotated[
        str, Meta(description='Who decided, as the application names them; "" when not said.')
    ] = ""
    at: Annotated[
        float,
        Meta(description="When it was decided: seconds since the Unix epoch."),
    ] = 0.0
    arguments: Annotated[
        dict[str, Any] | None,
        Meta(
            description="Arguments the approver set for the call to run with, in place of the "
            "model's; null: as the model asked."
        ),
    ] = None
    seal: Annotated[
        str | None,
        Meta(
            description="The approver's seal on the decision and the call it decides "
            "(trio-agent approve: an HMAC-SHA256 hex digest under the user's key); null or "
            "absent: unsealed. trio-agent resume asks again about an approval it cannot verify."
        ),
    ] = None

    @classmethod
    def of(cls, seq: int, decision: ApprovalDecision) -> ApprovalDecidedRecord:
        """The record of ``decision``, numbered ``seq``."""
        return cls(
            seq=seq,
            call_id=decision.call_id,
            approved=decision.approved,
            reason=decision.reason,
            by=decision.by,
            at=decision.at,
            arguments=decision.arguments,
            seal=decision.seal,
        )

    @property
    def decision(self) -> ApprovalDecision:
        """The decision as the agent keeps it."""
        return ApprovalDecision(
            call_id=self.call_id,
            approved=self.approved,
            reason=self.reason,
            by=self.by,
            at=self.at,
            arguments=self.arguments,
            seal=self.seal,
        )


class SnapshotRecord(_Record, frozen=True, tag="snapshot"):
    """What the records before it derive to, written right after a ``turn/end``
    (the store's snapshot policy says which ones), so a resume replays from here
    instead of from ``session/start``. A cache, never history: every record
    before it stays, and a full replay only checks that it stands between turns.
    ``state`` is kept as raw JSON (decoded only by a resume that starts here), so
    loading the whole ledger (``show``, ``fork``) never decodes it."""

    kind: ClassVar[Literal["snapshot"]] = "snapshot"
    state: Annotated[
        msgspec.Raw,
        Meta(
            description="The replay's state after the record before this one: the transcript "
            "(the current context), counters, usage, outputs, open and held calls."
        ),
    ]
    crc32: Annotated[
        int | None,
        Meta(
            description="The CRC-32 of the state's JSON bytes, as written: the blocks of a "
            "state whose bytes still match were checked when its session wrote it, and are "
            "not checked again (its links and ids are); absent from older ledgers, whose "
            "state is checked whole as it is restored."
        ),
    ] = None


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
    | OutputRecord
    | ApprovalRequestedRecord
    | ApprovalDecidedRecord
    | SnapshotRecord
)

record_decoder: Final = msgspec.json.Decoder(Record)
record_encoder: Final = msgspec.json.Encoder()


def encode_records(records: list[Record] | tuple[Record, ...]) -> bytes:
    """Records as JSON lines."""
    return record_encoder.encode_lines(records)
