"""An adapter for OpenAI's Responses streaming API (``POST /responses``), stateless:
``store: false``, reasoning items kept encrypted and sent back by the client."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Final, final

import msgspec

from .._settings import ModelSettings
from ..messages._ir import RedactedThinkingBlock, TextBlock, ThinkingBlock
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
from ._responses_wire import PROVIDER, input_items, settings_fields, text_format, tools
from .http._errors import decode_all, stream_error
from .http._http import HTTPStream
from .http._pool import ConnectionPool

if TYPE_CHECKING:
    import ssl

__all__ = ["OpenAIResponsesModel"]


# Wire structs: only the fields the adapter reads (msgspec skips the rest).
class _ErrorBody(msgspec.Struct, gc=False):
    type: str | None = None
    code: str | int | None = None
    message: str | None = None


class _InputDetails(msgspec.Struct, gc=False):
    cached_tokens: TokenCount = 0
    cache_write_tokens: TokenCount = 0


class _Usage(msgspec.Struct, gc=False):
    input_tokens: TokenCount = 0
    input_tokens_details: _InputDetails | None = None
    output_tokens: TokenCount = 0


class _Incomplete(msgspec.Struct, gc=False):
    reason: str | None = None


class _Response(msgspec.Struct, gc=False):
    id: str = ""
    status: str | None = None
    error: _ErrorBody | None = None
    incomplete_details: _Incomplete | None = None
    usage: _Usage | None = None
    model: str | None = None


class _Item(msgspec.Struct, gc=False):
    type: str = ""
    id: str = ""
    status: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    encrypted_content: str | None = None
    summary: list[Any] = []


class _Part(msgspec.Struct, gc=False):
    type: str = ""
    text: str | None = None
    refusal: str | None = None


class _DocumentItem(_Item, gc=False):
    content: list[_Part] = []  # a message's output_text and refusal parts


class _Document(msgspec.Struct, gc=False):
    """A whole response (a server that did not stream)."""

    object: str
    output: list[_DocumentItem]
    id: str = ""
    model: str | None = None
    status: str | None = None
    error: _ErrorBody | None = None
    incomplete_details: _Incomplete | None = None
    usage: _Usage | None = None


class _Event(msgspec.Struct, gc=False):
    type: str
    item_id: str = ""
    output_index: int = 0
    summary_index: int = 0
    delta: str = ""
    arguments: str | None = None
    item: _Item | None = None
    response: _Response | None = None
    error: _ErrorBody | None = None  # the `error` event as recorded: nested
    code: str | int | None = None  # ... and as the SDK declares it: flat
    message: str | None = None


class _Bare(msgspec.Struct, gc=False):
    """Any event of a type this adapter does not read (hosted tools, audio, ...)."""

    type: str


_decoder = msgspec.json.Decoder(_Event)
_document_decoder = msgspec.json.Decoder(_Document)
_DOCUMENT = 'a response ({"object": "response", "output": [...], "status": ...})'
_bare_decoder = msgspec.json.Decoder(_Bare)
_READ: Final = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_summary_text.delta",
        "response.output_item.added",
        "response.output_item.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.completed",
        "response.incomplete",
        "response.failed",
        "error",
    }
)
_DOCUMENT_STATUS: Final = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}
"""A whole response's status, as the terminal event that streams it."""
_INCOMPLETE: Final = {"max_output_tokens": "length", "content_filter": "content_filter"}


@final
class OpenAIResponsesModel(ProviderModel):
    """A ``Model`` speaking OpenAI's Responses streaming API, statelessly.

    ``api_key`` defaults to ``OPENAI_API_KEY``, ``base_url`` to
    ``OPENAI_BASE_URL`` or ``https://api.openai.com/v1``. Requests go with
    ``store: false`` and ``include: ["reasoning.encrypted_content"]``: a
    reasoning model's reasoning items come back as ``RedactedThinkingBlock``
    chunks (the item's JSON, its ``encrypted_content`` as the item's
    ``output_item.done`` gave it) and are sent back exactly so in later
    requests, in their place; reasoning summaries (``reasoning_summary=
    "auto"``) stream as ``ThinkingDelta`` chunks, kept as ``ThinkingBlock``
    and not sent back (the summary travels inside its reasoning item).
    ``max_output_tokens``, ``reasoning_effort`` and ``reasoning_summary``
    are sent when set.
    Text streams as it arrives; a function call becomes one ``ToolCall``
    once the response completed, its arguments parsed strictly (arguments it
    cannot take make it a call answered with an error result, as for
    ``OpenAIChatModel``); calls of an
    incomplete (``length``, ``content_filter``) or refused response are
    dropped, never run. ``Usage.output_tokens`` includes the reasoning
    tokens. Errors are those of ``OpenAIChatModel``: rate limits, 5xx,
    ``server_error``, timeouts and dropped connections raise
    ``TransientModelError``.

    Settings (``settings=``, and each request's over them): ``max_tokens``
    as ``max_output_tokens`` (over the ``max_output_tokens=`` keyword);
    ``temperature`` and ``top_p`` under their own names; ``tool_choice``
    ``"auto"``, ``"none"`` or ``"required"`` as is, a tool's name as
    ``{"type": "function", "name": ...}``; ``parallel_tool_calls`` as is,
    both only with tools; ``reasoning_effort`` as ``"reasoning": {"effort":
    ...}`` (over the ``reasoning_effort=`` keyword, beside
    ``reasoning_summary``'s ``"summary"``). Not sent, the API having no
    such field: ``stop``, ``seed``, ``thinking_budget``. A request's
    ``output`` (native typed output) goes as ``"text": {"format": {"type":
    "json_schema", "name", "schema", "strict"}}``, the schema as given (see
    ``OpenAIChatModel`` for what strict mode takes); the answer streams as
    text. A field goes only when it is set; ``extra_body`` (the constructor's, then the settings')
    is merged last, over everything. ``default_headers`` and the settings'
    ``extra_headers`` go after the adapter's own headers.
    """

    provider = "OpenAI"
    key_variable = "OPENAI_API_KEY"
    default_base_url = "https://api.openai.com/v1"
    max_tokens_fields = ("max_output_tokens",)

    def __init__(
        self,
        model: str,
        *,
        max_output_tokens: int | None = None,
        reasoning_effort: str | None = None,
        reasoning_summary: str | None = None,
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
        self.max_output_tokens = max_output_tokens
        self.reasoning_effort = reasoning_effort  # "minimal", "low", "medium", "high"
        self.reasoning_summary = reasoning_summary  # "auto", "concise", "detailed"

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self._key:  # a server that needs no key gets no authorization header
            headers["authorization"] = f"Bearer {self._key}"
        return headers

    def _max_tokens(self, settings: ModelSettings) -> int | None:
        if settings.max_tokens is not None:
            return settings.max_tokens
        return self.max_output_tokens

    def _url(self) -> str:
        return api_url(self.base_url, "/responses")

    def _body(self, request: ModelRequest, settings: ModelSettings) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        if request.system:
            body["instructions"] = request.system
        body["input"] = input_items(request)
        if request.tools:
            body["tools"] = tools(request)
        body.update(stream=True, store=False, include=["reasoning.encrypted_content"])
        if self.max_output_tokens is not None:
            body["max_output_tokens"] = self.max_output_tokens
        body.update(settings_fields(settings, request))  # a setting wins over a keyword
        reasoning = {
            key: value
            for key, value in (
                ("effort", settings.reasoning_effort or self.reasoning_effort),
                ("summary", self.reasoning_summary),
            )
            if value is not None
        }
        if reasoning:
            body["reasoning"] = reasoning
        if request.output is not None:
            body["text"] = text_format(request.output)
        return body

    def stream(self, request: ModelRequest) -> _ResponsesStream:
        return _ResponsesStream(self._open(request), request, self.max_argument_bytes)


@final
class _ResponsesStream(SSEModelStream):
    """Chunks go out in output order, and the response is built from what went out
    (so the two agree). Consecutive deltas of one kind in one read are merged into
    one chunk. Once a function call is complete, it and everything after it is
    held until the terminal event says whether the calls stand (``completed``) or
    are dropped (incomplete, refused): a call is never streamed and then taken back.
    """

    def __init__(self, http: HTTPStream, request: ModelRequest, max_argument_bytes: int) -> None:
        super().__init__(http, request)
        self._max_argument_bytes = max_argument_bytes
        self._usage: Usage | None = None
        self._stop: str | None = None
        self._refused = False
        self._calls: dict[int, CallParts] = {}  # by output index
        self._summary: tuple[str, int] | None = None  # the summary part deltas go to
        self._held: list[Any] | None = None
        self._holding = Held(PROVIDER)  # the calls and what is held, until the end
        self._sent: list[Any] = []  # every chunk that went out, in order
        self._run: list[str] = []  # the pieces of the delta being merged
        self._run_kind: type | None = None

    # ------------------------------------------------------------ output

    def _emit(self, chunk: Any) -> None:
        if self._held is not None:
            kind = type(chunk)
            if kind is TextDelta:
                self._holding.add(text=len(chunk.text))
            elif kind is ThinkingDelta:
                self._holding.add(thinking=len(chunk.thinking))
            else:  # a reasoning item
                self._holding.add(1, thinking=len(chunk.data))
            self._held.append(chunk)
        else:
            self._out(chunk)

    def _out(self, chunk: Any) -> None:
        kind = type(chunk)
        if kind is TextDelta or kind is ThinkingDelta:
            if kind is not self._run_kind:
                self._flush()
                self._run_kind = kind
            self._run.append(chunk.text if kind is TextDelta else chunk.thinking)
            return
        self._flush()
        self._pending.append(chunk)
        self._sent.append(chunk)

    def _flush(self) -> None:
        if self._run:
            text = "".join(self._run)
            merged = TextDelta(text) if self._run_kind is TextDelta else ThinkingDelta(text)
            self._pending.append(merged)
            self._sent.append(merged)
            self._run.clear()
        self._run_kind = None

    # ------------------------------------------------------------ input

    def _take_all(self, datas: list[bytes]) -> None:
        for event in decode_all(_decoder, datas, PROVIDER, _bare_decoder):
            if self._stop is not None:
                break  # the terminal event was the last
            if type(event) is _Bare:
                if event.type in _READ:
                    raise ModelResponseError(f"{PROVIDER} sent a malformed {event.type} event")
                continue
            self._take(event)
        self._flush()

    def _take_document(self, body: bytes) -> None:
        """A whole response, taken as the events that would stream it, item by item
        in output order: a message's text (and refusal) parts, a reasoning item's
        summary parts, then each item done; then the terminal event its status
        names. Consecutive text merges into one ``TextDelta``, a summary into one
        ``ThinkingDelta``."""
        document = decode_document(_document_decoder, body, PROVIDER, _DOCUMENT)
        terminal = _DOCUMENT_STATUS.get(document.status or "")
        if document.object != "response" or terminal is None:
            what = (
                f"status {document.status!r}"
                if document.object == "response"
                else f"object {document.object!r}"
            )
            raise not_the_shape(
                PROVIDER, _DOCUMENT + " (completed, incomplete or failed)", f"it has {what}"
            )
        self._id = document.id
        for index, item in enumerate(document.output):
            if item.type == "message":
                for part in item.content:
                    if part.type == "output_text":
                        self._take(_Event("response.output_text.delta", delta=part.text or ""))
                    elif part.type == "refusal":
                        self._take(_Event("response.refusal.delta", delta=part.refusal or ""))
            elif item.type == "reasoning":
                for at, summary in enumerate(item.summary):
                    text = summary.get("text") if type(summary) is dict else None
                    if type(text) is str:
                        self._take(
                            _Event(
                                "response.reasoning_summary_text.delta",
                                item_id=item.id,
                                summary_index=at,
                                delta=text,
                            )
                        )
            self._take(_Event("response.output_item.done", output_index=index, item=item))
        response = _Response(
            document.id,
            document.status,
            document.error,
            document.incomplete_details,
            document.usage,
            document.model,
        )
        self._take(_Event(terminal, response=response))
        self._flush()

    def _take(self, event: _Event) -> None:
        kind = event.type
        if kind == "response.output_text.delta":
            if event.delta:
                self._emit(TextDelta(event.delta))
        elif kind == "response.reasoning_summary_text.delta":
            self._summary_delta(event)
        elif kind == "response.function_call_arguments.delta":
            self._slot(event.output_index).add(event.delta)
        elif kind == "response.function_call_arguments.done":
            if event.arguments is not None:  # the whole text: it replaces the pieces
                self._slot(event.output_index).replace(event.arguments)
        elif kind == "response.output_item.added":
            item = event.item
            if item is not None and item.type == "function_call":
                if event.output_index in self._calls:  # it would drop the open call
                    raise ModelResponseError(
                        f"{PROVIDER} added output item {event.output_index} twice"
                    )
                parts = CallParts(self._max_argument_bytes, item.call_id or "", item.name or "")
                self._holding.add(blocks=1)
                self._calls[event.output_index] = parts
        elif kind == "response.output_item.done":
            self._item_done(event)
        elif kind == "response.refusal.delta":
            self._refused = True  # what the model said: shown as text
            if event.delta:
                self._emit(TextDelta(event.delta))
        elif kind in ("response.created", "response.in_progress"):
            if event.response is not None:
                self._id = event.response.id or self._id
                self._model = event.response.model or self._model
        elif kind in ("response.completed", "response.incomplete"):
            self._terminal(event)
        elif kind == "response.failed":
            self._raise(event.response.error if event.response else None)
        elif kind == "error":
            flat = _ErrorBody(code=event.code, message=event.message)
            self._raise(event.error or flat)

    def _slot(self, index: int) -> CallParts:
        slot = self._calls.get(index)
        if slot is None:
            raise ModelResponseError(f"{PROVIDER} sent arguments for unknown output item {index}")
        return slot

    def _summary_delta(self, event: _Event) -> None:
        key = (event.item_id, event.summary_index)
        if self._summary is not None and self._summary != key and self._summary[0] == key[0]:
            self._emit(ThinkingDelta("\n\n"))  # a new part of the same summary
        self._summary = key
        if event.delta:
            self._emit(ThinkingDelta(event.delta))

    def _item_done(self, event: _Event) -> None:
        item = event.item
        if item is None:
            raise ModelResponseError(f"{PROVIDER} sent response.output_item.done with no item")
        if item.type == "reasoning":
            # encrypted_content from .done: the one in .added may be incomplete
            data = {
                "type": "reasoning",
                "id": item.id,
                "summary": item.summary,
                "encrypted_content": item.encrypted_content,
            }
            self._emit(RedactedThinkingBlock(msgspec.json.encode(data).decode()))
        elif item.type == "function_call":
            parts = self._calls.pop(event.output_index, None)
            if parts is None:  # done, never added
                self._holding.add(blocks=1)
                parts = CallParts(self._max_argument_bytes)
            parts.id, parts.name = item.call_id or parts.id, item.name or parts.name
            if not parts.id or not parts.name:
                raise ModelResponseError(f"{PROVIDER} function call item {item.id!r} has no name")
            if item.arguments is not None:
                parts.replace(item.arguments)
            if self._held is None:
                self._held = []
            self._held.append(parts)

    def _terminal(self, event: _Event) -> None:
        response = event.response or _Response()
        self._id = response.id or self._id
        self._model = response.model or self._model
        if event.type == "response.completed":
            self._stop = "stop"
            self._finish_reason = response.status or "completed"
        else:
            reason = response.incomplete_details.reason if response.incomplete_details else None
            self._stop = _INCOMPLETE.get(reason or "", "length")
            self._finish_reason = reason or response.status or "incomplete"
        if response.usage is not None:
            u = response.usage
            details = u.input_tokens_details or _InputDetails()
            self._usage = Usage(
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,  # reasoning tokens included
                cache_read_tokens=details.cached_tokens,
                cache_write_tokens=details.cache_write_tokens,
            )
        self._ended = True

    def _raise(self, error: _ErrorBody | None) -> None:
        error = error or _ErrorBody()
        kind = f"{error.type or ''} {error.code or ''}".strip()
        raise stream_error(PROVIDER, kind or "response.failed", error.message or "")

    # ------------------------------------------------------------ the end

    def _finish(self) -> None:
        if self._stop is None:
            raise TransientModelError(
                f"{PROVIDER} stream ended before response.completed or response.incomplete"
            )
        stop = "refusal" if self._refused and self._stop == "stop" else self._stop
        keep = stop == "stop"  # an incomplete or refused response's calls are dropped
        held = self._held or []
        if keep:  # calls the server never finished, on a completed response
            held += self._calls.values()
        calls = 0
        for chunk in held:
            if type(chunk) is CallParts:
                if not keep:
                    continue
                if not chunk.id or not chunk.name:
                    raise ModelResponseError(f"{PROVIDER} function call has no call_id or name")
                chunk = chunk.call()
                calls += 1
            self._out(chunk)
        self._flush()
        if calls:
            stop = "tool_call"
        self._respond(_blocks(self._sent), stop, self._usage)


def _blocks(chunks: list[Any]) -> list[Any]:
    """The response's content: the chunks that went out, runs of deltas of one
    kind (split between reads) joined into one block."""
    content: list[Any] = []
    for kind, run in itertools.groupby(chunks, type):
        if kind is TextDelta:
            content.append(TextBlock("".join(chunk.text for chunk in run)))
        elif kind is ThinkingDelta:
            content.append(ThinkingBlock("".join(chunk.thinking for chunk in run)))
        else:
            content.extend(run)
    return content
