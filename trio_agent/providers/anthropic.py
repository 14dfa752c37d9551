"""An adapter for Anthropic's Messages streaming API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

import msgspec

from ..messages import AssistantMessage, TextBlock, ToolCall, ToolResultMessage, UserMessage
from ..model import (
    ModelRequest,
    ModelResponseError,
    TextDelta,
    TransientModelError,
    Usage,
)
from ._base import ProviderModel, SSEModelStream, finish_response
from ._http import HTTPStream, decode_all, parse_arguments, stream_error

if TYPE_CHECKING:
    import ssl

__all__ = ["AnthropicModel"]


# The wire structs are decoded once per event and never hold references back, so
# they need not be tracked by the garbage collector (gc=False: cheaper to make);
# fields are in the order the API sends them (msgspec looks keys up fastest so).
class _Block(msgspec.Struct, gc=False):
    type: str
    id: str | None = None
    name: str | None = None
    text: str | None = None


class _BlockDelta(msgspec.Struct, gc=False):
    type: str = ""  # message_delta's delta has none
    text: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class _Usage(msgspec.Struct, gc=False):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


class _Message(msgspec.Struct, gc=False):
    id: str = ""
    usage: _Usage | None = None


class _Error(msgspec.Struct, gc=False):
    type: str = ""
    message: str = ""


class _Event(msgspec.Struct, gc=False):
    type: str
    index: int = 0
    delta: _BlockDelta | None = None
    message: _Message | None = None
    content_block: _Block | None = None
    usage: _Usage | None = None
    error: _Error | None = None


# Block deltas are nearly every event of a stream. A first decoder takes only
# those, as a tagged struct whose text delta *is* our ``TextDelta`` chunk (the
# API's tag, "text_delta", is ours too): no event struct to pick apart and no
# chunk to build per delta. Any other event, or a delta of another type
# (thinking, signature, citations, or one malformed), fails it and is decoded
# by ``_decoder``, which takes any type, as before: a shortcut, not a filter.
class _JsonDelta(msgspec.Struct, gc=False, tag_field="type", tag="input_json_delta"):
    partial_json: str


class _BlockDeltaEvent(msgspec.Struct, gc=False, tag_field="type", tag="content_block_delta"):
    delta: TextDelta | _JsonDelta
    index: int = 0  # as _Event's


_decoder = msgspec.json.Decoder(_Event)
_delta_decoder = msgspec.json.Decoder(_BlockDeltaEvent)
_STOPS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_call",
    "pause_turn": "stop",
    "refusal": "stop",
}


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Our transcript as Anthropic turns: tool results go in a user turn, and
    consecutive turns of one role are merged (the API wants them alternating)."""
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for message in request.messages:
        if type(message) is UserMessage:
            if message.content:  # the API refuses empty text blocks
                add("user", [{"type": "text", "text": message.content}])
        elif type(message) is AssistantMessage:
            blocks: list[dict[str, Any]] = []
            for block in message.content:
                if isinstance(block, TextBlock):
                    if block.text:
                        blocks.append({"type": "text", "text": block.text})
                else:
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": block.id,
                            "name": block.name,
                            "input": block.arguments,
                        }
                    )
            add("assistant", blocks)
        elif type(message) is ToolResultMessage:
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message.tool_call_id,
                        "content": message.content,
                        "is_error": message.is_error,
                    }
                ],
            )
    return out


@final
class AnthropicModel(ProviderModel):
    """A ``Model`` speaking Anthropic's Messages streaming API.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY``, ``base_url`` to
    ``ANTHROPIC_BASE_URL`` or ``https://api.anthropic.com``. ``max_tokens``
    is required by the API (default 4096). Text streams as it arrives; a
    tool call becomes one ``ToolCall`` chunk once the message is complete,
    its arguments parsed strictly then; calls cut off by ``max_tokens`` (a
    ``length`` stop) are dropped, never run. Errors map as for OpenAI;
    ``overloaded_error`` (HTTP 529, or in the stream) is transient.
    """

    provider = "Anthropic"
    key_variable = "ANTHROPIC_API_KEY"
    default_base_url = "https://api.anthropic.com"

    def __init__(
        self,
        model: str,
        *,
        max_tokens: int = 4096,
        anthropic_version: str = "2023-06-01",
        api_key: str | None = None,
        base_url: str | None = None,
        connect_seconds: float = 10.0,
        read_seconds: float = 120.0,
        extra_body: dict[str, Any] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(
            model,
            api_key=api_key,
            base_url=base_url,
            connect_seconds=connect_seconds,
            read_seconds=read_seconds,
            extra_body=extra_body,
            ssl_context=ssl_context,
        )
        if type(max_tokens) is not int or max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
        self.max_tokens = max_tokens
        self.anthropic_version = anthropic_version

    def _headers(self) -> dict[str, str]:
        return {
            "x-api-key": self._key,
            "anthropic-version": self.anthropic_version,
            "content-type": "application/json",
            "accept": "text/event-stream",
        }

    def _url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": _messages(request),
            "stream": True,
        }
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        return body

    def stream(self, request: ModelRequest) -> _AnthropicStream:
        return _AnthropicStream(self._open(request), request)


@final
class _AnthropicStream(SSEModelStream):
    def __init__(self, http: HTTPStream, request: ModelRequest) -> None:
        super().__init__(http, request)
        self._id = ""
        self._blocks: dict[
            int, list[Any]
        ] = {}  # index -> [type, text parts | json parts, id, name]
        self._stop: str | None = None
        self._usage = _Usage()

    def _take_all(self, datas: list[bytes]) -> None:
        # Block deltas, nearly every event, are taken here inline; the rest in _take.
        pending = self._pending
        index, parts = -1, []  # the block the last delta went to, and its parts
        for event in decode_all(_delta_decoder, datas, "Anthropic", _decoder):
            if type(event) is _BlockDeltaEvent:
                if event.index != index:
                    index, parts = event.index, self._parts(event.index)
                delta = event.delta
                if isinstance(delta, TextDelta):
                    if delta.text:
                        parts.append(delta.text)
                        pending.append(delta)
                elif delta.partial_json:
                    parts.append(delta.partial_json)
            elif event.type == "content_block_delta" and event.delta is not None:
                self._parts(event.index)  # a delta of a type we do not stream: checked only
            else:
                self._take(event)
                index = -1  # it may have started a block anew

    def _parts(self, index: int) -> list[str]:
        block = self._blocks.get(index)
        if block is None:
            raise ModelResponseError(f"Anthropic delta for unknown block {index}")
        parts: list[str] = block[1]
        return parts

    def _take(self, event: _Event) -> None:
        """Any event but a block delta (those are taken in ``_take_all``)."""
        kind = event.type
        if kind == "content_block_start" and event.content_block is not None:
            cb = event.content_block
            self._blocks[event.index] = [cb.type, [], cb.id, cb.name, False]
            if cb.type == "text" and cb.text:
                self._blocks[event.index][1].append(cb.text)
                self._pending.append(TextDelta(cb.text))
        elif kind == "content_block_stop":
            block = self._blocks.get(event.index)
            if block is not None:
                block[4] = True  # complete
        elif kind == "message_start" and event.message is not None:
            self._id = event.message.id
            if event.message.usage is not None:
                self._usage = event.message.usage
        elif kind == "message_delta":
            if event.delta is not None and event.delta.stop_reason is not None:
                self._stop = _STOPS.get(event.delta.stop_reason, "stop")
            if event.usage is not None:
                u = event.usage  # cumulative: later counts replace earlier ones
                self._usage.output_tokens = u.output_tokens
                if u.input_tokens:
                    self._usage.input_tokens = u.input_tokens
                if u.cache_read_input_tokens is not None:
                    self._usage.cache_read_input_tokens = u.cache_read_input_tokens
                if u.cache_creation_input_tokens is not None:
                    self._usage.cache_creation_input_tokens = u.cache_creation_input_tokens
        elif kind == "message_stop":
            self._ended = True
        elif kind == "error":
            error = event.error or _Error()  # overloaded, api, rate limit, timeout: transient
            raise stream_error("Anthropic", error.type, error.message)

    def _finish(self) -> None:
        if not self._ended or self._stop is None:
            raise TransientModelError("Anthropic stream ended before message_stop")
        # Text streamed as it came; calls are whole only now, so they come last in
        # the stream, and the response lists them last too (stream and response agree).
        content: list[Any] = []
        calls: list[ToolCall] = []
        for index in sorted(self._blocks):
            kind, parts, call_id, name, complete = self._blocks[index]
            if kind == "text":
                text = "".join(parts)
                if text:
                    content.append(TextBlock(text))
            elif kind == "tool_use" and self._stop != "length":
                if not complete:
                    raise ModelResponseError(
                        f"Anthropic tool_use block {index} never ended, but the message did"
                    )
                if not call_id or not name:
                    raise ModelResponseError(f"Anthropic tool_use block {index} has no id or name")
                raw = "".join(parts).encode()
                calls.append(ToolCall(call_id, name, parse_arguments(raw, call_id, "Anthropic")))
        content.extend(calls)
        self._pending.extend(calls)
        has_calls = bool(calls)
        stop = "tool_call" if has_calls else ("length" if self._stop == "length" else "stop")
        u = self._usage
        usage = Usage(
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_input_tokens or 0,
            cache_write_tokens=u.cache_creation_input_tokens or 0,
        )
        self._response = finish_response(self._id, self._request, content, stop, usage)
