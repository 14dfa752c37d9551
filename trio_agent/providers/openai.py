"""An adapter for OpenAI-compatible Chat Completions streaming (OpenAI, vLLM,
llama.cpp, Ollama, OpenRouter, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

import msgspec

from .._settings import ModelSettings
from ..messages._ir import TextBlock, ThinkingBlock
from ..model import (
    ModelRequest,
    ModelResponseError,
    TextDelta,
    ThinkingDelta,
    TransientModelError,
    Usage,
)
from ._arguments import MAX_ARGUMENT_BYTES, CallParts
from ._base import (
    Held,
    ProviderModel,
    SSEModelStream,
    TokenCount,
    api_url,
    decode_document,
    not_the_shape,
)
from ._openai_wire import (
    SEND_REASONING,
    SendReasoning,
    chat_messages,
    response_format,
    settings_fields,
)
from .http._errors import decode_all, stream_error
from .http._http import HTTPStream
from .http._pool import ConnectionPool

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
    reasoning_content: str | None = None  # DeepSeek, llama.cpp, vLLM <= 0.10
    reasoning: str | None = None  # vLLM >= 0.11, OpenRouter
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct, gc=False):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: TokenCount = 0


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: TokenCount = 0
    completion_tokens: TokenCount = 0
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


class _DocumentChoice(msgspec.Struct, gc=False):
    message: _Delta  # the whole message: a delta's fields, tool calls without index
    index: int = 0
    finish_reason: str | None = None


class _Document(msgspec.Struct, gc=False):
    """A whole chat completion (a server that did not stream)."""

    choices: list[_DocumentChoice]
    id: str = ""
    model: str | None = None
    usage: _Usage | None = None


class _Head(msgspec.Struct, gc=False):
    """The model a chunk names (every chunk does: read from the first only)."""

    model: str | None = None


_decoder = msgspec.json.Decoder(_Chunk)
_head_decoder = msgspec.json.Decoder(_Head)
_document_decoder = msgspec.json.Decoder(_Document)
_DOCUMENT = 'a chat completion ({"choices": [{"message": {...}, "finish_reason": ...}], ...})'
_STOPS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    "content_filter": "content_filter",
}


@final
class OpenAIChatModel(ProviderModel):
    """A ``Model`` speaking OpenAI's Chat Completions streaming API.

    ``api_key`` defaults to ``OPENAI_API_KEY``, ``base_url`` to
    ``OPENAI_BASE_URL`` or ``https://api.openai.com/v1`` (point it at any
    compatible server). Text streams as it arrives; a tool call becomes one
    ``ToolCall`` chunk once the response is complete, its arguments parsed
    strictly then (arguments it cannot take, over ``max_argument_bytes`` or
    not a JSON object within the limits, make the call one the agent answers
    with an error result, see ``REJECTED_ARGUMENTS``); calls cut off by a
    ``length`` or ``content_filter`` stop are dropped, never run (the cut
    text stays). A refusal (``delta.refusal``)
    is the message's text, with stop reason ``refusal``, never ``stop``.

    Content: user images become ``image_url`` parts (their URL, or a
    ``data:`` URL of their bytes), a PDF a ``file`` part (``file_data``, a
    ``data:`` URL; ``filename`` its title or ``document.pdf``), a text/plain
    document a text part (its title, if any, as a first line). A document
    given by URL, which this API cannot take, goes as a text note saying so
    (never an error: it would fail every later request of the session too).
    Tool messages hold text only, so a tool result's images
    and documents go in one user message right after the last tool message
    of its batch, introduced by a text part naming the call id; the tool
    message notes that they follow.

    Reasoning: compatible servers stream it as ``delta.reasoning_content``
    (DeepSeek, llama.cpp, vLLM <= 0.10) or ``delta.reasoning`` (vLLM >=
    0.11, OpenRouter); it becomes ``ThinkingDelta`` chunks (a read's deltas
    merged into one) and a ``ThinkingBlock`` (signature "") at its place in
    the response, first. ``send_reasoning`` says which assistant messages
    carry their thinking back as ``reasoning_content``: ``"tool_calls"`` (the
    default) those that made tool calls, as DeepSeek's thinking mode requires
    (it answers 400 without it, and ignores it elsewhere); ``"always"`` every
    one with thinking; ``"never"`` none (servers that refuse the field, as
    DeepSeek's older reasoner did on plain turns).

    Settings (``settings=``, and each request's over them): ``max_tokens``
    goes as ``max_completion_tokens`` (OpenAI's current name; the legacy
    ``max_tokens=`` and ``max_completion_tokens=`` keywords are sent as
    given when the setting is unset, and dropped when it is set);
    ``temperature``, ``top_p``, ``seed`` and ``reasoning_effort`` under their
    own names; ``stop`` as a list; ``tool_choice`` ``"auto"``, ``"none"`` or
    ``"required"`` as is, a tool's name as ``{"type": "function",
    "function": {"name": ...}}``; ``parallel_tool_calls`` as is. The last two
    only go with tools (the API refuses them without). ``thinking_budget`` is
    not sent: Chat Completions has no such field (``reasoning_effort`` is
    its knob). A field goes only when it is set. A request's ``output``
    (native typed output) goes as ``"response_format": {"type":
    "json_schema", "json_schema": {"name", "schema", "strict"}}``, the schema
    as given (strict mode takes a subset of JSON Schema: every object with
    ``"additionalProperties": false`` and all its properties ``required``);
    the answer streams as text. ``extra_body`` (the
    constructor's, then the settings') is merged last, over everything:
    ``extra_body={"max_tokens": n}`` for a server that knows only the old
    name. ``default_headers`` and the settings' ``extra_headers`` (say
    ``OpenAI-Organization``, ``OpenAI-Project``, Azure's ``api-key``,
    OpenRouter's ``HTTP-Referer``) go after the adapter's own headers.

    Rate limits, 5xx, timeouts and dropped connections raise
    ``TransientModelError``; 401/403 ``ModelAuthenticationError``; a context
    overflow ``ContextOverflowError``; other refusals ``ModelRequestError``.
    """

    provider = "OpenAI"
    key_variable = "OPENAI_API_KEY"
    default_base_url = "https://api.openai.com/v1"
    max_tokens_fields = ("max_tokens", "max_completion_tokens")

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
        send_reasoning: SendReasoning = "tool_calls",
        settings: ModelSettings | None = None,
        default_headers: dict[str, str] | None = None,
        max_argument_bytes: int = MAX_ARGUMENT_BYTES,
        proxy: str | None = "environment",
        pool: ConnectionPool | None = None,
    ) -> None:
        if send_reasoning not in SEND_REASONING:
            raise ValueError(
                f"send_reasoning must be 'tool_calls', 'always' or 'never', got {send_reasoning!r}"
            )
        super().__init__(
            model,
            api_key=api_key,
            base_url=base_url,
            connect_seconds=connect_seconds,
            read_seconds=read_seconds,
            extra_body=extra_body,
            ssl_context=ssl_context,
            settings=settings,
            default_headers=default_headers,
            max_argument_bytes=max_argument_bytes,
            proxy=proxy,
            pool=pool,
        )
        self.max_tokens = max_tokens
        self.max_completion_tokens = max_completion_tokens  # o-series, gpt-5
        self.send_reasoning: SendReasoning = send_reasoning

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self._key:  # a server that needs no key gets no authorization header
            headers["authorization"] = f"Bearer {self._key}"
        return headers

    def _max_tokens(self, settings: ModelSettings) -> int | None:
        if settings.max_tokens is not None:  # sent as max_completion_tokens
            return settings.max_tokens
        if self.max_completion_tokens is not None:  # the legacy keywords, as sent
            return self.max_completion_tokens
        return self.max_tokens

    def _url(self) -> str:
        return api_url(self.base_url, "/chat/completions")

    def _body(self, request: ModelRequest, settings: ModelSettings) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(request, self.send_reasoning),
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
        if settings.max_tokens is None:  # the legacy keywords, as given
            if self.max_tokens is not None:
                body["max_tokens"] = self.max_tokens
            if self.max_completion_tokens is not None:
                body["max_completion_tokens"] = self.max_completion_tokens
        body.update(settings_fields(settings, request))
        if request.output is not None:
            body["response_format"] = response_format(request.output)
        return body

    def stream(self, request: ModelRequest) -> _OpenAIStream:
        return _OpenAIStream(self._open(request), request, self.max_argument_bytes)


@final
class _OpenAIStream(SSEModelStream):
    def __init__(self, http: HTTPStream, request: ModelRequest, max_argument_bytes: int) -> None:
        super().__init__(http, request)
        self._max_argument_bytes = max_argument_bytes
        # text and reasoning in arrival order: [is_thinking, pieces] per run of one kind
        self._groups: list[tuple[bool, list[str]]] = []
        self._text: list[str] | None = None  # the pieces of the last group, if it is text
        self._reasoning: list[str] = []  # this read's reasoning, not yet queued
        self._refused = False
        self._calls: dict[int, CallParts] = {}  # the call now at each index
        self._order: list[tuple[int, int, CallParts]] = []  # (index, arrival, call), each call
        self._holding = Held("OpenAI")  # the calls, until the end
        self._stop: str | None = None
        self._usage: Usage | None = None

    def _take_all(self, datas: list[bytes]) -> None:
        for chunk in decode_all(_decoder, datas, "OpenAI"):
            self._take(chunk)
        self._flush_reasoning()
        if self._model is None:  # once: the first chunk names the model, as they all do
            self._model = _model_of(datas[0])

    def _take_document(self, body: bytes) -> None:
        """A whole chat completion, taken as the one chunk that would stream it: its
        message as the delta (its text one ``TextDelta``, its reasoning one
        ``ThinkingDelta``), its calls numbered in order."""
        document = decode_document(_document_decoder, body, "OpenAI", _DOCUMENT)
        first = next((c for c in document.choices if c.index == 0), None)
        if first is None or first.finish_reason is None:
            raise not_the_shape("OpenAI", _DOCUMENT, "it has no first choice with a finish_reason")
        message = first.message
        for index, call in enumerate(message.tool_calls or ()):
            call.index = index  # a whole message's calls carry none: they are in order
        chunk = _Chunk(
            id=document.id,
            choices=[_Choice(0, message, first.finish_reason)],
            usage=document.usage,
        )
        self._model = document.model or ""
        self._take(chunk)
        self._flush_reasoning()

    def _flush_reasoning(self) -> None:
        """Queue this read's reasoning so far as one chunk (a read may hold
        hundreds of tiny deltas: they must not use up the step's chunks)."""
        if self._reasoning:
            self._pending.append(ThinkingDelta(thinking="".join(self._reasoning)))
            self._reasoning.clear()

    def _add_reasoning(self, piece: str) -> None:
        groups = self._groups
        if groups and groups[-1][0]:
            groups[-1][1].append(piece)
        else:
            groups.append((True, [piece]))
            self._text = None
        self._reasoning.append(piece)

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
                reasoning = delta.reasoning_content or delta.reasoning  # one, not both
                if reasoning:
                    self._add_reasoning(reasoning)
                if delta.refusal:
                    self._refused = True
                text = delta.content or delta.refusal  # a refusal is what the model said
                if text:  # the hot path, inline
                    parts = self._text
                    if parts is None:  # the first text, or text after reasoning
                        self._flush_reasoning()
                        parts = self._text = []
                        self._groups.append((False, parts))
                    parts.append(text)
                    self._pending.append(TextDelta(text))
                for part in delta.tool_calls or ():
                    self._take_call(part)
            if choice.finish_reason is not None:
                self._stop = _STOPS.get(choice.finish_reason, "stop")
                self._finish_reason = choice.finish_reason

    def _take_call(self, part: _ToolCallDelta) -> None:
        """One delta of a call. A delta that names a function, with an id that is
        not the id of the call at its index, starts a new call there (Ollama,
        LiteLLM's Responses bridge and others send every parallel call at index
        0, each with its own id); the deltas that follow go to it. A new id
        without a name is the same call's (Poolside changes the id after the
        first delta)."""
        index = part.index
        if index is None:  # servers that omit it: a new id starts a new call
            last = max(self._calls, default=-1)
            known = self._calls.get(last)
            index = last + 1 if last < 0 or (part.id and known and known.id != part.id) else last
        slot = self._calls.get(index)
        if slot is None or (
            part.id
            and slot.id
            and slot.id != part.id
            and slot.name
            and part.function is not None
            and part.function.name
        ):
            self._holding.add(blocks=1)
            slot = self._calls[index] = CallParts(self._max_argument_bytes)
            self._order.append((index, len(self._order), slot))
        if part.id:
            slot.id = part.id
        if part.function is not None:
            if part.function.name:
                slot.name = part.function.name
            if part.function.arguments:
                slot.add(part.function.arguments)

    def _finish(self) -> None:
        if self._stop is None:
            raise TransientModelError("OpenAI stream ended before a finish reason")
        # A body that ended after its finish reason without ``data: [DONE]`` is
        # whole: llama.cpp before PR 9459, TGI before PR 2221, ik_llama.cpp and
        # mistral.rs end so (openai-python takes it too). A cut connection is
        # the HTTP layer's error, never an end; only usage sent after the
        # finish may be missing then.
        self._flush_reasoning()
        content: list[Any] = [
            ThinkingBlock("".join(pieces)) if thinking else TextBlock("".join(pieces))
            for thinking, pieces in self._groups
        ]
        stop = self._stop
        if stop in ("stop", "tool_call"):
            # a refusal never reads as a clean stop, and carries no tool calls
            stop = "refusal" if self._refused else "tool_call" if self._calls else "stop"
        if stop == "tool_call":
            for index, _, slot in sorted(self._order, key=lambda entry: entry[:2]):
                if not slot.id or not slot.name:
                    raise ModelResponseError(f"OpenAI tool call {index} has no id or name")
                call = slot.call()
                content.append(call)
                self._pending.append(call)
        # a length or content_filter stop cuts calls off: they are dropped, never run
        self._respond(content, stop, self._usage)


def _model_of(data: bytes) -> str:
    """The model a chunk names, or "" (none, or a chunk that does not decode)."""
    try:
        return _head_decoder.decode(data).model or ""
    except (msgspec.DecodeError, RecursionError):
        return ""
