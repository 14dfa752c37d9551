"""Events a run emits, and the results it ends with.

Every event carries ``sequence``: 0, 1, 2, ... with no gap across all kinds,
stamped by the one counter the run owns. Results are tagged by ``status``.
All of them are frozen msgspec Structs, so ``msgspec.json.encode`` works on
each (given ``enc_hook=tuple`` for a session's, whose transcript is a
``Transcript``) and ``msgspec.json.decode(data, type=Event)`` reads them back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final, Generic, Literal, TypeVar

from msgspec import Meta, Struct

from .errors import INTERNAL_ERROR as INTERNAL_ERROR
from .errors import INVALID_TRANSCRIPT as INVALID_TRANSCRIPT
from .errors import MODEL_ERROR as MODEL_ERROR
from .errors import MODEL_PROTOCOL_ERROR as MODEL_PROTOCOL_ERROR
from .errors import TOOL_FATAL as TOOL_FATAL
from .errors import FailureCode as FailureCode
from .messages._ir import Message, ToolCall, ToolResultMessage
from .messages._view import MessageSequence
from .model import Chunk, Usage

__all__ = [
    "ApprovalDecision",
    "ApprovalDecided",
    "ApprovalRequested",
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
    "TurnAwaitingApproval",
    "TurnBlocked",
    "TurnCancelled",
    "TurnCompleted",
    "TurnEnd",
    "TurnFailed",
    "TurnFinished",
    "TurnInterrupted",
    "TurnContentFilter",
    "TurnLength",
    "TurnMaxSteps",
    "TurnRefusal",
    "TurnRepeatedFailure",
    "TurnResult",
    "TurnStarted",
    "TurnTokenBudget",
    "TurnUsageLimit",
    "UsageLimitName",
]

# Field descriptions (the JSON Schema's, via ``Annotated``); one constant per meaning
# that recurs. msgspec reads them only when it builds a schema, encoder or decoder.
_SEQUENCE: Final = Meta(
    description="Position of this event in the one total order of its run (of its session, "
    "across turns): one more than the previous event's, whatever its kind; a session "
    "resumed after a crash starts above every number the dead process could have sent."
)
_REQUEST_ID: Final = Meta(
    description='The model request\'s id: "request-" then its number, at least 3 digits '
    "(request-001, request-002, ... through the run or session); its retries keep it."
)
_CALL: Final = Meta(description="The tool call, as in the assistant message that asked for it.")
_TURN: Final = Meta(
    description="The turn's number in its session, counting from 1 (resumes continue it)."
)
_CODE: Final = Meta(
    description="A stable failure code to match: INVALID_TRANSCRIPT, MODEL_PROTOCOL_ERROR, "
    "MODEL_ERROR, TOOL_FATAL, HOOK_ERROR, CONTEXT_OVERFLOW, OUTPUT_INVALID or INTERNAL_ERROR."
)
_OUTPUT: Final = Meta(
    description="The typed final answer, decoded as output_type and accepted (null without "
    "output_type, or when the model refused or was filtered)."
)
_DETAIL: Final = Meta(description="What happened, for a person (free text; do not match it).")

# ----------------------------------------------------------------- results


# gc=False: plain data, never in a cycle (see messages.py).
class _Result(Struct, frozen=True, gc=False, kw_only=True, tag_field="status"):
    """Fields every result has: the run's complete messages and the requests it opened."""

    messages: Annotated[
        tuple[Message, ...],
        Meta(
            description="The run's transcript when it ended: complete messages only "
            "(empty when the initial messages were invalid)."
        ),
    ]
    steps: Annotated[int, Meta(description="Model requests the run opened: one per step.")]


if TYPE_CHECKING:  # PEP 696: a bare ``Completed`` is ``Completed[Any]`` to a checker
    from typing_extensions import TypeVar as _TypeVar

    OutputT = _TypeVar("OutputT", default=Any)
else:
    OutputT = TypeVar("OutputT")
"""The type of a typed final answer (``output_type=``)."""


class Completed(_Result, Generic[OutputT], frozen=True, tag="completed"):
    """The model stopped: ``stop``, or ``length`` (out of output tokens),
    ``refusal`` (it declined) or ``content_filter`` (the provider's policy cut
    the answer); only ``stop`` is a clean finish. ``Completed[T]``: ``output``
    is a ``T`` (``output_type=T``)."""

    status: ClassVar[Literal["completed"]] = "completed"
    final_text: Annotated[
        str,
        Meta(
            description="The text blocks of the last assistant message, joined with no separator."
        ),
    ]
    stop_reason: Annotated[
        Literal["stop", "length", "refusal", "content_filter"],
        Meta(
            description="How the model stopped: stop; length at its output-token limit; "
            "refusal when it declined; content_filter when the provider's policy cut it."
        ),
    ]
    output: Annotated[OutputT | None, _OUTPUT] = None


class Cancelled(_Result, frozen=True, tag="cancelled"):
    """The run was cancelled; ``messages`` holds only complete messages."""

    status: ClassVar[Literal["cancelled"]] = "cancelled"


class MaxSteps(_Result, frozen=True, tag="max_steps"):
    """The step budget was spent; the last step's tool batch did complete."""

    status: ClassVar[Literal["max_steps"]] = "max_steps"
    max_steps: Annotated[int, Meta(description="The run's step budget (max_steps), all spent.")]


class Failed(_Result, frozen=True, tag="failed"):
    """The run failed; ``code`` is a stable string, ``detail`` says what happened."""

    status: ClassVar[Literal["failed"]] = "failed"
    code: Annotated[str, _CODE]
    detail: Annotated[str, _DETAIL]


RunResult = Completed | Cancelled | MaxSteps | Failed

# ------------------------------------------------------------------ events


class _Event(Struct, frozen=True, gc=False, kw_only=True, tag_field="type"):
    """Every event's place in the run's one total order."""

    sequence: Annotated[int, _SEQUENCE]


class MessageAccepted(_Event, frozen=True, tag="message.accepted"):
    """An initial message the run took into its transcript."""

    type: ClassVar[Literal["message.accepted"]] = "message.accepted"
    message: Annotated[
        Message,
        Meta(
            description="The message, now in the transcript: an initial message of the run, or "
            "a turn's input (its prompt, steering, a follow-up, or the error result answering "
            "a call left unanswered)."
        ),
    ]


class ModelChunk(_Event, frozen=True, tag="model.chunk"):
    """A valid chunk of the stream answering ``request_id``, as it arrived.

    ``attempt`` counts from 1; chunks of an attempt that later failed are
    followed by ``attempt.failed`` and never reach the transcript.
    """

    type: ClassVar[Literal["model.chunk"]] = "model.chunk"
    request_id: Annotated[str, _REQUEST_ID]
    chunk: Annotated[
        Chunk,
        Meta(
            description="The chunk: a piece of text or of thinking, or a whole tool call or "
            "redacted thinking."
        ),
    ]
    attempt: Annotated[
        int,
        Meta(
            description="The attempt at the request that sent it, counting from 1; an "
            "attempt.failed for the same attempt makes it void."
        ),
    ] = 1


class ToolStarted(_Event, frozen=True, tag="tool.started"):
    """A tool call is about to run."""

    type: ClassVar[Literal["tool.started"]] = "tool.started"
    call: Annotated[ToolCall, _CALL]


class ToolFinished(_Event, frozen=True, tag="tool.finished"):
    """A tool call returned; ``result`` is already in the transcript."""

    type: ClassVar[Literal["tool.finished"]] = "tool.finished"
    call: Annotated[ToolCall, _CALL]
    result: Annotated[
        ToolResultMessage,
        Meta(
            description="The call's result as it joined the transcript (after the "
            "after_tool_call hook and truncation)."
        ),
    ]


class ToolUpdated(_Event, frozen=True, tag="tool.updated"):
    """Progress a running tool call reported (``ToolContext.report``); bounded in rate
    and size, never after the call's ``tool.finished``."""

    type: ClassVar[Literal["tool.updated"]] = "tool.updated"
    call: Annotated[ToolCall, _CALL]
    message: Annotated[
        str, Meta(description="The progress text the tool reported (at most 1000 characters).")
    ]
    fraction: Annotated[
        float | None,
        Meta(description="How much of the work is done, from 0.0 to 1.0; null when not said."),
    ] = None


class RunFinished(_Event, frozen=True, tag="run.finished"):
    """The last event of every run; ``result`` equals ``run.result``."""

    type: ClassVar[Literal["run.finished"]] = "run.finished"
    result: Annotated[RunResult, Meta(description="The run's result, equal to run.result.")]


Event = MessageAccepted | ModelChunk | ToolStarted | ToolUpdated | ToolFinished | RunFinished


class AttemptFailed(_Event, frozen=True, tag="attempt.failed", omit_defaults=True):
    """An attempt at ``request_id`` failed; it is retried after ``retry_in``
    seconds, or, with ``retry_in=None``, given up (the turn fails next).

    The ``chunks`` model.chunk events of that attempt are void: they never
    become part of the transcript. (Emitted only by layers that retry.)
    """

    type: ClassVar[Literal["attempt.failed"]] = "attempt.failed"
    request_id: Annotated[str, _REQUEST_ID]
    attempt: Annotated[
        int, Meta(description="The attempt that failed, counting from 1 for each request.")
    ]
    error: Annotated[str, Meta(description="The model's error, as text.")]
    chunks: Annotated[
        int, Meta(description="How many model.chunk events this attempt sent: all now void.")
    ]
    retry_in: Annotated[
        float | None,
        Meta(
            description="Seconds until the request is tried again (0 when a FallbackModel "
            "moves to its next model); null when it is given up (the turn then fails with "
            "MODEL_ERROR)."
        ),
    ]
    model: Annotated[
        str,
        Meta(
            description="The model of the attempt that failed when a FallbackModel runs the turn "
            '("provider:model"); "" (left out) otherwise: the turn\'s model.'
        ),
    ] = ""


# ----------------------------------------------------------- session turns


class _TurnEnd(Struct, frozen=True, gc=False, kw_only=True, tag_field="reason"):
    """Why a session turn ended; tagged by ``reason``."""


class TurnCompleted(_TurnEnd, frozen=True, tag="completed"):
    """The model stopped, and no queued input continued the turn."""

    reason: ClassVar[Literal["completed"]] = "completed"


class TurnLength(_TurnEnd, frozen=True, tag="length"):
    """A step ended on the model's output limit (sticky: later steps cannot undo it)."""

    reason: ClassVar[Literal["length"]] = "length"


class TurnRefusal(_TurnEnd, frozen=True, tag="refusal"):
    """A step ended in the model's refusal (sticky, like ``length``)."""

    reason: ClassVar[Literal["refusal"]] = "refusal"


class TurnContentFilter(_TurnEnd, frozen=True, tag="content_filter"):
    """The provider's content policy cut a step's answer (sticky, like ``length``)."""

    reason: ClassVar[Literal["content_filter"]] = "content_filter"


class TurnMaxSteps(_TurnEnd, frozen=True, tag="max_steps"):
    """The per-turn step budget was spent."""

    reason: ClassVar[Literal["max_steps"]] = "max_steps"
    max_steps: Annotated[
        int, Meta(description="The per-turn step budget (the Agent's max_steps), all spent.")
    ]


class TurnTokenBudget(_TurnEnd, frozen=True, tag="token_budget"):
    """The turn's tokens (input plus output, from ``Usage``) reached the budget."""

    reason: ClassVar[Literal["token_budget"]] = "token_budget"
    used: Annotated[
        int,
        Meta(description="Input plus output tokens the turn had used at the check, after a step."),
    ]
    limit: Annotated[int, Meta(description="The budget (max_turn_tokens); used is at least it.")]


UsageLimitName = Literal[
    "requests", "input_tokens", "output_tokens", "total_tokens", "tool_calls", "cost"
]
"""The limits of a ``UsageLimits``, by name."""


class TurnUsageLimit(_TurnEnd, frozen=True, tag="usage_limit"):
    """A limit of ``UsageLimits`` was reached: the request that would pass it was not
    sent (``requests``, tokens, ``cost``), or the calls past it got an error result
    saying so (``tool_calls``)."""

    reason: ClassVar[Literal["usage_limit"]] = "usage_limit"
    name: Annotated[
        UsageLimitName,
        Meta(
            description="The limit reached: requests, input_tokens, output_tokens, "
            "total_tokens, tool_calls or cost."
        ),
    ]
    scope: Annotated[
        Literal["turn", "session"],
        Meta(
            description="Whose limit: the turn's (Agent(usage_limits=), or the turn's own) or "
            "the session's (Agent(session_usage_limits=), across its turns and resumes)."
        ),
    ]
    used: Annotated[
        int | float,
        Meta(
            description="What was used at the check (cost in US dollars): at least the limit; "
            "for tool_calls, the count the first call refused would have made (the limit + 1)."
        ),
    ]
    limit: Annotated[int | float, Meta(description="The limit (cost in US dollars).")]


class TurnRepeatedFailure(_TurnEnd, frozen=True, tag="repeated_failure"):
    """The same call (tool and arguments) failed ``count`` times in a row."""

    reason: ClassVar[Literal["repeated_failure"]] = "repeated_failure"
    tool_name: Annotated[str, Meta(description="The name of the tool whose call kept failing.")]
    count: Annotated[
        int,
        Meta(
            description="Error results in a row for that call (same tool, same arguments); at "
            "least max_repeated_failures."
        ),
    ]


class TurnBlocked(_TurnEnd, frozen=True, tag="blocked"):
    """A hook (``should_stop_turn``) stopped the turn."""

    reason: ClassVar[Literal["blocked"]] = "blocked"
    detail: Annotated[
        str, Meta(description='Why it was stopped ("should_stop_turn returned True").')
    ]


class TurnAwaitingApproval(_TurnEnd, frozen=True, tag="awaiting_approval"):
    """Calls of the last step wait for a person's decision (``agent.approve`` /
    ``agent.reject``); the next turn runs or answers them first."""

    reason: ClassVar[Literal["awaiting_approval"]] = "awaiting_approval"
    call_ids: Annotated[
        tuple[str, ...], Meta(description="The calls waiting for a decision, in call order.")
    ]


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
    code: Annotated[str, _CODE]
    detail: Annotated[str, _DETAIL]


TurnEnd = (
    TurnCompleted
    | TurnLength
    | TurnRefusal
    | TurnContentFilter
    | TurnMaxSteps
    | TurnTokenBudget
    | TurnUsageLimit
    | TurnRepeatedFailure
    | TurnBlocked
    | TurnAwaitingApproval
    | TurnCancelled
    | TurnInterrupted
    | TurnFailed
)


class TurnResult(Struct, Generic[OutputT], frozen=True, gc=False, kw_only=True):
    """What one session turn did: why it ended, its steps and tokens, its final text
    (and its typed answer: ``TurnResult[T]`` for ``output_type=T``).

    ``messages`` is the whole session transcript after the turn: a ``Transcript``
    (frozen, read as a tuple is; the session's later results share it, so a
    turn costs the same at any length of history). msgspec encodes it with
    ``enc_hook=tuple`` and decodes it as a tuple, equal to it.
    """

    turn: Annotated[int, _TURN]
    end: Annotated[TurnEnd, Meta(description="Why the turn ended.")]
    steps: Annotated[int, Meta(description="Model requests the turn opened: one per step.")]
    final_text: Annotated[
        str,
        Meta(
            description="The text blocks of the turn's last assistant message, joined with no "
            'separator; "" when the turn got no answer.'
        ),
    ]
    usage: Annotated[
        Usage,
        Meta(
            description="The tokens the turn's answers reported, summed (cache counts "
            "too), and their cost when prices are known."
        ),
    ]
    messages: Annotated[
        MessageSequence,
        Meta(
            description="The whole session transcript after the turn: complete messages only "
            "(a Transcript: frozen, shared with the session's later results, not copied)."
        ),
    ]
    output: Annotated[OutputT | None, _OUTPUT] = None


class TurnStarted(_Event, frozen=True, tag="turn.started"):
    """A session turn began; its input follows as ``message.accepted`` events."""

    type: ClassVar[Literal["turn.started"]] = "turn.started"
    turn: Annotated[int, _TURN]


class TurnFinished(_Event, frozen=True, tag="turn.finished"):
    """The last event of a session turn."""

    type: ClassVar[Literal["turn.finished"]] = "turn.finished"
    turn: Annotated[int, _TURN]
    result: Annotated[
        TurnResult,
        Meta(description="The turn's result, as TurnRun.result and Agent.prompt() give it."),
    ]


class ContextCompacted(_Event, frozen=True, tag="context.compacted"):
    """The ``compact`` hook replaced the transcript to make ``request_id`` fit."""

    type: ClassVar[Literal["context.compacted"]] = "context.compacted"
    request_id: Annotated[str, _REQUEST_ID]
    messages: Annotated[
        tuple[Message, ...],
        Meta(description="The transcript as compact returned it: it replaced the whole one."),
    ]


class ApprovalRequested(_Event, frozen=True, tag="approval.requested"):
    """A call needs a person's approval: it is held (not run) until decided."""

    type: ClassVar[Literal["approval.requested"]] = "approval.requested"
    call: Annotated[ToolCall, _CALL]


class ApprovalDecision(Struct, frozen=True, kw_only=True, gc=False):
    """A person's decision on a held call, as the ledger records it."""

    call_id: Annotated[str, Meta(description="The held call's id.")]
    approved: Annotated[bool, Meta(description="True: run it; False: answer it as rejected.")]
    reason: Annotated[str, Meta(description="Why (a rejection's reason goes to the model).")] = ""
    by: Annotated[str, Meta(description="Who decided, as the application names them.")] = ""
    at: Annotated[float, Meta(description="When, in seconds since the epoch (UTC).")] = 0.0
    arguments: Annotated[
        dict[str, Any] | None,
        Meta(description="Arguments the approver set in place of the model's; null: as asked."),
    ] = None
    seal: Annotated[
        str | None,
        Meta(
            description="The approver's seal on the decision and the call it decides, when "
            "they gave one (trio-agent approve: HMAC-SHA256 under the user's key); null: none."
        ),
    ] = None


class ApprovalDecided(_Event, frozen=True, tag="approval.decided"):
    """A held call was decided (between turns); the turn that runs or answers it
    reports the decision first."""

    type: ClassVar[Literal["approval.decided"]] = "approval.decided"
    call: Annotated[ToolCall, _CALL]
    approved: Annotated[bool, Meta(description="True: it runs; False: it is answered as rejected.")]
    reason: Annotated[str, Meta(description="Why, as the person said it.")] = ""
    by: Annotated[str, Meta(description="Who decided, as the application names them.")] = ""


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
    | ApprovalRequested
    | ApprovalDecided
)
