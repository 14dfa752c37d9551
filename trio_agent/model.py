"""The model boundary: request, chunk and response structs, the ``Model``
protocol, and the pure checks a step's stream and response must pass before
anything they ask for happens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Container
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, ClassVar, Literal, Protocol, runtime_checkable

import msgspec
from msgspec import Meta, Struct

from ._errors import ModelProtocolError
from ._transcript import BLOCK_CHECKS, BlockError, check_text_field
from .limits import MAX_ASSISTANT_BLOCKS, MAX_STEP_CHUNKS, MAX_STEP_TEXT
from .messages import AssistantMessage, Block, Message, TextBlock, ToolCall

__all__ = [
    "Chunk",
    "ContextOverflowError",
    "Model",
    "ModelAuthenticationError",
    "ModelError",
    "ModelRequestError",
    "ModelResponseError",
    "ModelRequest",
    "ModelResponse",
    "ModelStream",
    "StopReason",
    "TextDelta",
    "ToolSpec",
    "TransientModelError",
    "Usage",
]

StopReason = Literal["stop", "tool_call", "length"]


# gc=False: plain data, never in a cycle (see messages.py).
class ToolSpec(Struct, frozen=True, gc=False):
    """What the model is told about a tool; ``parameters`` is a JSON Schema."""

    name: Annotated[str, Meta(description="The tool's name, as its calls give it.")]
    description: Annotated[str, Meta(description="What the tool does, for the model.")]
    parameters: Annotated[
        dict[str, Any], Meta(description="The JSON Schema of the tool's arguments.")
    ]


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
        tuple[Message, ...],
        Meta(description="The transcript to send (as transform_context gave it, in a session)."),
    ]
    tools: Annotated[tuple[ToolSpec, ...], Meta(description="The tools the model may call.")]
    system: Annotated[str, Meta(description='The system prompt; "" for none.')] = ""


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


Chunk = TextDelta | ToolCall
"""What a model stream yields; a tool call arrives as one whole chunk."""


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


class ModelResponse(Struct, frozen=True, gc=False):
    """The final response of one stream; it must agree with the chunks streamed."""

    id: Annotated[
        str,
        Meta(description="The provider's response id; its message's id is \"message-\" + it."),
    ]
    request_id: Annotated[str, Meta(description="The id of the request it answers.")]
    content: Annotated[
        tuple[Block, ...],
        Meta(description="The text and tool-call blocks; they must agree with the chunks."),
    ]
    stop_reason: Annotated[
        StopReason,
        Meta(
            description="Why the model stopped: stop, tool_call (there are tool calls) or "
            "length (its output-token limit)."
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


def _check_str(value: object, what: str) -> None:
    if type(value) is str and value.isascii():
        return
    try:
        check_text_field(value, what)
    except BlockError as exc:
        raise ModelProtocolError(str(exc)) from None


def _checked_block(block: Any, what: str) -> Block:
    """A response block or streamed call checked by the transcript's own table
    (``BLOCK_CHECKS``); its failure said as a broken step rule."""
    try:
        return BLOCK_CHECKS[type(block)](block)
    except BlockError as exc:
        if exc.code == "INVALID_ARGUMENTS":
            raise ModelProtocolError(
                f"{what} {block.id!r} to {block.name!r} has bad arguments{exc.problem}"
            ) from None
        raise ModelProtocolError(f"{what} {exc}") from None


_CANONICAL = msgspec.json.Encoder(order="sorted")


def _stream_group(call: ToolCall) -> tuple[str, str, bytes]:
    """A checked call as the stream/response comparison sees it: id, name and its
    arguments as canonical JSON (keys sorted; ``1``, ``1.0`` and ``true`` differ).
    A private value: what a consumer does to the call it was handed changes nothing."""
    return (call.id, call.name, _CANONICAL.encode(call.arguments))


class StepCheck:
    """The pure checks of one step: feed chunks, then the response.

    ``add_chunk`` raises ``ModelProtocolError`` for the first invalid chunk
    (which is then not emitted); ``finish`` checks the response against the
    stream and the transcript's ids and returns the assistant message to
    append. No I/O: the loop owns awaiting and emitting.
    """

    __slots__ = ("_chunks", "_groups", "_request_id", "_text", "_text_parts")

    def __init__(self, request_id: str) -> None:
        self._request_id = request_id
        self._chunks = 0
        self._text = 0
        # the merged stream: joined text, and calls as _stream_group values
        self._groups: list[str | tuple[str, str, bytes]] = []
        self._text_parts: list[str] = []

    def add_chunk(self, chunk: object) -> Chunk:
        """Check one streamed chunk; return it as the run keeps it (a tool call with a
        private copy of its arguments), or raise ``ModelProtocolError``."""
        self._chunks += 1
        if self._chunks > MAX_STEP_CHUNKS:
            raise ModelProtocolError(f"the stream sent more than {MAX_STEP_CHUNKS} chunks")
        kind = type(chunk)
        if kind is TextDelta:
            text = chunk.text  # type: ignore[attr-defined]  # kind is TextDelta
            if type(text) is not str or not text.isascii():  # the hot path: one test
                _check_str(text, "text delta")
            self._text += len(text)
            if self._text > MAX_STEP_TEXT:
                raise ModelProtocolError(
                    f"the stream sent more than {MAX_STEP_TEXT} characters of text"
                )
            if text:
                self._text_parts.append(text)
            return chunk  # type: ignore[return-value]
        if kind is ToolCall:
            call: ToolCall = _checked_block(chunk, "streamed tool call")  # type: ignore[assignment]
            self._flush_text()
            self._groups.append(_stream_group(call))
            return call
        raise ModelProtocolError(
            f"the stream yielded a {kind.__name__}, not a TextDelta or ToolCall"
        )

    def _flush_text(self) -> None:
        if self._text_parts:
            self._groups.append("".join(self._text_parts))
            self._text_parts.clear()

    def finish(
        self,
        response: object,
        message_ids: Container[str],
        call_ids: Container[str],
    ) -> AssistantMessage:
        """Check the response; return the assistant message (id ``message-{response.id}``).

        ``message_ids`` and ``call_ids`` are the ids the transcript already
        uses: call ids must be new across the whole transcript, and so must
        the ids of the assistant message and of each call's future result.
        """
        self._flush_text()
        if type(response) is not ModelResponse:
            raise ModelProtocolError(
                f"response() returned a {type(response).__name__}, not a ModelResponse"
            )
        _check_str(response.id, "response id")
        _check_str(response.request_id, "response request_id")
        if response.request_id != self._request_id:
            raise ModelProtocolError(
                f"response answers {response.request_id!r}, but the request is {self._request_id!r}"
            )
        content = response.content
        if type(content) not in (tuple, list):
            raise ModelProtocolError("response content must be a tuple of blocks")
        if len(content) > MAX_ASSISTANT_BLOCKS:
            raise ModelProtocolError(
                f"response has {len(content)} blocks, more than {MAX_ASSISTANT_BLOCKS}"
            )
        if response.usage is not None and type(response.usage) is not Usage:
            raise ModelProtocolError("response usage must be a Usage or None")

        blocks: list[Block] = []
        groups: list[str | tuple[str, str, bytes]] = []
        # The message gets copies of its own, checked here: the streamed copies went
        # out in model.chunk events, and what a consumer does to those must not
        # reach the transcript or the tools.
        calls: list[ToolCall] = []
        parts: list[str] = []
        text = 0
        for position, block in enumerate(content):
            if type(block) is TextBlock:
                _checked_block(block, f"response block {position}")
                text += len(block.text)
                if block.text:
                    parts.append(block.text)
                blocks.append(block)
            elif type(block) is ToolCall:
                call = _checked_block(block, f"response tool call (block {position})")
                assert type(call) is ToolCall  # the table keeps a block's type
                if parts:
                    groups.append("".join(parts))
                    parts.clear()
                groups.append(_stream_group(call))
                calls.append(call)
                blocks.append(call)
            else:
                raise ModelProtocolError(
                    f"response block {position} is a {type(block).__name__}, "
                    "not a TextBlock or ToolCall"
                )
        if parts:
            groups.append("".join(parts))
        if text > MAX_STEP_TEXT:
            raise ModelProtocolError(
                f"response has {text} characters of text, more than {MAX_STEP_TEXT}"
            )
        if groups != self._groups:
            raise ModelProtocolError(
                "response content differs from the streamed chunks (after merging adjacent text)"
            )

        stop = response.stop_reason
        if stop == "tool_call":
            if not calls:
                raise ModelProtocolError("stop reason is 'tool_call' but there is no tool call")
        elif stop in ("stop", "length"):
            if calls:
                raise ModelProtocolError(f"stop reason is {stop!r} but there are tool calls")
        else:
            raise ModelProtocolError(f"unknown stop reason {stop!r}")

        message_id = f"message-{response.id}"
        if message_id in message_ids:
            raise ModelProtocolError(f"message id {message_id!r} is already used")
        seen: set[str] = set()
        for call in calls:
            if call.id in call_ids or call.id in seen:
                raise ModelProtocolError(f"tool call id {call.id!r} is already used")
            seen.add(call.id)
            if f"tool-result-{call.id}" in message_ids:
                raise ModelProtocolError(f"message id 'tool-result-{call.id}' is already used")
        return AssistantMessage(message_id, tuple(blocks))
