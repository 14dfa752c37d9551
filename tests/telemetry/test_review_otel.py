"""Review of telemetry as an OpenTelemetry user (2026-12-07): a hostile model's
names and ids are cut on spans, and a tracer or span processor that raises never
fails a turn (nor leaves a span's context current)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import trio
from helpers import add, call
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, Tracer
from otel_helpers import metric_points

from trio_agent import Agent, Usage
from trio_agent.telemetry import _observe
from trio_agent.testing import ScriptedModel, explore_cancellation, scripted_response

pytest.importorskip("opentelemetry.sdk")


def tool_turn(name: str = "add", call_id: str = "c1") -> Agent[Any, Any]:
    script = [
        scripted_response("r1", [call(name, call_id, {"a": 1, "b": 2})]),
        scripted_response("r2", "3"),
    ]
    return Agent(model=ScriptedModel(script), tools=[add])


async def test_a_hostile_tool_name_and_call_id_are_cut_on_spans(debug_sdk):
    """A model naming a tool (and its call id) with 100,000 characters made an
    ``execute_tool`` span whose name, ``gen_ai.tool.name`` and ``gen_ai.tool.call.id``
    were each 100 KB: exported whole, unless the SDK had limits set (it has none
    by default). Cut to 256 characters."""
    exporter, _, opened = debug_sdk
    big = "x" * 100_000
    result = await tool_turn("add" + big, "c" + big).prompt("go")
    assert result.end.reason == "completed"
    assert not opened.open
    for span in exporter.get_finished_spans():
        assert len(span.name) <= 300, span.name[:40]
        for key, value in span.attributes.items():
            assert len(str(value)) <= 300, key
    (tool_span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert tool_span.attributes["gen_ai.tool.name"].startswith("addxxx")


class Raising(SpanProcessor):
    """A span processor that raises when a span starts or ends (a broken exporter
    bridge, a vendor's processor with a bug)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.where == "start":
            raise RuntimeError("processor on_start failed")

    def on_end(self, span: Any) -> None:
        if self.where == "end":
            raise RuntimeError("processor on_end failed")


@pytest.mark.parametrize("where", ["start", "end"])
async def test_a_span_processor_that_raises_never_fails_a_turn(
    where, debug_sdk, monkeypatch, caplog
):
    """A processor raising in ``on_start`` failed the turn with its RuntimeError (from
    ``start_span``); one raising in ``on_end`` failed it from ``span.end()``, in a
    ``finally`` where it would have replaced even a Cancelled. The turn completes;
    the failure is logged once."""
    monkeypatch.setattr(_observe, "_failed_once", False, raising=False)
    trace.get_tracer_provider().add_span_processor(Raising(where))  # type: ignore[attr-defined]
    before = trace.get_current_span()
    first = await tool_turn().prompt("go")
    second = await tool_turn().prompt("go")
    assert first.end.reason == second.end.reason == "completed"
    assert trace.get_current_span() is before
    warned = [r for r in caplog.records if "tracing failed" in r.getMessage()]
    assert len(warned) == 1 and "RuntimeError" in warned[0].getMessage()


async def test_a_tracer_that_raises_leaves_a_cancelled_turn_cancelled(debug_sdk, monkeypatch):
    """A tracer whose ``start_span`` raises: the turn runs untraced, and a
    cancellation of it is still a cancellation (no RuntimeError in its place)."""
    monkeypatch.setattr(_observe, "_failed_once", False, raising=False)

    def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("tracer failed")

    monkeypatch.setattr(Tracer, "start_span", broken)
    assert (await tool_turn().prompt("go")).end.reason == "completed"
    with trio.CancelScope() as scope:
        scope.cancel()
        await tool_turn().prompt("go")
    assert scope.cancelled_caught


class AnthropicLike(ScriptedModel):
    """A scripted model that says it is Anthropic's (whose ``input_tokens`` leave
    the cached ones out)."""

    provider = "Anthropic"
    model = "claude-test"


async def test_anthropic_input_tokens_on_spans_and_metrics_include_the_cached(debug_sdk):
    """``gen_ai.usage.input_tokens`` "SHOULD include all types of input tokens,
    including cached tokens" (the GenAI conventions); an Anthropic answer of 10
    fresh, 1,000 cache-read and 200 cache-written tokens said 10 on its ``chat``
    span, its ``invoke_agent`` span and the token metric. It says 1,210."""
    exporter, reader, _ = debug_sdk
    usage = Usage(input_tokens=10, output_tokens=5, cache_read_tokens=1000, cache_write_tokens=200)
    model = AnthropicLike([scripted_response("r1", "hi", usage=usage)])
    assert (await Agent(model=model).prompt("go")).end.reason == "completed"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    for name in ("chat claude-test", "invoke_agent"):
        assert spans[name].attributes["gen_ai.usage.input_tokens"] == 1210, name
        assert spans[name].attributes["gen_ai.usage.output_tokens"] == 5, name
    chat = spans["chat claude-test"].attributes
    assert chat["gen_ai.usage.cache_read.input_tokens"] == 1000
    assert chat["gen_ai.usage.cache_creation.input_tokens"] == 200
    points = metric_points(reader)["gen_ai.client.token.usage"]
    by_kind = {p.attributes["gen_ai.token.type"]: p.sum for p in points}
    assert by_kind == {"input": 1210, "output": 5}


async def test_sweep_with_a_processor_that_raises_on_end(debug_sdk, monkeypatch):
    """A turn with a tool call and a span processor raising in ``on_end``, cancelled
    after every checkpoint in turn: each run ends as the explorer expects (cancelled
    or completed, never the processor's RuntimeError), no span left open."""
    monkeypatch.setattr(_observe, "_failed_once", False, raising=False)
    exporter, _, opened = debug_sdk
    trace.get_tracer_provider().add_span_processor(Raising("end"))  # type: ignore[attr-defined]

    def check(events: list[Any], result: Any, *rest: Any) -> None:
        assert not opened.open, sorted(opened.open.values())
        exporter.clear()

    report = await explore_cancellation(lambda: tool_turn().turn("go"), check)
    assert report.checkpoints > 5


def test_a_hostile_servers_response_id_model_and_finish_reason_are_cut():
    """A server (or a proxy) answering with a 100,000-character response id, model
    and finish reason put each whole on the ``chat`` span; cut to 256 characters."""
    big = "y" * 100_000
    facts = SimpleNamespace(response_id=big, finish_reason=big, response_model=big)
    said = _observe._response_attributes(facts)
    assert len(said["gen_ai.response.id"]) <= 256
    assert len(said["gen_ai.response.model"]) <= 256
    (reason,) = said["gen_ai.response.finish_reasons"]
    assert len(reason) <= 256
