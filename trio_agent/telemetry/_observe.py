"""What a turn reports to the application's observability: OpenTelemetry GenAI
spans and metrics, and the ``trio_agent.loop`` debug log of its steps and
tool calls.

Free when off: ``observer()`` is asked once per turn and gives None unless
the application has configured an OpenTelemetry tracer or meter provider
(``opentelemetry`` is never imported by us: if the application has not
imported it, nothing can be configured) or turned on ``trio_agent.loop``'s
DEBUG level; the loop then pays one ``is None`` test per attempt and per tool
call.

Spans follow the GenAI semantic conventions: ``invoke_agent`` per turn (or
run), ``chat {model}`` per attempt, ``execute_tool {tool}`` per call, both
children of the turn's span (a parallel batch's calls are siblings). Each is
ended exactly once, by the code that started it, with its status set on
failure and on cancellation. Content (messages, arguments, results) is
recorded only when asked (``trio_agent.telemetry.configure``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, final

import trio

from .._log import LOOP
from ..messages._ir import AssistantMessage, ToolCall, ToolResultMessage
from ..model import Model, ModelRequest, Usage
from ._content import capturing, record_answer, record_request, record_tool

if TYPE_CHECKING:
    from ..tools._tool import ToolRegistry

__all__ = ["Observer", "SpanHandle", "observer"]

_TOKEN_BUCKETS: Final = [4.0**n for n in range(14)]  # 1 .. 67108864, as the conventions advise
_SECONDS_BUCKETS: Final = [0.01 * 2.0**n for n in range(14)]  # 0.01 .. 81.92 s
_VERSION: Final = "0.1.0"
_MAX_TEXT: Final = 256  # a model-given name or id on a span: longer is cut, never exported whole


def _bounded(text: str) -> str:
    """``text`` cut to ``_MAX_TEXT`` characters: a tool call's name and id, the
    provider's response id and model are the model's (or a server's) words, and
    a hostile one must not make every span it touches megabytes long."""
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


_failed_once = False


@final
class _never_fails:
    """Run a call into OpenTelemetry (a tracer, a span, a span processor, a
    metric) so that its failure never fails the turn: logged (the first only),
    then left. Cancellation is no Exception and passes through untouched. A
    class, not a generator: it is entered several times a span."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        pass

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> bool:
        global _failed_once
        if kind is None or not issubclass(kind, Exception):
            return False
        if not _failed_once:
            _failed_once = True
            LOOP.warning("tracing failed %s (%s): left out", self.what, kind.__name__)
        return True


@final
class _Instruments:
    """The tracer and metric instruments of one provider pair, made once."""

    __slots__ = ("duration", "provider", "span_kind", "status", "tokens", "trace", "tracer")

    def __init__(self, trace: Any, tracer_provider: Any, meter_provider: Any) -> None:
        self.trace = trace
        self.provider = (tracer_provider, meter_provider)
        self.tracer = (
            None if tracer_provider is None else tracer_provider.get_tracer("trio_agent", _VERSION)
        )
        self.span_kind = None if trace is None else trace.SpanKind
        self.status = None if trace is None else (trace.Status, trace.StatusCode)
        self.tokens = self.duration = None
        if meter_provider is not None:
            meter = meter_provider.get_meter("trio_agent", _VERSION)
            self.tokens = meter.create_histogram(
                "gen_ai.client.token.usage",
                unit="{token}",
                description="Number of input and output tokens used.",
                explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
            )
            self.duration = meter.create_histogram(
                "gen_ai.client.operation.duration",
                unit="s",
                description="GenAI operation duration.",
                explicit_bucket_boundaries_advisory=_SECONDS_BUCKETS,
            )


_made: _Instruments | None = None


def _configured_tracer_provider() -> tuple[Any, Any]:
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None, None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return trace, None
    return trace, provider


def _configured_meter_provider() -> Any:
    metrics = sys.modules.get("opentelemetry.metrics")
    if metrics is None:
        return None
    provider = metrics.get_meter_provider()
    if isinstance(provider, metrics.NoOpMeterProvider) or type(provider).__name__.startswith(
        "_Proxy"
    ):
        return None
    return provider


def _instruments() -> _Instruments | None:
    """The instruments for the providers configured now, or None when none is."""
    global _made
    trace, tracer_provider = _configured_tracer_provider()
    meter_provider = _configured_meter_provider()
    if tracer_provider is None and meter_provider is None:
        return None
    if _made is None or _made.provider != (tracer_provider, meter_provider):
        if trace is None:
            trace = sys.modules.get("opentelemetry.trace")
        _made = _Instruments(trace, tracer_provider, meter_provider)
    return _made


def observer(
    model: Model, session_id: str | None, turn: int | None, name: str | None = None
) -> Observer | None:
    """The observer of one turn (or run), or None when nothing observes it.
    Tracing never fails a turn: an OpenTelemetry that cannot make our
    instruments (too old an API, a broken provider) is logged once and left."""
    global _broken
    instruments = None
    if not _broken:
        try:
            instruments = _instruments()
        except Exception as exc:
            _broken = True
            LOOP.warning("tracing is off: OpenTelemetry failed (%s)", type(exc).__name__)
    debug = LOOP.isEnabledFor(logging.DEBUG)
    if instruments is None and not debug:
        return None
    return Observer(instruments, debug, model, session_id, turn, name)


_broken = False


def _model_names(model: Model) -> tuple[str, str | None]:
    """``gen_ai.provider.name`` (the conventions' lower-case names: ``openai``,
    ``anthropic``; a model of another kind by its class) and the model's name."""
    provider = getattr(model, "provider", None)
    if isinstance(provider, str) and provider:
        provider = provider.lower()
    else:
        provider = type(model).__name__
    name = getattr(model, "model", None)
    return provider, name if isinstance(name, str) else None


def _input_tokens(usage: Usage, provider: str) -> int:
    """``gen_ai.usage.input_tokens`` as the conventions count it: every input
    token, the cached ones too. Anthropic's ``input_tokens`` leave its cache
    reads and writes out (``Usage`` keeps them so, as billed): added here."""
    if provider == "anthropic":
        return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    return usage.input_tokens


@final
class SpanHandle:
    """One span and the context that makes it current; ``end`` ends it once."""

    __slots__ = (
        "_ended",
        "_observer",
        "_token",
        "label",
        "measured",
        "provider",
        "span",
        "started",
    )

    def __init__(self, observer: Observer, span: Any, label: str = "") -> None:
        self._observer = observer
        self.label = label
        self.provider = observer.provider  # a chat span's: its model's, a fallback's own
        self.measured: dict[str, Any] = {}  # a chat span's: its metrics' attributes
        self.span = span
        self._token: object = None
        self._ended = False
        self.started = time.perf_counter()

    def enter(self) -> None:
        """Make the span current in this task (until ``end``): what runs inside
        (a tool's own instrumentation, an agent it calls) is its child."""
        if self.span is not None:
            from opentelemetry import context  # imported already: the span came from it

            trace = self._observer.instruments.trace  # type: ignore[union-attr]
            with _never_fails("making a span current"):
                self._token = context.attach(trace.set_span_in_context(self.span))

    def end(self, error: BaseException | str | None = None) -> None:
        """End the span (once), its status an error when ``error`` is given
        (an exception, or a code); the context it made current is left."""
        if self._ended:
            return
        self._ended = True
        if self._token is not None:
            from opentelemetry import context

            with _never_fails("leaving a span's context"):
                context.detach(self._token)  # type: ignore[arg-type]
        span = self.span
        if span is None:
            return
        with _never_fails("ending a span"):
            if error is not None:
                # its type or code only: an error's text may quote a message or arguments
                kind = _error_type(error)
                span.set_attribute("error.type", kind)
                status, code = self._observer.instruments.status  # type: ignore[union-attr, misc]
                span.set_status(status(code.ERROR, kind))
        with _never_fails("ending a span"):
            span.end()


def _error_type(error: BaseException | str) -> str:
    if isinstance(error, str):
        return error
    if isinstance(error, trio.Cancelled | BaseExceptionGroup) and _all_cancelled(error):
        return "cancelled"
    return type(error).__qualname__


def _all_cancelled(error: BaseException) -> bool:
    if isinstance(error, BaseExceptionGroup):
        return all(_all_cancelled(e) for e in error.exceptions)
    return isinstance(error, trio.Cancelled)


@final
class Observer:
    """Starts and ends the spans of one turn and logs its steps at DEBUG."""

    __slots__ = (
        "base",
        "capture",
        "debug",
        "instruments",
        "model",
        "model_name",
        "provider",
        "server",
        "step_span",
        "turn_span",
    )

    def __init__(
        self,
        instruments: _Instruments | None,
        debug: bool,
        model: Model,
        session_id: str | None,
        turn: int | None,
        name: str | None,
    ) -> None:
        self.instruments = instruments
        self.debug = debug
        self.model = model
        self.provider, self.model_name = _model_names(model)
        self.capture = capturing()
        base: dict[str, Any] = {"gen_ai.provider.name": self.provider}
        if self.model_name is not None:
            base["gen_ai.request.model"] = self.model_name
        if session_id is not None:
            base["gen_ai.conversation.id"] = session_id
            base["trio_agent.session_id"] = session_id
        self.base = base
        self.server = _server_attributes(model)  # the chat spans' and the metrics'
        attributes = {"gen_ai.operation.name": "invoke_agent", **base}
        if turn is not None:
            attributes["trio_agent.turn"] = turn
        if name is not None:
            attributes["gen_ai.agent.name"] = name
        title = "invoke_agent" if name is None else f"invoke_agent {name}"
        self.turn_span = self._start(title, attributes, None, False)
        self.step_span: SpanHandle | None = None  # the attempt that answered, last step

    def _start(
        self, title: str, attributes: dict[str, Any], parent: SpanHandle | None, client: bool
    ) -> SpanHandle:
        instruments = self.instruments
        if instruments is None or instruments.tracer is None:
            return SpanHandle(self, None)
        trace = instruments.trace
        context = (
            None
            if parent is None or parent.span is None
            else (trace.set_span_in_context(parent.span))
        )
        kind = instruments.span_kind.CLIENT if client else instruments.span_kind.INTERNAL  # type: ignore[union-attr]
        span = None
        with _never_fails("starting a span"):  # the turn runs on, this span untraced
            span = instruments.tracer.start_span(
                title, context=context, kind=kind, attributes=attributes
            )
        return SpanHandle(self, span)

    # -- the turn
    def end_turn(self, reason: str, steps: int, usage: Usage | None, error: str | None) -> None:
        span = self.turn_span.span
        if span is not None:
            with _never_fails("ending the turn's span"):
                span.set_attribute("trio_agent.turn.end", reason)
                span.set_attribute("trio_agent.steps", steps)
                if usage is not None:
                    tokens = _input_tokens(usage, self.provider)
                    span.set_attribute("gen_ai.usage.input_tokens", tokens)
                    span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        self.turn_span.end(error)

    # -- attempts
    def start_attempt(
        self, request: ModelRequest, attempt: int, model: Model | None = None
    ) -> SpanHandle:
        """Start an attempt's ``chat`` span, named after its ``model`` (the turn's,
        or one of its ``FallbackModel``'s)."""
        if self.debug:
            LOOP.debug(
                "%s attempt %d: %d messages, %d tools",
                request.id,
                attempt,
                len(request.messages),
                len(request.tools),
            )
        base, server, name, provider = self.base, self.server, self.model_name, self.provider
        if model is None or model is self.model:
            model = self.model
        else:  # one of a FallbackModel's: its own names and server
            provider, name = _model_names(model)
            base = {**base, "gen_ai.provider.name": provider}
            base.pop("gen_ai.request.model", None)
            if name is not None:
                base["gen_ai.request.model"] = name
            server = _server_attributes(model)
        measured = {"gen_ai.operation.name": "chat", **base, **server}
        attributes = {
            **measured,
            "trio_agent.request_id": request.id,
            "trio_agent.attempt": attempt,
            **_settings_attributes(model, request),
        }
        title = f"chat {name}" if name else "chat"
        handle = self._start(title, attributes, self.turn_span, True)
        handle.label = f"{request.id} attempt {attempt}"
        handle.provider, handle.measured = provider, measured
        handle.enter()
        if self.capture and handle.span is not None:
            with _never_fails("recording a request"):
                record_request(handle.span, request)
        return handle

    def end_attempt(
        self,
        handle: SpanHandle,
        answer: tuple[AssistantMessage, str, Usage | None, Any] | None,
        error: BaseException | str | None,
    ) -> None:
        """End an attempt's span: with its ``answer`` (the message, stop reason,
        usage and the stream's ``provider_facts``), the response's attributes in
        the provider's words where it gave them; else the ``error``."""
        span = handle.span
        elapsed = time.perf_counter() - handle.started
        usage = None if answer is None else answer[2]
        if span is not None and answer is not None:
            with _never_fails("ending a chat span"):
                self._answered(span, answer, handle.provider)
        if answer is not None:
            self.step_span = handle  # the step's tool calls are its children
        with _never_fails("recording a metric"):
            self._measure(elapsed, usage, error, handle)
        if self.debug:
            outcome = (
                "answered" if answer is not None else f"failed ({_error_type(error or 'error')})"
            )
            LOOP.debug("%s %s in %.3f s", handle.label, outcome, elapsed)
        handle.end(None if answer is not None else error or "error")

    def _answered(
        self, span: Any, answer: tuple[AssistantMessage, str, Usage | None, Any], provider: str
    ) -> None:
        """The response's attributes on a ``chat`` span (and its content, if captured)."""
        message, stop_reason, usage, facts = answer
        said = _response_attributes(facts)
        if "gen_ai.response.id" not in said:  # a model without facts: our id
            said["gen_ai.response.id"] = _bounded(message.id.removeprefix("message-"))
        said.setdefault("gen_ai.response.finish_reasons", (stop_reason,))
        for key, value in said.items():
            span.set_attribute(key, value)
        if usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", _input_tokens(usage, provider))
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            if usage.cache_read_tokens:
                span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens)
            if usage.cache_write_tokens:
                span.set_attribute(
                    "gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens
                )
        if self.capture:
            record_answer(span, message)

    def _measure(
        self,
        elapsed: float,
        usage: Usage | None,
        error: BaseException | str | None,
        handle: SpanHandle,
    ) -> None:
        """The attempt's duration and tokens, labelled with the model that made
        it (behind a ``FallbackModel``: the one that answered or failed)."""
        instruments = self.instruments
        if instruments is None or instruments.duration is None:
            return
        attributes = dict(handle.measured)
        attributes.pop("gen_ai.conversation.id", None)  # no per-session metric series
        attributes.pop("trio_agent.session_id", None)
        if error is not None:
            attributes["error.type"] = _error_type(error)
        instruments.duration.record(elapsed, attributes)
        if usage is not None and instruments.tokens is not None:
            counts = (
                ("input", _input_tokens(usage, handle.provider)),
                ("output", usage.output_tokens),
            )
            for kind, count in counts:
                instruments.tokens.record(count, {**attributes, "gen_ai.token.type": kind})

    # -- tool calls
    async def run_tool(
        self,
        call: ToolCall,
        execute: Callable[[ToolRegistry, ToolCall], Awaitable[ToolResultMessage]],
        tools: ToolRegistry,
    ) -> ToolResultMessage:
        """``execute(tools, call)`` in an ``execute_tool`` span (current while it
        runs); the span ends whatever happens, cancelled or failed too."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": _bounded(call.name),
            "gen_ai.tool.call.id": _bounded(call.id),
            "gen_ai.tool.type": "function",
            **self.base,
        }
        if self.debug:
            LOOP.debug("tool %s call %s started", call.name, call.id)
        parent = self.step_span or self.turn_span  # none yet: a held call of a past turn
        handle = self._start(f"execute_tool {_bounded(call.name)}", attributes, parent, False)
        handle.enter()
        result: ToolResultMessage | None = None
        try:
            result = await execute(tools, call)
            return result
        finally:
            error = sys.exc_info()[1]
            if result is not None and self.capture and handle.span is not None:
                with _never_fails("recording a tool call"):
                    record_tool(handle.span, call, result)
            if self.debug:
                how = "error result" if result is not None and result.is_error else "result"
                LOOP.debug(
                    "tool %s call %s ended: %s in %.3f s",
                    call.name,
                    call.id,
                    how if result is not None else _error_type(error or "error"),
                    time.perf_counter() - handle.started,
                )
            if result is None:
                handle.end(error or "error")
            else:
                handle.end("tool_error" if result.is_error else None)


def _server_attributes(model: Model) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of a model that says where its API
    is (``server_address``, ``server_port``: the provider adapters do)."""
    address = getattr(model, "server_address", None)
    port = getattr(model, "server_port", None)
    out: dict[str, Any] = {}
    if isinstance(address, str) and address:
        out["server.address"] = address
        if type(port) is int:
            out["server.port"] = port
    return out


def _response_attributes(facts: Any) -> dict[str, Any]:
    """``gen_ai.response.id``, ``.finish_reasons`` and ``.model`` from a stream's
    ``provider_facts`` (``providers.ProviderFacts``: the provider's own words),
    each only if given as a non-empty string."""
    out: dict[str, Any] = {}
    if facts is None:
        return out
    for field, key in (
        ("response_id", "gen_ai.response.id"),
        ("finish_reason", "gen_ai.response.finish_reasons"),
        ("response_model", "gen_ai.response.model"),
    ):
        value = getattr(facts, field, None)
        if isinstance(value, str) and value:
            value = _bounded(value)  # the server's words: a hostile one's are cut
            out[key] = (value,) if field == "finish_reason" else value
    return out


def _settings_attributes(model: Model, request: ModelRequest) -> dict[str, Any]:
    """The request settings the conventions name (never headers or bodies: they
    may carry secrets); ``max_tokens`` as the model sends it when it says
    (``max_tokens_for``: a provider adapter's keyword or ``extra_body`` too)."""
    given = request.settings
    own = getattr(model, "settings", None)
    out: dict[str, Any] = {}
    for field, key in (
        ("max_tokens", "gen_ai.request.max_tokens"),
        ("temperature", "gen_ai.request.temperature"),
        ("top_p", "gen_ai.request.top_p"),
        ("seed", "gen_ai.request.seed"),
        ("stop", "gen_ai.request.stop_sequences"),
    ):
        value = getattr(given, field, None) if given is not None else None
        if (value is None or value == ()) and own is not None:
            value = getattr(own, field, None)
        if value is None or (isinstance(value, list | tuple) and not value):
            continue  # unset, or no stops
        out[key] = tuple(value) if isinstance(value, list | tuple) else value
    sent = getattr(model, "max_tokens_for", None)
    if callable(sent):
        try:
            limit = sent(request)
        except Exception:  # telemetry never fails a turn; the request says why itself
            limit = None
        out.pop("gen_ai.request.max_tokens", None)  # the model knows what it sends
        if type(limit) is int:
            out["gen_ai.request.max_tokens"] = limit
    return out
