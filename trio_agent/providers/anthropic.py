"""An adapter for Anthropic's Messages streaming API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, final

import msgspec

from .._settings import ModelSettings
from ..messages._ir import RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolCall
from ..model import (
    ModelRequest,
    ModelResponseError,
    TextDelta,
    ThinkingDelta,
    TransientModelError,
    Usage,
)
from ._anthropic_wire import messages, output_config, settings_fields
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
from .http._errors import decode_all, stream_error
from .http._http import HTTPStream
from .http._pool import ConnectionPool

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
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    input: msgspec.Raw = msgspec.Raw()  # a tool_use block's arguments, as sent at its start


class _BlockDelta(msgspec.Struct, gc=False):
    type: str = ""  # message_delta's delta has none
    text: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class _Usage(msgspec.Struct, gc=False):
    input_tokens: TokenCount = 0
    output_tokens: TokenCount = 0
    cache_read_input_tokens: TokenCount | None = None
    cache_creation_input_tokens: TokenCount | None = None


class _Message(msgspec.Struct, gc=False):
    id: str = ""
    usage: _Usage | None = None
    model: str | None = None


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
# API's tag, "text_delta", is ours too; so is "thinking_delta", read as our
# ``ThinkingDelta``): no event struct to pick apart and no chunk to build per
# text delta. Any other event, or a delta of another type (citations, or one
# malformed), fails it and is decoded by ``_decoder``, which takes any type, as
# before: a shortcut, not a filter.
class _JsonDelta(msgspec.Struct, gc=False, tag_field="type", tag="input_json_delta"):
    partial_json: str


class _SignatureDelta(msgspec.Struct, gc=False, tag_field="type", tag="signature_delta"):
    signature: str


class _BlockDeltaEvent(msgspec.Struct, gc=False, tag_field="type", tag="content_block_delta"):
    delta: TextDelta | _JsonDelta | ThinkingDelta | _SignatureDelta
    index: int = 0  # as _Event's


class _DocumentBlock(_Block, gc=False):
    """A block of a whole message (its ``input`` the tool call's arguments)."""


class _Document(msgspec.Struct, gc=False):
    """A whole message (a server that did not stream, as LiteLLM's mocked models)."""

    type: str
    content: list[_DocumentBlock]
    id: str = ""
    model: str | None = None
    stop_reason: str | None = None
    usage: _Usage | None = None


_decoder = msgspec.json.Decoder(_Event)
_document_decoder = msgspec.json.Decoder(_Document)
_DOCUMENT = 'a message ({"type": "message", "content": [...], "stop_reason": ...})'
_delta_decoder = msgspec.json.Decoder(_BlockDeltaEvent)
_STOPS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",  # cut by the context window, as by max_tokens
    "tool_use": "tool_call",
    "pause_turn": "stop",
    "refusal": "refusal",
}
_DROPS_CALLS = ("length", "refusal")
"""Stops whose tool calls are never run: cut off, or declined."""


@final
class _OpenBlock:
    """One content block as it streams: its type; its text or thinking pieces;
    its signature pieces (thinking); a tool call's id, name and arguments
    (``call``: the argument pieces of a ``tool_use`` block, bounded)."""

    __slots__ = (
        "call",
        "complete",
        "id",
        "kind",
        "live",
        "name",
        "parts",
        "seeded",
        "signature",
    )

    def __init__(self, block: _Block, live: bool, max_argument_bytes: int) -> None:
        self.kind = block.type
        self.parts: list[str] = []
        self.call = CallParts(max_argument_bytes, block.id or "", block.name or "")
        self.signature: list[str] = []
        self.id = block.id
        self.name = block.name
        self.complete = False
        self.seeded = False  # ``call`` holds the start's whole input, until a delta comes
        # streamed as it comes: blocks before the message's first tool call; the
        # rest go out in order once the stop reason says whether the calls stand
        self.live = live


@final
class AnthropicModel(ProviderModel):
    """A ``Model`` speaking Anthropic's Messages streaming API.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY``, ``base_url`` to
    ``ANTHROPIC_BASE_URL`` or ``https://api.anthropic.com``. ``max_tokens``
    is required by the API (default 4096). Text and thinking stream as they
    arrive until the first tool call; a tool call becomes one ``ToolCall``
    chunk once the message is complete, its arguments parsed strictly then
    (arguments it cannot take make it a call answered with an error result,
    as for ``OpenAIChatModel``), and it and the blocks after it (interleaved
    thinking) go out then, in the message's order, which the response
    keeps. Calls of a message cut off by ``max_tokens`` or
    ``model_context_window_exceeded`` (a ``length`` stop) or refused
    (``refusal``) are dropped, never run. Errors map as for OpenAI;
    ``overloaded_error`` (HTTP 529, or in the stream) is transient.

    Images and documents in user and tool-result content go as the API's
    own blocks: an image as base64 or by URL; a PDF as base64 or by URL; a
    ``text/plain`` document as its text (UTF-8); a document's ``title``
    when it has one. One it cannot take (text/plain by URL, or not UTF-8)
    goes as a text note saying so, never an error that would fail every
    later request of the session too. Extended thinking (turned on with
    ``thinking_budget``) streams as ``ThinkingDelta`` chunks (the thinking, then its signature)
    and becomes a ``ThinkingBlock`` with the signature exactly as received;
    ``redacted_thinking`` arrives as one ``RedactedThinkingBlock`` chunk.
    Both are sent back unmodified in later requests, in their order, as the
    API requires with tool use; thinking without a signature and a
    Responses API reasoning item come from other providers and are not
    sent. A ``refusal`` stop is the ``refusal`` stop reason, never
    ``stop``: text streamed before it stays, tool calls are dropped.

    Settings (``settings=``, and each request's over them): ``max_tokens``
    as ``max_tokens`` (over the ``max_tokens=`` keyword, which is the
    default); ``temperature`` and ``top_p`` under their own names (the API
    takes temperature 0 to 1); ``stop`` as ``stop_sequences``;
    ``tool_choice`` ``"auto"`` as ``{"type": "auto"}``, ``"none"`` as
    ``{"type": "none"}``, ``"required"`` as ``{"type": "any"}``, a tool's
    name as ``{"type": "tool", "name": ...}``; ``parallel_tool_calls=False``
    as ``"disable_parallel_tool_use": true`` in it (with ``{"type":
    "auto"}`` when no tool choice is set); both only with tools.
    ``thinking_budget`` turns extended thinking on: ``"thinking": {"type":
    "enabled", "budget_tokens": ...}``; the API requires ``max_tokens``
    above it, so a budget not below ``max_tokens`` is a
    ``ModelRequestError`` before anything is sent (with thinking on, the
    API also refuses a forced tool choice and a changed temperature). Not
    sent, the API having no such field: ``seed``, ``reasoning_effort``. A
    request's ``output`` (native typed output) goes as ``"output_config":
    {"format": {"type": "json_schema", "schema": ...}}`` (structured outputs,
    no beta header; the format has no name and no strict flag), the schema as
    given: the API takes a subset of JSON Schema (every object with
    ``"additionalProperties": false``; numeric bounds such as ``minimum``
    are not among it); the answer streams as text. A field goes only when
    it is set; ``extra_body`` (the constructor's, then the settings') is
    merged last, over everything. ``default_headers`` and
    the settings' ``extra_headers`` go after the adapter's own headers: an
    ``anthropic-beta`` header, or an ``anthropic-version`` that replaces
    ``anthropic_version=``.
    """

    provider = "Anthropic"
    key_variable = "ANTHROPIC_API_KEY"
    default_base_url = "https://api.anthropic.com"
    max_tokens_fields = ("max_tokens",)

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
        settings: ModelSettings | None = None,
        default_headers: dict[str, str] | None = None,
        max_argument_bytes: int = MAX_ARGUMENT_BYTES,
        proxy: str | None = "environment",
        pool: ConnectionPool | None = None,
    ) -> None:
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
        if type(max_tokens) is not int or max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
        self.max_tokens = max_tokens
        self.anthropic_version = anthropic_version

    def _headers(self) -> dict[str, str]:
        headers = {
            "anthropic-version": self.anthropic_version,
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        if self._key:  # a server that needs no key gets no x-api-key header
            headers["x-api-key"] = self._key
        return headers

    def _max_tokens(self, settings: ModelSettings) -> int:
        return settings.max_tokens or self.max_tokens  # always sent: the API requires it

    def _url(self) -> str:
        return api_url(self.base_url, "/v1/messages")

    def _body(self, request: ModelRequest, settings: ModelSettings) -> dict[str, Any]:
        max_tokens = self._max_tokens(settings)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": messages(request),
            "stream": True,
        }
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        body.update(settings_fields(settings, request, max_tokens))
        if request.output is not None:
            body["output_config"] = output_config(request.output)
        return body

    def stream(self, request: ModelRequest) -> _AnthropicStream:
        return _AnthropicStream(self._open(request), request, self.max_argument_bytes)


@final
class _AnthropicStream(SSEModelStream):
    def __init__(self, http: HTTPStream, request: ModelRequest, max_argument_bytes: int) -> None:
        super().__init__(http, request)
        self._max_argument_bytes = max_argument_bytes
        self._blocks: dict[int, _OpenBlock] = {}
        self._holding = Held("Anthropic")  # every block; what is not live, until the end
        self._live = True  # no tool_use block has started yet
        self._stop: str | None = None
        self._stopped = False  # message_stop came
        self._usage = _Usage()

    def _take_all(self, datas: list[bytes]) -> None:
        # Block deltas, nearly every event, are taken here inline; the rest in _take.
        # A batch's consecutive thinking and signature deltas go out as one
        # ThinkingDelta (the step merges them so anyway): long thinking stays
        # within the step's chunk limit.
        pending = self._pending
        index, block = -1, None  # the block the last delta went to
        thinking: list[str] = []
        signature: list[str] = []
        for event in decode_all(_delta_decoder, datas, "Anthropic", _decoder):
            if type(event) is _BlockDeltaEvent:
                if event.index != index:
                    index, block = event.index, self._block(event.index)
                assert block is not None
                delta = event.delta
                if type(delta) is TextDelta:
                    if block.kind != "text":
                        raise _misplaced("text_delta", index, block)
                    if delta.text:
                        block.parts.append(delta.text)
                        if block.live:
                            if thinking or signature:
                                _flush(pending, thinking, signature)
                            pending.append(delta)
                        else:
                            self._holding.add(text=len(delta.text))
                elif type(delta) is _JsonDelta:
                    if block.kind in ("text", "thinking"):
                        raise _misplaced("input_json_delta", index, block)
                    if delta.partial_json:
                        if block.seeded:  # the deltas are the arguments, not the start's
                            block.seeded = False
                            block.call.replace("")
                        block.call.add(delta.partial_json)
                elif type(delta) is ThinkingDelta:
                    if block.kind != "thinking":
                        raise _misplaced("thinking_delta", index, block)
                    if delta.thinking:
                        block.parts.append(delta.thinking)
                        if block.live:
                            thinking.append(delta.thinking)
                        else:
                            self._holding.add(thinking=len(delta.thinking))
                elif type(delta) is _SignatureDelta:
                    if block.kind != "thinking":
                        raise _misplaced("signature_delta", index, block)
                    if delta.signature:
                        block.signature.append(delta.signature)
                        if block.live:
                            signature.append(delta.signature)
                        else:
                            self._holding.add(thinking=len(delta.signature))
            elif event.type == "content_block_delta" and event.delta is not None:
                self._block(event.index)  # a delta of a type we do not stream: checked only
            else:
                if event.type == "content_block_start" and (thinking or signature):
                    _flush(pending, thinking, signature)  # the block may stream a chunk
                self._take(event)
                if self._stopped:  # message_stop: what follows it in this read is not taken,
                    break  # as nothing in a later one is (wherever the reads split)
                index = -1  # it may have started a block anew
        if thinking or signature:
            _flush(pending, thinking, signature)

    def _take_document(self, body: bytes) -> None:
        """A whole message, taken as the events that would stream it: each block
        starts whole (its text one ``TextDelta``, its thinking one
        ``ThinkingDelta``), a tool_use block's ``input`` its arguments (``_start``)."""
        document = decode_document(_document_decoder, body, "Anthropic", _DOCUMENT)
        if document.type != "message" or document.stop_reason is None:
            what = "no stop_reason" if document.type == "message" else f"type {document.type!r}"
            raise not_the_shape("Anthropic", _DOCUMENT, f"it has {what}")
        message = _Message(document.id, document.usage, document.model)
        self._take(_Event("message_start", message=message))
        for index, block in enumerate(document.content):
            self._start(index, block)  # a tool_use block's input is its arguments
            self._take(_Event("content_block_stop", index=index))
        self._take(_Event("message_delta", delta=_BlockDelta(stop_reason=document.stop_reason)))
        self._take(_Event("message_stop"))

    def _block(self, index: int) -> _OpenBlock:
        block = self._blocks.get(index)
        if block is None:
            raise ModelResponseError(f"Anthropic delta for unknown block {index}")
        return block

    def _start(self, index: int, cb: _Block) -> None:
        """A content block starts; text or thinking it already holds streams, and
        redacted thinking, which arrives whole, goes out as one chunk (if the
        block is live: before the first tool call)."""
        if index in self._blocks:  # taken as a new block, it would drop the first (a call)
            raise ModelResponseError(f"Anthropic started content block {index} twice")
        if cb.type == "tool_use":
            self._live = False
        if self._live:
            self._holding.add(blocks=1)
        else:  # what the block starts with is held too
            thought = len(cb.thinking or "") + len(cb.signature or "") + len(cb.data or "")
            self._holding.add(1, len(cb.text or ""), thought)
        block = self._blocks[index] = _OpenBlock(cb, self._live, self._max_argument_bytes)
        if cb.type == "tool_use" and _has_input(cb.input):
            # Anthropic starts a call with "input": {} and streams its arguments; some
            # compatible servers (Ollama's) send them whole here, with no delta after
            block.call.add(bytes(cb.input).decode())
            block.seeded = True
        chunk: Any = None
        if cb.type == "text" and cb.text:
            block.parts.append(cb.text)
            chunk = TextDelta(cb.text)
        elif cb.type == "thinking" and (cb.thinking or cb.signature):
            block.parts.append(cb.thinking or "")
            block.signature.append(cb.signature or "")
            chunk = ThinkingDelta(cb.thinking or "", cb.signature or "")
        elif cb.type == "redacted_thinking":
            if not cb.data:
                raise ModelResponseError(f"Anthropic redacted_thinking block {index} has no data")
            block.parts.append(cb.data)
            chunk = RedactedThinkingBlock(cb.data)
        if chunk is not None and block.live:
            self._pending.append(chunk)

    def _take(self, event: _Event) -> None:
        """Any event but a block delta (those are taken in ``_take_all``)."""
        kind = event.type
        if kind == "content_block_start" and event.content_block is not None:
            self._start(event.index, event.content_block)
        elif kind == "content_block_stop":
            block = self._blocks.get(event.index)
            if block is not None:
                block.complete = True
        elif kind == "message_start" and event.message is not None:
            self._id = event.message.id
            self._model = event.message.model
            if event.message.usage is not None:
                self._usage = event.message.usage
        elif kind == "message_delta":
            if event.delta is not None and event.delta.stop_reason is not None:
                self._stop = _STOPS.get(event.delta.stop_reason, "stop")
                self._finish_reason = event.delta.stop_reason
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
            self._ended = self._stopped = True
        elif kind == "error":
            error = event.error or _Error()  # overloaded, api, rate limit, timeout: transient
            raise stream_error("Anthropic", error.type, error.message)

    def _call(self, index: int, block: _OpenBlock) -> ToolCall:
        if not block.complete:
            raise ModelResponseError(
                f"Anthropic tool_use block {index} never ended, but the message did"
            )
        if not block.id or not block.name:
            raise ModelResponseError(f"Anthropic tool_use block {index} has no id or name")
        return block.call.call()

    def _finish(self) -> None:
        if not self._stopped:  # a [DONE] before it ends nothing
            raise TransientModelError("Anthropic stream ended before message_stop")
        if self._stop is None:  # null is message_start's stop_reason only, never the end's
            raise ModelResponseError(
                "Anthropic stream ended (message_stop) without a stop reason: "
                "no message_delta gave one (stop_reason null)"
            )
        # Blocks before the first tool call streamed as they came; a call is whole
        # only now, so it and every block after it (interleaved thinking, text) go
        # out now, in the message's order, which the response keeps too: Anthropic
        # wants the turn sent back exactly as it came. A cut or refused message's
        # calls are dropped from both.
        content: list[Any] = []
        later: list[Any] = []
        calls = 0
        keep_calls = self._stop not in _DROPS_CALLS
        for index in sorted(self._blocks):
            block = self._blocks[index]
            item = self._item(index, block, keep_calls)
            if item is None:
                continue
            calls += type(item) is ToolCall
            content.append(item)
            if not block.live:
                later.append(_chunk_of(item))
        self._pending.extend(later)
        if calls:
            stop = "tool_call"
        else:
            stop = self._stop if self._stop in _DROPS_CALLS else "stop"
        u = self._usage
        usage = Usage(
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_input_tokens or 0,
            cache_write_tokens=u.cache_creation_input_tokens or 0,
        )
        self._respond(content, stop, usage)

    def _item(self, index: int, block: _OpenBlock, keep_calls: bool) -> Any:
        """The response block ``block`` makes, or None (empty text, a dropped call,
        a kind we do not keep)."""
        kind = block.kind
        if kind == "text":
            text = "".join(block.parts)
            return TextBlock(text) if text else None
        if kind == "thinking":
            if block.parts or block.signature:
                return ThinkingBlock("".join(block.parts), "".join(block.signature))
            return None
        if kind == "redacted_thinking":
            return RedactedThinkingBlock(block.parts[0])
        if kind == "tool_use" and keep_calls:
            return self._call(index, block)
        return None


def _has_input(raw: msgspec.Raw) -> bool:
    """Whether a tool_use block's start holds arguments (more than ``{}``)."""
    return bool(raw) and bytes(raw).strip() != b"{}"


def _chunk_of(item: Any) -> Any:
    """A whole response block as the one chunk that streams it."""
    if type(item) is TextBlock:
        return TextDelta(item.text)
    if type(item) is ThinkingBlock:
        return ThinkingDelta(item.thinking, item.signature)
    return item


def _flush(pending: Any, thinking: list[str], signature: list[str]) -> None:
    """Queue the batch's thinking pieces so far as one chunk, and clear them."""
    pending.append(ThinkingDelta("".join(thinking), "".join(signature)))
    thinking.clear()
    signature.clear()


def _misplaced(delta: str, index: int, block: _OpenBlock) -> ModelResponseError:
    return ModelResponseError(f"Anthropic {delta} for block {index}, a {block.kind} block")
