"""The model boundary: request, chunk and response structs, and the ``Model``
protocol. (The pure checks a step's stream and response must pass are
``_step.StepCheck``.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, ClassVar, Literal, Protocol, runtime_checkable

from msgspec import Meta, Struct

from ._public import publish as _publish
from ._settings import ModelSettings as ModelSettings
from .errors import ModelProtocolError
from .messages._ir import Block, RedactedThinkingBlock, ToolCall
from .messages._view import MessageSequence

__all__ = [
    "Chunk",
    "ContextOverflowError",
    "Model",
    "ModelAuthenticationError",
    "ModelError",
    "ModelRequestError",
    "ModelResponseError",
    "ModelRequest",
    "OutputFormat",
    "ModelResponse",
    "ModelSettings",
    "ModelStream",
    "StopReason",
    "TextDelta",
    "ThinkingDelta",
    "ToolSpec",
    "TransientModelError",
    "Usage",
]

StopReason = Literal["stop", "tool_call", "length", "refusal", "content_filter"]
"""Why a model stopped: it finished (``stop``), asked for tools (``tool_call``),
hit its output limit (``length``), declined (``refusal``), or was cut by the
provider's content policy (``content_filter``)."""


# gc=False: plain data, never in a cycle (see messages.py).
class ToolSpec(Struct, frozen=True, gc=False):
    """What the model is told about a tool; ``parameters`` is a JSON Schema."""

    name: Annotated[str, Meta(description="The tool's name, as its calls give it.")]
    description: Annotated[str, Meta(description="What the tool does, for the model.")]
    parameters: Annotated[
        dict[str, Any], Meta(description="The JSON Schema of the tool's arguments.")
    ]


class OutputFormat(Struct, frozen=True, gc=False):
    """The shape a typed final answer must have, for a model to ask natively
    (``output_mode="native"``): OpenAI's ``response_format`` ``json_schema``,
    Anthropic's ``output_config.format``. The answer then comes as JSON text."""

    name: Annotated[str, Meta(description="A name for the schema (the provider's ``name``).")]
    schema: Annotated[
        dict[str, Any], Meta(description="The JSON Schema of the answer (an object at the top).")
    ]
    strict: Annotated[
        bool, Meta(description="Ask the provider to hold the answer to the schema exactly.")
    ] = True


class ModelRequest(Struct, frozen=True, gc=False):
    """One model request: the frozen transcript so far, the tools and the system prompt."""

    id: Annotated[
        str,
        Meta(
            description='The request\'s id: "request-" then its number, at least 3 digits '
            "(request-001, request-002, ... through the run or session)."
        ),
    ]
    messages: Annotated[
        MessageSequence,
        Meta(
            description="The transcript to send (as transform_context gave it, in a session): "
            "a frozen sequence (a Transcript or a tuple)."
        ),
    ]
    tools: Annotated[tuple[ToolSpec, ...], Meta(description="The tools the model may call.")]
    system: Annotated[str, Meta(description='The system prompt; "" for none.')] = ""
    settings: Annotated[
        ModelSettings | None,
        Meta(
            description="How the model should answer (the run's, the agent's and the turn's "
            "settings merged); null for the provider's defaults."
        ),
    ] = None
    output: Annotated[
        OutputFormat | None,
        Meta(
            description="The typed answer's shape when the model is asked for it natively "
            "(output_mode native); null otherwise."
        ),
    ] = None


class TextDelta(Struct, frozen=True, gc=False, tag_field="type", tag="text_delta"):
    """A piece of assistant text, as streamed."""

    type: ClassVar[Literal["text_delta"]] = "text_delta"

    text: Annotated[
        str,
        Meta(
            description="The next piece of the assistant's text (may be empty): a step's "
            "pieces, joined, are its response's text."
        ),
    ]


class ThinkingDelta(Struct, frozen=True, gc=False, tag_field="type", tag="thinking_delta"):
    """A piece of the model's reasoning, or of its signature, as streamed.

    Consecutive thinking deltas merge into one ``ThinkingBlock`` (texts
    joined, signatures joined), as text deltas merge into a text block.
    """

    type: ClassVar[Literal["thinking_delta"]] = "thinking_delta"

    thinking: Annotated[
        str, Meta(description="The next piece of the reasoning text (may be empty).")
    ] = ""
    signature: Annotated[
        str, Meta(description="The next piece of the block's signature (may be empty).")
    ] = ""


Chunk = TextDelta | ThinkingDelta | RedactedThinkingBlock | ToolCall
"""What a model stream yields; a tool call and redacted thinking arrive whole."""


class Usage(Struct, frozen=True, gc=False):
    """Token counts a provider reports for one response."""

    input_tokens: Annotated[
        int,
        Meta(
            description="Input (prompt) tokens, as the provider counts them (OpenAI's include "
            "cached ones, Anthropic's do not)."
        ),
    ] = 0
    output_tokens: Annotated[int, Meta(description="Output tokens the model generated.")] = 0
    cache_read_tokens: Annotated[
        int, Meta(description="Input tokens read from the provider's prompt cache; 0 if unknown.")
    ] = 0
    cache_write_tokens: Annotated[
        int, Meta(description="Input tokens written to the provider's prompt cache; 0 if unknown.")
    ] = 0
    cost: Annotated[
        float | None,
        Meta(
            description="What the tokens cost, in US dollars, when their prices are known "
            "(a turn's usage, priced by Agent(prices=...) or the genai-prices package); "
            "else null."
        ),
    ] = None


class ModelResponse(Struct, frozen=True, gc=False):
    """The final response of one stream; it must agree with the chunks streamed."""

    id: Annotated[
        str,
        Meta(description="The provider's response id; its message's id is \"message-\" + it."),
    ]
    request_id: Annotated[str, Meta(description="The id of the request it answers.")]
    content: Annotated[
        tuple[Block, ...],
        Meta(
            description="The text, thinking and tool-call blocks; they must agree with the chunks."
        ),
    ]
    stop_reason: Annotated[
        StopReason,
        Meta(
            description="Why the model stopped: stop, tool_call (there are tool calls), "
            "length (its output-token limit), refusal (it declined) or content_filter (the "
            "provider's policy cut the answer)."
        ),
    ]
    usage: Annotated[
        Usage | None, Meta(description="The token counts the provider reported; null if none.")
    ] = None


@runtime_checkable
class ModelStream(Protocol):
    """An open model stream: iterate the chunks, then await ``response()``."""

    def __aiter__(self) -> AsyncIterator[Chunk]: ...

    async def response(self) -> ModelResponse: ...


@runtime_checkable
class Model(Protocol):
    """Anything with ``stream(request)`` returning an async context manager of a stream.

    Use: ``async with model.stream(request) as stream: async for chunk in
    stream: ...; response = await stream.response()``. Leaving the ``async
    with`` (also by cancellation) must release whatever the stream holds.
    """

    def stream(self, request: ModelRequest) -> AbstractAsyncContextManager[ModelStream]: ...


class ModelError(Exception):
    """A model provider failed; subclasses say whether trying again can help."""


class TransientModelError(ModelError):
    """A failure worth retrying unchanged: rate limit, 5xx, timeout, dropped connection.

    ``retry_after`` is the provider's hint in seconds, when it sent one.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ContextOverflowError(ModelError):
    """The request does not fit the model's context window; never retried unchanged."""


class ModelAuthenticationError(ModelError):
    """The provider refused the credentials (401, 403); never retried."""


class ModelRequestError(ModelError):
    """The provider refused the request as malformed (400, 404, 422); never retried."""


class ModelResponseError(ModelError):
    """The provider's stream broke its own format (bad JSON, oversized tool arguments)."""


ProtocolViolation = ModelProtocolError
"""The name this error had before it was named as an error; kept working."""

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
