"""Regressions from issue 21's review: OpenTelemetry defects. Run with
.venv/bin/python -m pytest -q tests/test_review21_otel.py"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from helpers import call
from opentelemetry import trace
from otel_helpers import otel_sdk

from trio_agent import Agent, ModelSettings, RetryPolicy, TransientModelError, UserMessage, tool
from trio_agent.testing import ScriptedModel, scripted_response
from trio_agent.tools import FatalToolError

SECRET = "the launch code is 0451"


@pytest.fixture
def sdk(caplog):
    with otel_sdk() as configured:
        yield configured
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]


def everything(spans: Any) -> str:
    return repr(
        [
            (
                s.name,
                dict(s.attributes),
                s.status.description,
                [(e.name, dict(e.attributes)) for e in s.events],
            )
            for s in spans
        ]
    )


def by_name(spans):
    out = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


# --- 1. error messages (which quote content) reach span status with capture off
async def test_a_model_error_message_reaches_the_chat_span_status(sdk, autojump_clock):
    exporter, _, _ = sdk
    flaky = scripted_response(
        "a1", "x", raise_at=0, error=TransientModelError(f"400: could not parse {SECRET!r}")
    )
    agent = Agent(
        model=ScriptedModel([flaky, scripted_response("ok", "done")]),
        retry=RetryPolicy(jitter=0),
    )
    await agent.prompt("go")
    spans = exporter.get_finished_spans()
    assert SECRET not in everything(spans), [s.status.description for s in spans]


@tool
async def fatal(text: str) -> str:
    """Fails fatally, quoting its argument."""
    raise FatalToolError(f"cannot handle {text}")


async def test_a_fatal_tool_error_message_reaches_the_tool_span_status(sdk):
    exporter, _, _ = sdk
    script = [scripted_response("r1", [call("fatal", "c1", {"text": SECRET})])]
    agent = Agent(model=ScriptedModel(script), tools=[fatal])
    await agent.prompt("go")
    spans = exporter.get_finished_spans()
    assert SECRET not in everything(spans), [s.status.description for s in spans]


# --- 2. the agent's name: see tests/test_telemetry.py (agent tools, Agent(name=))


# --- 3. stop_sequences: an unset stop is an empty attribute, and hides the model's
class Configured(ScriptedModel):
    provider = "OpenAI"
    model = "m"
    settings = ModelSettings(stop=("END",), temperature=0.5)


async def test_stop_sequences_unset_in_the_request_hide_the_models(sdk):
    exporter, _, _ = sdk
    agent = Agent(
        model=Configured([scripted_response("r1", "hi")]), settings=ModelSettings(max_tokens=5)
    )
    await agent.prompt("go")
    [chat] = by_name(exporter.get_finished_spans())["chat m"]
    assert chat.attributes.get("gen_ai.request.stop_sequences") == ("END",), dict(chat.attributes)


# --- 5. the current span is the caller's again after the turn, however it ended
async def test_the_callers_context_is_restored(sdk):
    exporter, _, _ = sdk
    tracer = trace.get_tracer("app")
    with tracer.start_as_current_span("request") as outer:
        await Agent(model=ScriptedModel([scripted_response("r1", "hi")])).prompt("go")
        assert trace.get_current_span() is outer


# --- 1b. the same through a real provider: the server's 400 message quotes the prompt
async def test_a_provider_400_quoting_the_prompt_reaches_the_span(sdk, loopback):
    from loopback import Reply

    from trio_agent.providers import OpenAIChatModel

    exporter, _, _ = sdk
    body = json.dumps(
        {
            "error": {
                "message": f"Invalid content: '{SECRET}' violates policy",
                "type": "invalid_request_error",
            }
        }
    ).encode()
    loopback.replies.append(Reply(status=400, body=body))
    model = OpenAIChatModel("gpt-4o-mini", api_key="sk-x-0123456789", base_url=f"{loopback.url}/v1")
    try:
        result = await Agent(model=model).prompt(SECRET)
    finally:
        await model.aclose()
    assert result.end.reason == "failed"
    spans = exporter.get_finished_spans()
    assert SECRET not in everything(spans), [s.status.description for s in spans]


async def test_a_401_quoting_the_key_does_not_reach_the_span(sdk, loopback):
    from loopback import Reply

    from trio_agent.providers import OpenAIChatModel

    exporter, _, _ = sdk
    key = "sk-proj-abcdefghijklmnop0123456789"
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {key}"}}).encode()
    loopback.replies.append(Reply(status=401, body=body))
    model = OpenAIChatModel("gpt-4o-mini", api_key=key, base_url=f"{loopback.url}/v1")
    try:
        await Agent(model=model).prompt("hi")
    finally:
        await model.aclose()
    spans = exporter.get_finished_spans()
    assert key not in everything(spans), [s.status.description for s in spans]


@tool
async def sleepy() -> str:
    """Sleeps."""
    await trio.sleep(10)
    return "late"


async def test_the_callers_context_is_restored_after_a_cancelled_turn(sdk):
    exporter, _, opened = sdk
    tracer = trace.get_tracer("app")
    with tracer.start_as_current_span("request") as outer:
        script = [
            scripted_response("r1", [call("sleepy", "c1", {})]),
            scripted_response("r2", "x"),
        ]
        agent = Agent(model=ScriptedModel(script), tools=[sleepy])
        with trio.move_on_after(0.05):
            await agent.prompt("go")
        assert trace.get_current_span() is outer
    assert not opened.open
    [turn] = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent"]
    assert turn.attributes["error.type"] == "cancelled"
    assert turn.parent.span_id == outer.get_span_context().span_id


def test_a_price_that_is_no_number_is_refused_when_the_agent_is_made():
    from trio_agent.pricing import Price

    with pytest.raises(ValueError, match="cache_read"):
        Agent(
            model=ScriptedModel([]),
            prices={"m": Price(input=1e-6, output=1e-6, cache_read="x")},  # type: ignore[arg-type]
        )


async def test_a_run_of_the_loop_reports_its_tokens_on_its_span(sdk):
    from trio_agent import ToolRegistry, Usage, run_agent_loop

    exporter, _, _ = sdk
    run = run_agent_loop(
        messages=[UserMessage("u1", "hi")],
        model=ScriptedModel(
            [scripted_response("r1", "hi", usage=Usage(input_tokens=12, output_tokens=5))]
        ),
        tools=ToolRegistry([]),
        max_steps=3,
    )
    await run.wait()
    [turn] = by_name(exporter.get_finished_spans())["invoke_agent"]
    [chat] = by_name(exporter.get_finished_spans())["chat"]
    assert chat.attributes["gen_ai.usage.input_tokens"] == 12
    assert turn.attributes.get("gen_ai.usage.input_tokens") == 12, dict(turn.attributes)


class Exploding:
    """A model whose stream() raises a bare RuntimeError quoting the prompt."""

    provider = "custom"
    model = "boom"

    def stream(self, request):
        raise RuntimeError(f"cannot send {request.messages[-1].content!r}")


async def test_a_model_that_raises(sdk):
    exporter, _, opened = sdk
    try:
        result = await Agent(model=Exploding()).prompt(SECRET)
        print("result", result.end)
    except BaseException as exc:
        print("raised", type(exc).__name__)
    spans = exporter.get_finished_spans()
    print(
        [
            (
                s.name,
                s.status.status_code.name,
                s.attributes.get("error.type"),
                s.status.description,
            )
            for s in spans
        ]
    )
    assert not opened.open
    assert SECRET not in everything(spans)


async def test_stop_sequences_on_the_span_are_not_those_sent(sdk, loopback):
    from loopback import Reply, fixture

    from trio_agent.providers import OpenAIChatModel

    exporter, _, _ = sdk
    loopback.replies.append(Reply(body=fixture("openai_text.sse")))
    model = OpenAIChatModel(
        "gpt-4o-mini",
        api_key="sk-x-0123456789",
        base_url=f"{loopback.url}/v1",
        settings=ModelSettings(stop=("END",)),
    )
    try:
        await Agent(model=model, settings=ModelSettings(max_tokens=50)).prompt("hi")
    finally:
        await model.aclose()
    sent = (
        loopback.requests[0].json()["stop"]
        if hasattr(loopback.requests[0], "json")
        else json.loads(loopback.requests[0].body)["stop"]
    )
    [chat] = by_name(exporter.get_finished_spans())["chat gpt-4o-mini"]
    assert tuple(sent) == chat.attributes.get("gen_ai.request.stop_sequences"), (
        sent,
        chat.attributes.get("gen_ai.request.stop_sequences"),
    )
