"""Events a run emits, and the results it ends with.

Every event carries ``sequence``: 0, 1, 2, ... with no gap across all kinds,
stamped by the one counter the run owns. Results are tagged by ``status``.
All of them are frozen msgspec Structs, so ``msgspec.json.encode`` works on
each and ``msgspec.json.decode(data, type=Event)`` reads them back.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from msgspec import Struct

from ._errors import INTERNAL_ERROR as INTERNAL_ERROR
from ._errors import INVALID_TRANSCRIPT as INVALID_TRANSCRIPT
from ._errors import MODEL_ERROR as MODEL_ERROR
from ._errors import MODEL_PROTOCOL_ERROR as MODEL_PROTOCOL_ERROR
from ._errors import TOOL_FATAL as TOOL_FATAL
from ._errors import FailureCode as FailureCode
from .messages import Message, ToolCall, ToolResultMessage
from .model import Chunk, Usage

__all__ = [
    "AttemptFailed",
    "Cancelled",
    "Completed",
    "Event",
    "Failed",
    "FailureCode",
    "MaxSteps",
    "MessageAccepted",
    "ModelChunk",
    "RunFinished",
    "RunResult",
    "ContextCompacted",
    "SessionEvent",
    "ToolFinished",
    "ToolStarted",
    "ToolUpdated",
    "TurnBlocked",
    "TurnCancelled",
    "TurnCompleted",
    "TurnEnd",
    "TurnFailed",
    "TurnFinished",
    "TurnInterrupted",
    "TurnLength",
    "TurnMaxSteps",
    "TurnRepeatedFailure",
    "TurnResult",
    "TurnStarted",
    "TurnTokenBudget",
]

# ----------------------------------------------------------------- results


# gc=False: plain data, never in a cycle (see messages.py).
class _Result(Struct, frozen=True, gc=False, kw_only=True, tag_field="status"):
    """Fields every result has: the run's complete messages and the requests it opened."""

    messages: tuple[Message, ...]
    steps: int


class Completed(_Result, frozen=True, tag="completed"):
    """The model stopped (``stop``) or ran out of output tokens (``length``)."""

    status: ClassVar[Literal["completed"]] = "completed"
    final_text: str
    stop_reason: Literal["stop", "length"]


class Cancelled(_Result, frozen=True, tag="cancelled"):
    """The run was cancelled; ``messages`` holds only complete messages."""

    status: ClassVar[Literal["cancelled"]] = "cancelled"


class MaxSteps(_Result, frozen=True, tag="max_steps"):
    """The step budget was spent; the last step's tool batch did complete."""

    status: ClassVar[Literal["max_steps"]] = "max_steps"
    max_steps: int


class Failed(_Result, frozen=True, tag="failed"):
    """The run failed; ``code`` is a stable string, ``detail`` says what happened."""

    status: ClassVar[Literal["failed"]] = "failed"
    code: str
    detail: str


RunResult = Completed | Cancelled | MaxSteps | Failed

# ------------------------------------------------------------------ events


class _Event(Struct, frozen=True, gc=False, kw_only=True, tag_field="type"):
    """Every event's place in the run's one total order."""

    sequence: int


class MessageAccepted(_Event, frozen=True, tag="message.accepted"):
    """An initial message the run took into its transcript."""

    type: ClassVar[Literal["message.accepted"]] = "message.accepted"
    message: Message


class ModelChunk(_Event, frozen=True, tag="model.chunk"):
    """A valid chunk of the stream answering ``request_id``, as it arrived.

    ``attempt`` counts from 1; chunks of an attempt that later failed are
    followed by ``attempt.failed`` and never reach the transcript.
    """

    type: ClassVar[Literal["model.chunk"]] = "model.chunk"
    request_id: str
    chunk: Chunk
    attempt: int = 1


class ToolStarted(_Event, frozen=True, tag="tool.started"):
    """A tool call is about to run."""

    type: ClassVar[Literal["tool.started"]] = "tool.started"
    call: ToolCall


class ToolFinished(_Event, frozen=True, tag="tool.finished"):
    """A tool call returned; ``result`` is already in the transcript."""

    type: ClassVar[Literal["tool.finished"]] = "tool.finished"
    call: ToolCall
    result: ToolResultMessage


class ToolUpdated(_Event, frozen=True, tag="tool.updated"):
    """Progress a running tool call reported (``ToolContext.report``); bounded in rate
    and size, never after the call's ``tool.finished``."""

    type: ClassVar[Literal["tool.updated"]] = "tool.updated"
    call: ToolCall
    message: str
    fraction: float | None = None


class RunFinished(_Event, frozen=True, tag="run.finished"):
    """The last event of every run; ``result`` equals ``run.result``."""

    type: ClassVar[Literal["run.finished"]] = "run.finished"
    result: RunResult


Event = MessageAccepted | ModelChunk | ToolStarted | ToolUpdated | ToolFinished | RunFinished


class AttemptFailed(_Event, frozen=True, tag="attempt.failed"):
    """An attempt at ``request_id`` failed; it is retried after ``retry_in``
    seconds, or, with ``retry_in=None``, given up (the turn fails next).

    The ``chunks`` model.chunk events of that attempt are void: they never
    become part of the transcript. (Emitted only by layers that retry.)
    """

    type: ClassVar[Literal["attempt.failed"]] = "attempt.failed"
    request_id: str
    attempt: int
    error: str
    chunks: int
    retry_in: float | None


# ----------------------------------------------------------- session turns


class _TurnEnd(Struct, frozen=True, gc=False, kw_only=True, tag_field="reason"):
    """Why a session turn ended; tagged by ``reason``."""


class TurnCompleted(_TurnEnd, frozen=True, tag="completed"):
    """The model stopped, and no queued input continued the turn."""

    reason: ClassVar[Literal["completed"]] = "completed"


class TurnLength(_TurnEnd, frozen=True, tag="length"):
    """A step ended on the model's output limit (sticky: later steps cannot undo it)."""

    reason: ClassVar[Literal["length"]] = "length"


class TurnMaxSteps(_TurnEnd, frozen=True, tag="max_steps"):
    """The per-turn step budget was spent."""

    reason: ClassVar[Literal["max_steps"]] = "max_steps"
    max_steps: int


class TurnTokenBudget(_TurnEnd, frozen=True, tag="token_budget"):
    """The turn's tokens (input plus output, from ``Usage``) reached the budget."""

    reason: ClassVar[Literal["token_budget"]] = "token_budget"
    used: int
    limit: int


class TurnRepeatedFailure(_TurnEnd, frozen=True, tag="repeated_failure"):
    """The same call (tool and arguments) failed ``count`` times in a row."""

    reason: ClassVar[Literal["repeated_failure"]] = "repeated_failure"
    tool_name: str
    count: int


class TurnBlocked(_TurnEnd, frozen=True, tag="blocked"):
    """A hook (``should_stop_turn``) stopped the turn."""

    reason: ClassVar[Literal["blocked"]] = "blocked"
    detail: str


class TurnCancelled(_TurnEnd, frozen=True, tag="cancelled"):
    """The turn was cancelled; queued input stays queued."""

    reason: ClassVar[Literal["cancelled"]] = "cancelled"


class TurnInterrupted(_TurnEnd, frozen=True, tag="interrupted"):
    """The process stopped mid-turn; a resume closed the turn (recorded in the ledger)."""

    reason: ClassVar[Literal["interrupted"]] = "interrupted"


class TurnFailed(_TurnEnd, frozen=True, tag="failed"):
    """The turn failed; ``code`` is a stable string (``MODEL_ERROR``, ``HOOK_ERROR``,
    ``CONTEXT_OVERFLOW``, ``MODEL_PROTOCOL_ERROR``, ``TOOL_FATAL``)."""

    reason: ClassVar[Literal["failed"]] = "failed"
    code: str
    detail: str


TurnEnd = (
    TurnCompleted
    | TurnLength
    | TurnMaxSteps
    | TurnTokenBudget
    | TurnRepeatedFailure
    | TurnBlocked
    | TurnCancelled
    | TurnInterrupted
    | TurnFailed
)


class TurnResult(Struct, frozen=True, gc=False, kw_only=True):
    """What one session turn did: why it ended, its steps and tokens, its final text.

    ``messages`` is the whole session transcript after the turn.
    """

    turn: int
    end: TurnEnd
    steps: int
    final_text: str
    usage: Usage
    messages: tuple[Message, ...]


class TurnStarted(_Event, frozen=True, tag="turn.started"):
    """A session turn began; its input follows as ``message.accepted`` events."""

    type: ClassVar[Literal["turn.started"]] = "turn.started"
    turn: int


class TurnFinished(_Event, frozen=True, tag="turn.finished"):
    """The last event of a session turn."""

    type: ClassVar[Literal["turn.finished"]] = "turn.finished"
    turn: int
    result: TurnResult


class ContextCompacted(_Event, frozen=True, tag="context.compacted"):
    """The ``compact`` hook replaced the transcript to make ``request_id`` fit."""

    type: ClassVar[Literal["context.compacted"]] = "context.compacted"
    request_id: str
    messages: tuple[Message, ...]


SessionEvent = (
    MessageAccepted
    | ModelChunk
    | ToolStarted
    | ToolUpdated
    | ToolFinished
    | AttemptFailed
    | TurnStarted
    | TurnFinished
    | ContextCompacted
)
