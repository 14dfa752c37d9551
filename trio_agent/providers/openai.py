"""An adapter for OpenAI-compatible Chat Completions streaming (OpenAI, vLLM,
llama.cpp, Ollama, OpenRouter, ...)."""

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

__all__ = ["OpenAIChatModel"]


class _Function(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct, gc=False):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct, gc=False):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: int = 0


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _PromptDetails | None = None


class _ErrorBody(msgspec.Struct, gc=False):
    message: str = ""
    type: str | None = None
    code: str | int | None = None


class _Chunk(msgspec.Struct, gc=False):
    id: str = ""
    choices: list[_Choice] = []
    usage: _Usage | None = None
    error: _ErrorBody | None = None


_decoder = msgspec.json.Decoder(_Chunk)
_STOPS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    "content_filter": "stop",
}


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        if type(message) is UserMessage:
            out.append({"role": "user", "content": message.content})
        elif type(message) is AssistantMessage:
            text = "".join(b.text for b in message.content if type(b) is TextBlock)
            calls = [
                {
                    "id": b.id,
                    "type": "function",
                    "function": {
                        "name": b.name,
                        "arguments": msgspec.json.encode(b.arguments).decode(),
                    },
                }
                for b in message.content
                if type(b) is ToolCall
            ]
            entry: dict[str, Any] = {
                "role": "assistant",
                "content": text or ("" if not calls else None),
            }
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
        elif type(message) is ToolResultMessage:
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            )
    return out


@final
class OpenAIChatModel(ProviderModel):
    """A ``Model`` speaking OpenAI's Chat Completions streaming API.

    ``api_key`` defaults to ``OPENAI_API_KEY``, ``base_url`` to
    ``OPENAI_BASE_URL`` or ``https://api.openai.com/v1`` (point it at any
    compatible server). Text streams as it arrives; a tool call becomes one
    ``ToolCall`` chunk once the response is complete, its arguments parsed
    strictly then; calls cut off by a ``length`` stop are dropped, never run.
    Rate limits, 5xx, timeouts and dropped connections raise
    ``TransientModelError``; 401/403 ``ModelAuthenticationError``; a context
    overflow ``ContextOverflowError``; other refusals ``ModelRequestError``.
    """

    provider = "OpenAI"
    key_variable = "OPENAI_API_KEY"
    default_base_url = "https://api.openai.com/v1"

    def __init__(
        self,
        model: str,
        *,
        max_tokens: int | None = None,
        max_completion_tokens: int | None = None,
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
        self.max_tokens = max_tokens
        self.max_completion_tokens = max_completion_tokens  # o-series, gpt-5

    def _headers(self) -> dict[str, str]:
        return {
            "authorization": f"Bearer {self._key}",
            "content-type": "application/json",
            "accept": "text/event-stream",
        }

    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.max_completion_tokens is not None:
            body["max_completion_tokens"] = self.max_completion_tokens
        return body

    def stream(self, request: ModelRequest) -> _OpenAIStream:
        return _OpenAIStream(self._open(request), request)


@final
class _OpenAIStream(SSEModelStream):
    def __init__(self, http: HTTPStream, request: ModelRequest) -> None:
        super().__init__(http, request)
        self._id = ""
        self._text: list[str] = []
        self._calls: dict[int, list[Any]] = {}  # index -> [id, name, argument parts]
        self._stop: str | None = None
        self._usage: Usage | None = None

    def _take_all(self, datas: list[bytes]) -> None:
        if b"[DONE]" in datas:
            datas = datas[: datas.index(b"[DONE]")]
            self._ended = True
        if datas:
            for chunk in decode_all(_decoder, datas, "OpenAI"):
                self._take(chunk)

    def _take(self, chunk: _Chunk) -> None:
        if chunk.error is not None:
            error = chunk.error
            kind = f"{error.type or ''} {error.code or ''}".strip()
            raise stream_error("OpenAI", kind, error.message)
        if chunk.id:
            self._id = chunk.id
        if chunk.usage is not None:
            u = chunk.usage
            cached = u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0
            self._usage = Usage(
                input_tokens=u.prompt_tokens,
                output_tokens=u.completion_tokens,
                cache_read_tokens=cached,
            )
        for choice in chunk.choices:
            if choice.index != 0:  # n > 1: the first choice is the answer
                continue
            delta = choice.delta
            if delta is not None:
                text = delta.content or delta.refusal  # a refusal is what the model said
                if text:
                    self._text.append(text)
                    self._pending.append(TextDelta(text))
                for part in delta.tool_calls or ():
                    index = part.index
                    if index is None:  # servers that omit it: a new id starts a new call
                        last = max(self._calls, default=-1)
                        known = self._calls.get(last)
                        index = (
                            last + 1
                            if last < 0 or (part.id and known and known[0] != part.id)
                            else last
                        )
                    slot = self._calls.setdefault(index, [None, None, []])
                    if part.id:
                        slot[0] = part.id
                    if part.function is not None:
                        if part.function.name:
                            slot[1] = part.function.name
                        if part.function.arguments:
                            slot[2].append(part.function.arguments)
            if choice.finish_reason is not None:
                self._stop = _STOPS.get(choice.finish_reason, "stop")

    def _finish(self) -> None:
        if self._stop is None:
            raise TransientModelError("OpenAI stream ended before a finish reason")
        if not self._ended:
            raise TransientModelError("OpenAI stream ended before data: [DONE]")
        text = "".join(self._text)
        content: list[Any] = [TextBlock(text)] if text else []
        stop = "stop" if self._stop == "tool_call" and not self._calls else self._stop
        if stop != "length" and self._calls:
            for index in sorted(self._calls):
                call_id, name, parts = self._calls[index]
                if not call_id or not name:
                    raise ModelResponseError(f"OpenAI tool call {index} has no id or name")
                raw = "".join(parts).encode()
                call = ToolCall(call_id, name, parse_arguments(raw, call_id, "OpenAI"))
                content.append(call)
                self._pending.append(call)
            stop = "tool_call"
        # a length stop cuts calls off: they are dropped, never run half-written
        self._response = finish_response(self._id, self._request, content, stop, self._usage)
