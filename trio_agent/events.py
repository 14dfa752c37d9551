"""Events a run emits, and the results it ends with.

Every event carries ``sequence``: 0, 1, 2, ... with no gap across all kinds,
stamped by the one counter the run owns. Results are tagged by ``status``.
All of them are frozen msgspec Structs, so ``msgspec.json.encode`` works on
each and ``msgspec.json.decode(data, type=Event)`` reads them back.
"""

from __future__ import annotations

from typing import ClassVar, Final, Literal

from msgspec import Struct

from .messages import Message, ToolCall, ToolResultMessage
from .model import Chunk

__all__ = [
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
    "ToolFinished",
    "ToolStarted",
]

# ----------------------------------------------------------------- results


class Completed(Struct, frozen=True, kw_only=True, tag_field="status", tag="completed"):
    """The model stopped (``stop``) or ran out of output tokens (``length``)."""

    status: ClassVar[str] = "completed"
    messages: tuple[Message, ...]
    steps: int
    final_text: str
    stop_reason: Literal["stop", "length"]


class Cancelled(Struct, frozen=True, kw_only=True, tag_field="status", tag="cancelled"):
    """The run was cancelled; ``messages`` holds only complete messages."""

    status: ClassVar[str] = "cancelled"
    messages: tuple[Message, ...]
    steps: int


class MaxSteps(Struct, frozen=True, kw_only=True, tag_field="status", tag="max_steps"):
    """The step budget was spent; the last step's tool batch did complete."""

    status: ClassVar[str] = "max_steps"
    messages: tuple[Message, ...]
    steps: int
    max_steps: int


FailureCode = Literal["INVALID_TRANSCRIPT", "MODEL_PROTOCOL_ERROR", "MODEL_ERROR", "TOOL_FATAL"]

INVALID_TRANSCRIPT: Final = "INVALID_TRANSCRIPT"
MODEL_PROTOCOL_ERROR: Final = "MODEL_PROTOCOL_ERROR"
MODEL_ERROR: Final = "MODEL_ERROR"
TOOL_FATAL: Final = "TOOL_FATAL"


class Failed(Struct, frozen=True, kw_only=True, tag_field="status", tag="failed"):
    """The run failed; ``code`` is a stable string, ``detail`` says what happened."""

    status: ClassVar[str] = "failed"
    messages: tuple[Message, ...]
    steps: int
    code: str
    detail: str


RunResult = Completed | Cancelled | MaxSteps | Failed

# ------------------------------------------------------------------ events


class MessageAccepted(Struct, frozen=True, kw_only=True, tag_field="type", tag="message.accepted"):
    """An initial message the run took into its transcript."""

    type: ClassVar[str] = "message.accepted"
    sequence: int
    message: Message


class ModelChunk(Struct, frozen=True, kw_only=True, tag_field="type", tag="model.chunk"):
    """A valid chunk of the stream answering ``request_id``, as it arrived."""

    type: ClassVar[str] = "model.chunk"
    sequence: int
    request_id: str
    chunk: Chunk


class ToolStarted(Struct, frozen=True, kw_only=True, tag_field="type", tag="tool.started"):
    """A tool call is about to run."""

    type: ClassVar[str] = "tool.started"
    sequence: int
    call: ToolCall


class ToolFinished(Struct, frozen=True, kw_only=True, tag_field="type", tag="tool.finished"):
    """A tool call returned; ``result`` is already in the transcript."""

    type: ClassVar[str] = "tool.finished"
    sequence: int
    call: ToolCall
    result: ToolResultMessage


class RunFinished(Struct, frozen=True, kw_only=True, tag_field="type", tag="run.finished"):
    """The last event of every run; ``result`` equals ``run.result``."""

    type: ClassVar[str] = "run.finished"
    sequence: int
    result: RunResult


Event = MessageAccepted | ModelChunk | ToolStarted | ToolFinished | RunFinished
