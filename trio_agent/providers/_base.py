"""The part of a provider adapter that does not depend on the provider."""

from __future__ import annotations

import ipaddress
import os
import ssl
import urllib.parse
from collections import deque
from typing import Annotated, Any, Final, Self, final

import msgspec

from .._settings import ModelSettings, check_headers, check_settings, merge_settings, tool_choice_of
from ..limits import MAX_ASSISTANT_BLOCKS, MAX_STEP_CHUNKS, MAX_STEP_TEXT, MAX_STEP_THINKING
from ..model import (
    ModelError,
    ModelRequest,
    ModelRequestError,
    ModelResponse,
    ModelResponseError,
    TextDelta,
    ThinkingDelta,
)
from ._arguments import MAX_ARGUMENT_BYTES
from .http._errors import without_lone_escapes
from .http._http import HTTPStream
from .http._pool import ConnectionPool
from .http._proxy import proxy_for
from .http._secrets import Redactor, scrub_error

_NO_SETTINGS: Final = ModelSettings()

TokenCount = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
"""A token count in a provider's usage, as the wire structs take it: a negative
one (which would let a turn's usage limits be passed unseen) or one past 64 bits
makes the event one that does not decode."""


class ProviderFacts(msgspec.Struct, frozen=True, gc=False):
    """What the provider said of one response, in its own words, for telemetry
    (``gen_ai.response.*``): a stream's ``provider_facts`` once it is whole.

    ``response_id`` is the provider's id (``chatcmpl-...``, ``resp_...``,
    ``msg_...``; not our ``ModelResponse.id``, which the request id qualifies),
    "" if it sent none; ``finish_reason`` its reason to stop (``tool_calls``,
    ``end_turn``, a Responses status or incomplete reason), not our normalised
    stop reason; ``response_model`` the model that answered, if it said. Made
    once per response, at its end: nothing per chunk."""

    response_id: str
    finish_reason: str | None
    response_model: str | None


def check_base_url(url: object) -> str:
    """``url`` without its trailing ``/``, if it is an http(s) URL with a host and a
    valid port, if any; else ``ValueError`` saying what a base URL looks like. A
    query is kept (``?api-version=...``: the API path goes before it, see
    ``api_url``); a fragment and a user name or password (a secret, which would
    be recorded) are refused, never quoted."""
    if type(url) is not str:
        raise TypeError(f"base_url must be a str, got {type(url).__name__}")
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:
        raise ValueError(
            "base_url must not hold a user name or password (user:password@host): "
            "the API key is passed apart, never in the URL"
        )
    if "#" in url:
        base = url.partition("?")[0].partition("#")[0]
        raise ValueError(
            f"base_url must not have a fragment (#...), got {base!r} with one: a fragment "
            "is never sent"
        )
    example = "(for example http://localhost:8000/v1)"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"base_url must be an http:// or https:// URL with a host, got {url!r} {example}"
        )
    try:
        port = parts.port
    except ValueError:  # not a number, or above 65535
        port = 0
    if port is not None and not 0 < port < 65536:
        raise ValueError(
            f"base_url has a bad port, got {url!r}: a port is a number in 1..65535 {example}"
        )
    path, mark, query = url.partition("?")
    return path.rstrip("/") + mark + query


def is_loopback(base_url: str) -> bool:
    """Whether ``base_url`` (checked) names this machine: ``localhost``, or a
    loopback address (``127.0.0.0/8``, ``::1``). A server there needs no API key
    (Ollama, vLLM, a LiteLLM proxy, llama.cpp): none is asked for."""
    host = urllib.parse.urlsplit(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name, not an address
        return False


def api_url(base_url: str, path: str) -> str:
    """The URL of an API ``path`` under ``base_url``: the path goes before the base
    URL's query, if it has one (``.../deployments/x?api-version=1`` and
    ``/chat/completions`` make ``.../deployments/x/chat/completions?api-version=1``)."""
    base, mark, query = base_url.partition("?")
    return base + path + mark + query


def named_tool(settings: ModelSettings, request: ModelRequest) -> str | None:
    """The tool ``settings.tool_choice`` names, if it names one (not a mode);
    ``ModelRequestError`` if the request does not offer it (the provider would
    refuse the request)."""
    choice = tool_choice_of(settings)
    if choice is None:
        return None
    if not any(t.name == choice for t in request.tools):
        offered = ", ".join(t.name for t in request.tools)
        raise ModelRequestError(
            f"settings.tool_choice names the tool {choice!r}, which the request does not "
            f"offer (it offers: {offered})"
        )
    return choice


class ProviderModel:
    """Base of the adapters: key from the environment, base URL, HTTP client.

    ``api_key`` defaults to the environment variable the provider's own SDK
    reads. The key goes only into request headers: it never appears in
    events, records, errors (in any form a server may echo it in) or
    ``repr``. ``connect_seconds`` and ``read_seconds`` bound one connection
    attempt and the wait for the next piece of the stream (a dropped or
    stalled connection is a transient error). ``ssl_context`` is for https to
    a server the system's trust store does not vouch for (a private CA); by
    default one context with the system's store serves every connection.
    Cancellation closes the HTTP stream at once.

    Connections are kept alive in ``pool`` (a ``ConnectionPool``: the one given,
    or its own, which ``aclose()`` or the end of ``async with model:`` closes).
    ``proxy`` is the proxy its requests go through (a ``_proxy.Proxy``, or
    None), from ``proxy=``: ``"environment"`` (the default) reads the proxy
    variables (``_proxy.proxy_for``) when the model is made; a URL overrides them;
    None goes direct. ``max_argument_bytes`` caps one tool call's arguments:
    a call over it reaches the model as an error result, never a tool.

    ``settings`` (a ``ModelSettings``) apply to every request; a request's own
    ``settings`` (the run's, agent's and turn's, merged) win field by field
    (``settings_for``). ``default_headers`` go with every request, after the
    adapter's own headers (a name given in any case replaces the adapter's
    header of that name: ``anthropic-version``, ``authorization``), then the
    settings' ``extra_headers`` over them. Only the API key is redacted from
    errors: a secret put in a header instead is not. The body is the adapter's
    fields, then ``extra_body`` (the constructor's, then the settings'), which
    win over everything.
    """

    provider = ""
    key_variable = ""
    default_base_url = ""
    max_tokens_fields: tuple[str, ...] = ()
    """The body fields that carry the output-token limit, the one that wins last
    (``max_tokens_for`` reads them in ``extra_body``)."""

    def __init__(
        self,
        model: str,
        *,
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
        if type(model) is not str or not model:
            raise ValueError(f"model must be a model name, got {model!r}")
        if api_key is not None and type(api_key) is not str:
            raise TypeError(f"api_key must be a str or None, got {type(api_key).__name__}")
        self.model = model
        self.base_url = check_base_url(
            base_url
            or os.environ.get(f"{self.key_variable[:-8]}_BASE_URL")
            or self.default_base_url
        )
        key = api_key if api_key is not None else os.environ.get(self.key_variable, "")
        if not key and api_key is None and not is_loopback(self.base_url):
            raise ValueError(
                f'no API key: set {self.key_variable} or pass api_key= (api_key="" for a '
                "server that needs none; one on localhost needs none)"
            )
        self._key = key  # "": no key, and no header carrying one
        for name, value in (("connect_seconds", connect_seconds), ("read_seconds", read_seconds)):
            if type(value) not in (int, float) or not value > 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
            raise TypeError(f"ssl_context must be an ssl.SSLContext or None, got {ssl_context!r}")
        self._ssl_context = ssl_context
        self._extra = dict(extra_body or {})
        self.settings = check_settings(settings)
        self._default_headers = check_headers(default_headers, "default_headers")
        self._connect_seconds = float(connect_seconds)
        self._read_seconds = float(read_seconds)
        if type(max_argument_bytes) is not int or max_argument_bytes < 1:
            raise ValueError(f"max_argument_bytes must be an int >= 1, got {max_argument_bytes!r}")
        self.max_argument_bytes = max_argument_bytes
        if pool is not None and not isinstance(pool, ConnectionPool):
            raise TypeError(f"pool must be a ConnectionPool or None, got {pool!r}")
        if proxy is not None and type(proxy) is not str:
            raise TypeError(f"proxy must be a proxy URL, 'environment' or None, got {proxy!r}")
        parts = urllib.parse.urlsplit(self.base_url)
        self.server_address: str = parts.hostname or ""  # the API's, not a proxy's
        self.server_port: int = parts.port or (443 if parts.scheme == "https" else 80)
        self.proxy = proxy_for(self.base_url, proxy, os.environ)
        secrets = self.proxy.secrets if self.proxy is not None else ()
        secrets = tuple(secret for secret in (key, *secrets) if secret)
        # built once: what the secrets look like (None: there are none)
        self._redactor = Redactor(*secrets) if secrets else None
        self._owns_pool = pool is None
        self.pool = ConnectionPool() if pool is None else pool

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections this model keeps alive (its own pool; a pool given
        with ``pool=`` belongs to whoever made it and stays open). Cancellation
        cannot interrupt it."""
        if self._owns_pool:
            await self.pool.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    def _headers(self) -> dict[str, str]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _url(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def _body(
        self, request: ModelRequest, settings: ModelSettings
    ) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _max_tokens(self, settings: ModelSettings) -> int | None:
        """The output-token limit the adapter's own fields send under ``settings``
        (before ``extra_body``): the setting; an adapter adds its keywords."""
        return settings.max_tokens

    def max_tokens_for(self, request: ModelRequest) -> int | None:
        """The output-token limit ``request`` is sent with, or None if none is
        (``gen_ai.request.max_tokens``): the setting, else the constructor's
        keyword, unless ``extra_body`` (the constructor's, then the settings')
        sets one of ``max_tokens_fields``."""
        settings = self.settings_for(request)
        value: object = self._max_tokens(settings)
        for extra in (self._extra, settings.extra_body or {}):
            for name in self.max_tokens_fields:
                if name in extra:
                    value = extra[name]
        return value if type(value) is int else None

    def settings_for(self, request: ModelRequest) -> ModelSettings:
        """The settings ``request`` is sent with: this model's, and the request's
        over them field by field."""
        return merge_settings(self.settings, request.settings) or _NO_SETTINGS

    def encode_request(self, request: ModelRequest) -> bytes:
        """The JSON body this adapter sends for ``request``."""
        settings = self.settings_for(request)
        body = self._body(request, settings)
        if self._extra:
            body.update(self._extra)
        if settings.extra_body:
            body.update(settings.extra_body)
        return msgspec.json.encode(body)

    def request_headers(self, request: ModelRequest) -> dict[str, str]:
        """The headers sent with ``request``: the adapter's, ``default_headers``,
        then the settings' ``extra_headers``."""
        headers = self._headers()
        headers.update(self._default_headers)
        extra = self.settings_for(request).extra_headers
        if extra:
            try:
                headers.update(check_headers(extra, "settings.extra_headers"))
            except (TypeError, ValueError) as exc:
                raise ModelRequestError(str(exc)) from None
        return headers

    def _open(self, request: ModelRequest) -> HTTPStream:
        return HTTPStream(
            self._url(),
            self.request_headers(request),
            self.encode_request(request),
            self.provider,
            self._redactor,
            self._connect_seconds,
            self._read_seconds,
            self._ssl_context,
            self.pool,
            self.proxy,
        )


_SOFT_CHUNKS: Final = MAX_STEP_CHUNKS * 3 // 4
"""Chunks a stream hands out one by one, as they came; past it, deltas are merged."""
_HOLD_CHARS: Final[dict[type, int]] = {TextDelta: 512, ThinkingDelta: 16384}
"""The most characters a merged delta waits for (``SSEModelStream._merged_delta``):
past the soft limit, a step's whole ``MAX_STEP_TEXT`` goes out in 128 chunks
more and its ``MAX_STEP_THINKING`` in 64, which leaves 64 of the 256 for calls,
redacted thinking and changes of kind."""
_MERGEABLE: Final = frozenset({TextDelta, ThinkingDelta})


@final
class Held:
    """What a stream holds back until its message ends (tool calls; in the
    Anthropic and Responses streams, the blocks after the first call too),
    counted against the step limits no message past them passes: blocks (a call
    is one), code points of text, of thinking (signatures and redacted data
    included). One more than a limit is a ``ModelResponseError`` at once: held
    until the body ended, a server that never ends it would fill the memory."""

    __slots__ = ("_provider", "blocks", "text", "thinking")

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self.blocks = 0
        self.text = 0
        self.thinking = 0

    def add(self, blocks: int = 0, text: int = 0, thinking: int = 0) -> None:
        self.blocks += blocks
        self.text += text
        self.thinking += thinking
        for what, count, limit in (
            ("blocks (tool calls among them)", self.blocks, MAX_ASSISTANT_BLOCKS),
            ("characters of text held back", self.text, MAX_STEP_TEXT),
            ("characters of thinking held back", self.thinking, MAX_STEP_THINKING),
        ):
            if count > limit:
                raise ModelResponseError(
                    f"{self._provider} sent more than {limit} {what} in one message"
                )


class SSEModelStream:
    """The open stream of an adapter: reads events, hands them to ``_take_all``,
    yields the chunks it queued, and calls ``_finish`` at the end of the body to
    build the response (and queue the tool calls, now complete).

    A server that answered one whole JSON document instead of a stream (the
    HTTP client's ``document``: a proxy's mocked model, a server that ignored
    ``stream``) is handed to ``_take_document`` at open: the adapter decodes the
    provider's non-streamed shape and takes it as the events it stands for
    (its text one delta, each thinking block one), so ``_finish`` builds the
    response exactly as for a stream.

    Every error leaves an adapter through here (``__aenter__``, ``__anext__``;
    ``response`` reads through ``__anext__``), and every ``ModelError`` is
    scrubbed on its way out (``scrub_error``): the texts the server sent, quoted
    raw by the HTTP client and the adapters, lose the key and are capped.
    """

    def __init__(self, http: HTTPStream, request: ModelRequest) -> None:
        self._http = http
        self._request = request
        self._pending: deque[Any] = deque()
        self._ended = False  # the provider said the message is over
        self._response: ModelResponse | None = None
        self._given = 0  # chunks handed out
        # the provider's own words, which the adapter notes as they come (see _respond)
        self._id = ""
        self._finish_reason: str | None = None
        self._model: str | None = None
        self.provider_facts: ProviderFacts | None = None  # once the response is whole

    def _take_all(self, datas: list[bytes]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _finish(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _respond(self, content: list[Any], stop: str, usage: Any) -> None:
        """The end: the response (its id ours, qualified by the request's) and the
        provider's facts about it, from what the adapter noted."""
        self._response = finish_response(self._id, self._request, content, stop, usage)
        self.provider_facts = ProviderFacts(self._id, self._finish_reason, self._model or None)

    def _take_document(self, body: bytes) -> None:  # pragma: no cover - abstract
        """Take ``body``, the provider's whole non-streamed response, as the events
        it stands for; ``ModelResponseError`` naming the expected shape if it is
        not one."""
        raise NotImplementedError

    async def __aenter__(self) -> Any:
        try:
            await self._http.open()
            if self._http.document is not None:
                await self._take_whole(self._http.document)
        except ModelError as exc:
            scrub_error(exc, self._http.secret)
            raise
        return self

    async def _take_whole(self, document: bytes) -> None:
        """Take the whole document the server answered; the connection, open (the
        caller's ``async with`` never started), is closed if it is refused."""
        taken = False
        try:
            self._take_document(document)  # synchronous: no await, no cancellation here
            taken = True
        finally:
            if not taken:
                await self._http.aclose()
        self._ended = True  # the whole message: nothing more to read

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            if exc_info[0] is None and self._ended and self._response is not None:
                # the message is whole and taken: the body's end is read (bounded) only
                # now, to keep the connection, so the response never waits for it
                await self._http.drain()
        finally:
            await self._http.aclose()

    def __aiter__(self) -> Any:
        return self

    async def __anext__(self) -> Any:
        pending = self._pending
        if pending and self._given < _SOFT_CHUNKS:  # nearly always: a read queues many
            self._given += 1
            return pending.popleft()
        try:  # free until something raises
            while not pending:
                if not await self._read_more():
                    raise StopAsyncIteration
            if self._given >= _SOFT_CHUNKS and type(pending[0]) in _MERGEABLE:
                chunk = await self._merged_delta()
            else:
                chunk = pending.popleft()
        except ModelError as exc:
            scrub_error(exc, self._http.secret)
            raise
        self._given += 1
        return chunk

    async def _read_more(self) -> bool:
        """Queue what the next read brings (or the end's response and calls);
        False once everything has been queued and taken."""
        if self._response is not None:
            return False
        if not self._ended:
            events = await self._http.next_events()
            if events is None:
                self._finish()
                return True
            if events:
                self._take_all(events)
            if self._http.events_ended:  # data: [DONE], for every adapter: the message is over
                self._ended = True
        if self._ended:  # the response now: the rest of the body, its end, is read at exit
            self._finish()
        return True

    async def _merged_delta(self) -> Any:
        """Past ``_SOFT_CHUNKS`` chunks, a text or thinking delta waits for the next
        ones of its kind and goes out merged with them (up to ``_HOLD_CHARS`` of its
        kind), so a long answer streamed one small delta per read stays within
        ``MAX_STEP_CHUNKS``. Merging pieces of one kind is what the step check
        does anyway: the response is unchanged. Cancelled while it waits for a
        read, it puts what it merged back, to be handed out next: nothing lost."""
        pending = self._pending
        kind = type(pending[0])
        hold = _HOLD_CHARS[kind]
        texts: list[str] = []
        signatures: list[str] = []
        size = 0
        done = False
        try:
            while size < hold:
                if not pending:
                    if not await self._read_more():
                        break
                    continue
                if type(pending[0]) is not kind:
                    break
                piece = pending.popleft()
                if kind is TextDelta:
                    texts.append(piece.text)
                    size += len(piece.text)
                else:
                    texts.append(piece.thinking)
                    signatures.append(piece.signature)
                    size += len(piece.thinking) + len(piece.signature)
            done = True
        finally:
            merged = (
                TextDelta("".join(texts))
                if kind is TextDelta
                else ThinkingDelta("".join(texts), "".join(signatures))
            )
            if not done and texts:
                pending.appendleft(merged)  # interrupted: it goes out next time
        return merged

    async def response(self) -> ModelResponse:
        """The final response (the rest of the stream is read first)."""
        if self._response is None:
            async for _ in self:
                pass
        assert self._response is not None
        return self._response


def decode_document(
    decoder: msgspec.json.Decoder[Any], body: bytes, provider: str, what: str
) -> Any:
    """``body`` decoded as the provider's non-streamed response (``what``, the shape
    said in words), or ``ModelResponseError`` naming the shape expected."""
    try:
        return decoder.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        repaired = without_lone_escapes(body)  # as decode_all: U+FFFD for a lone surrogate
        if repaired != body:
            try:
                return decoder.decode(repaired)
            except (msgspec.DecodeError, RecursionError):
                pass
        raise not_the_shape(provider, what, str(exc)) from None


def not_the_shape(provider: str, what: str, why: str) -> ModelResponseError:
    """The error for a whole JSON document that is not ``what``, saying ``why``."""
    return ModelResponseError(
        f"{provider} answered one JSON document (HTTP 200, not an event stream) that is "
        f"not {what}: {why}"
    )


def finish_response(
    response_id: str, request: ModelRequest, content: list[Any], stop: str, usage: Any
) -> ModelResponse:
    # Qualified by the request id: compatible servers may repeat response ids, and
    # a transcript's message ids must be unique.
    return ModelResponse(
        id=f"{request.id}.{response_id or 'response'}",
        request_id=request.id,
        content=tuple(content),
        stop_reason=stop,  # type: ignore[arg-type]
        usage=usage,
    )
