"""OpenTelemetry GenAI spans and metrics (issue 21), with the SDK's in-memory exporter:
names, tree shape, attributes, status on failure and cancellation, parallel batches,
retries, approvals, content off and on, and no secret anywhere: neither an error
message quoting the prompt or the key, nor the arguments a fatal tool error quotes."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from helpers import add, call
from loopback import Reply
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from otel_helpers import metric_points, otel_sdk, tree
from paths import WIRE

from trio_agent import (
    Agent,
    ModelSettings,
    RetryPolicy,
    ToolRegistry,
    TransientModelError,
    Usage,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.providers import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel
from trio_agent.telemetry import configure
from trio_agent.testing import ScriptedModel, explore_cancellation, scripted_response
from trio_agent.tools import FatalToolError

pytest.importorskip("opentelemetry.sdk")


@pytest.fixture
def sdk(caplog):
    with otel_sdk() as configured:
        yield configured
    # a context detached in the wrong task or order is only logged by the API
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]


@tool
async def slow_add(a: int, b: int) -> int:
    """Add, slowly."""
    await trio.sleep(0.01)
    return a + b


def tool_turn_script() -> list[Any]:
    return [
        scripted_response(
            "r1",
            [call("slow_add", "c1", {"a": 1, "b": 2}), call("slow_add", "c2", {"a": 3, "b": 4})],
        ),
        scripted_response("r2", "the sums are 3 and 7"),
    ]


def by_name(spans: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


async def test_a_turn_is_a_span_with_its_attempts_and_tool_calls_below(sdk):
    exporter, _, opened = sdk
    agent = Agent(model=ScriptedModel(tool_turn_script()), tools=[slow_add])
    result = await agent.prompt("add")
    spans = exporter.get_finished_spans()
    names = by_name(spans)
    assert set(names) == {"invoke_agent", "chat", "execute_tool slow_add"}
    assert tree(spans)["invoke_agent"] == ["chat", "chat"]
    [turn] = names["invoke_agent"]
    # a step's tool calls are children of the attempt that asked for them
    first_chat = names["chat"][0]
    assert all(
        t.parent.span_id == first_chat.context.span_id for t in names["execute_tool slow_add"]
    )
    assert all(c.parent.span_id == turn.context.span_id for c in names["chat"])
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["trio_agent.turn"] == 1
    assert turn.attributes["trio_agent.turn.end"] == "completed"
    assert turn.attributes["trio_agent.steps"] == 2
    assert turn.status.status_code is StatusCode.UNSET
    first, second = names["chat"]
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.provider.name"] == "ScriptedModel"
    assert first.attributes["trio_agent.request_id"] == "request-001"
    assert first.attributes["trio_agent.attempt"] == 1
    assert first.attributes["gen_ai.response.id"] == "r1"
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_call",)
    assert second.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    tools = names["execute_tool slow_add"]
    assert {t.attributes["gen_ai.tool.call.id"] for t in tools} == {"c1", "c2"}
    assert all(t.attributes["gen_ai.tool.name"] == "slow_add" for t in tools)
    assert result.end.reason == "completed"
    assert not opened.open
    assert all(not s.events for s in spans)  # content is off by default


async def test_a_parallel_batchs_tool_spans_are_siblings_that_overlap(sdk):
    exporter, _, _ = sdk
    agent = Agent(
        model=ScriptedModel(tool_turn_script()), tools=[slow_add], tool_execution="parallel"
    )
    await agent.prompt("add")
    spans = by_name(exporter.get_finished_spans())
    step = spans["chat"][0]
    one, two = spans["execute_tool slow_add"]
    assert one.parent.span_id == two.parent.span_id == step.context.span_id
    assert one.start_time < two.end_time and two.start_time < one.end_time  # they overlapped


async def test_session_id_and_request_id_are_attributes(sdk, tmp_path):
    from trio_agent.stores import JsonlStore

    exporter, _, _ = sdk
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", "hi")]),
        store=JsonlStore(tmp_path),
        session_id="s-42",
    )
    await agent.prompt("hello")
    spans = by_name(exporter.get_finished_spans())
    for span in [*spans["invoke_agent"], *spans["chat"]]:
        assert span.attributes["gen_ai.conversation.id"] == "s-42"
        assert span.attributes["trio_agent.session_id"] == "s-42"


async def test_each_retried_attempt_is_a_span_with_its_error(sdk, autojump_clock):
    exporter, reader, _ = sdk
    flaky = scripted_response(
        "a1", "lost", raise_at=0, error=TransientModelError("503 service unavailable")
    )
    agent = Agent(
        model=ScriptedModel([flaky, scripted_response("ok", "done")]),
        retry=RetryPolicy(jitter=0),
    )
    await agent.prompt("go")
    chats = by_name(exporter.get_finished_spans())["chat"]
    assert [c.attributes["trio_agent.attempt"] for c in chats] == [1, 2]
    failed, ok = chats
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "TransientModelError"
    assert ok.status.status_code is StatusCode.UNSET and "error.type" not in ok.attributes
    durations = metric_points(reader)["gen_ai.client.operation.duration"]
    assert sorted(p.attributes.get("error.type", "") for p in durations) == [
        "",
        "TransientModelError",
    ]


async def test_a_failed_turn_has_an_error_status_with_its_code(sdk):
    exporter, _, opened = sdk
    broken = scripted_response("r1", "x", raise_at=0, error=ValueError("no"))
    agent = Agent(model=ScriptedModel([broken]))
    result = await agent.prompt("go")
    assert result.end.reason == "failed"
    [turn] = by_name(exporter.get_finished_spans())["invoke_agent"]
    assert turn.status.status_code is StatusCode.ERROR
    assert turn.attributes["error.type"] == result.end.code
    assert not opened.open


async def test_a_tool_error_result_marks_its_span(sdk):
    exporter, _, _ = sdk
    script = [
        scripted_response("r1", [call("add", "c1", {"a": "x", "b": 1})]),
        scripted_response("r2", "sorry"),
    ]
    await Agent(model=ScriptedModel(script), tools=ToolRegistry([add])).prompt("go")
    [span] = by_name(exporter.get_finished_spans())["execute_tool add"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "tool_error"


async def test_a_run_of_the_loop_is_an_invoke_agent_span(sdk):
    exporter, _, _ = sdk
    run = run_agent_loop(
        messages=[UserMessage("u1", "add")],
        model=ScriptedModel(tool_turn_script()),
        tools=ToolRegistry([slow_add]),
        max_steps=3,
    )
    async with run:
        async for _ in run:
            pass
    spans = exporter.get_finished_spans()
    [turn] = by_name(spans)["invoke_agent"]
    assert turn.attributes["trio_agent.turn.end"] == "completed"
    assert "trio_agent.turn" not in turn.attributes
    assert tree(spans)["invoke_agent"] == ["chat", "chat"]
    assert tree(spans)["chat"] == ["execute_tool slow_add", "execute_tool slow_add"]
    assert turn.attributes["gen_ai.usage.input_tokens"] >= 0


async def test_an_agent_called_as_a_tool_nests_under_the_call(sdk):
    exporter, _, _ = sdk
    inner = Agent(model=ScriptedModel([scripted_response("i1", "inner answer")]))
    outer_script = [
        scripted_response("o1", [call("helper", "c1", {"input": "help"})]),
        scripted_response("o2", "done"),
    ]
    outer = Agent(model=ScriptedModel(outer_script), tools=[inner.as_tool("helper", "Helps.")])
    await outer.prompt("go")
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    [inner_turn] = [s for s in spans if s.name == "invoke_agent helper"]  # named by its tool
    assert inner_turn.attributes["gen_ai.agent.name"] == "helper"
    assert by_id[inner_turn.parent.span_id].name == "execute_tool helper"


async def test_token_usage_is_a_metric(sdk):
    _, reader, _ = sdk
    script = [scripted_response("r1", "hi", usage=Usage(input_tokens=12, output_tokens=5))]
    await Agent(model=ScriptedModel(script)).prompt("go")
    points = metric_points(reader)["gen_ai.client.token.usage"]
    by_type = {p.attributes["gen_ai.token.type"]: p.sum for p in points}
    assert by_type == {"input": 12, "output": 5}
    assert all("gen_ai.conversation.id" not in p.attributes for p in points)


async def test_content_is_recorded_only_when_asked(sdk):
    exporter, _, _ = sdk
    script = [
        scripted_response("r1", [call("slow_add", "c1", {"a": 1, "b": 2})]),
        scripted_response("r2", "three"),
    ]
    configure(capture_content=True)
    try:
        agent = Agent(model=ScriptedModel(script), tools=[slow_add], system="Be terse.")
        await agent.prompt("what is 1 + 2?")
    finally:
        configure(capture_content=None)
    spans = by_name(exporter.get_finished_spans())
    first = spans["chat"][0].events[0].attributes
    assert json.loads(first["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "what is 1 + 2?"}]}
    ]
    assert json.loads(first["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "Be terse."}
    ]
    answer = json.loads(spans["chat"][1].events[1].attributes["gen_ai.output.messages"])
    assert answer == [{"role": "assistant", "parts": [{"type": "text", "content": "three"}]}]
    [tool_event] = spans["execute_tool slow_add"][0].events
    assert json.loads(tool_event.attributes["gen_ai.tool.call.arguments"]) == {"a": 1, "b": 2}
    assert tool_event.attributes["gen_ai.tool.call.result"] == "3"


async def test_content_capture_follows_the_conventional_variable(sdk, monkeypatch):
    exporter, _, _ = sdk
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    await Agent(model=ScriptedModel([scripted_response("r1", "hi")])).prompt("secret plan")
    [chat] = by_name(exporter.get_finished_spans())["chat"]
    assert "secret plan" in chat.events[0].attributes["gen_ai.input.messages"]
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false")
    exporter.clear()
    await Agent(model=ScriptedModel([scripted_response("r1", "hi")])).prompt("secret plan")
    [chat] = by_name(exporter.get_finished_spans())["chat"]
    assert not chat.events


@pytest.mark.parametrize("execution", ["sequential", "parallel"])
async def test_no_span_is_left_open_at_any_cancellation_point(sdk, execution):
    exporter, _, opened = sdk

    def scenario() -> Any:
        exporter.clear()
        agent = Agent(
            model=ScriptedModel(tool_turn_script()), tools=[slow_add], tool_execution=execution
        )
        return agent.turn("add")

    def check(events: list[Any], result: Any) -> None:
        assert not opened.open, f"spans left open: {sorted(opened.open.values())}"
        spans = exporter.get_finished_spans()
        turns = by_name(spans)["invoke_agent"]
        assert len(turns) == 1
        if result.end.reason == "cancelled":
            assert turns[0].status.status_code is StatusCode.ERROR
            assert turns[0].attributes["error.type"] == "cancelled"
        for span in spans:
            if span.status.status_code is StatusCode.ERROR and span.name != "invoke_agent":
                assert span.attributes["error.type"] == "cancelled"

    report = await explore_cancellation(scenario, check)
    assert report.checkpoints > 10
    assert set(report.outcomes) == {"cancelled", "completed"}


async def test_a_real_provider_is_named_and_no_secret_reaches_any_span(sdk, loopback):
    from loopback import Reply, fixture

    from trio_agent import ModelSettings
    from trio_agent.providers import OpenAIChatModel

    exporter, _, _ = sdk
    key = "sk-otel-secret-0123456789"
    loopback.replies.append(Reply(body=fixture("openai_text.sse")))
    model = OpenAIChatModel(
        "gpt-4o-mini",
        api_key=key,
        base_url=f"{loopback.url}/v1?sig=query-secret",
        settings=ModelSettings(
            temperature=0.25, max_tokens=99, extra_headers={"x-secret": "header-secret"}
        ),
    )
    configure(capture_content=True)
    try:
        await Agent(model=model).prompt("hi")
    finally:
        configure(capture_content=None)
        await model.aclose()
    spans = exporter.get_finished_spans()
    [chat] = by_name(spans)["chat gpt-4o-mini"]
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.request.model"] == "gpt-4o-mini"
    assert chat.attributes["gen_ai.request.temperature"] == 0.25
    assert chat.attributes["gen_ai.request.max_tokens"] == 99
    assert chat.attributes["gen_ai.usage.input_tokens"] == 82
    assert chat.kind.name == "CLIENT"
    everything = repr(
        [
            (s.name, dict(s.attributes), [(e.name, dict(e.attributes)) for e in s.events])
            for s in spans
        ]
    )
    for secret in (key, "query-secret", "header-secret"):
        assert secret not in everything


def test_off_when_no_sdk_is_configured_and_never_imported_by_us():
    from trio_agent.telemetry._observe import observer

    model = ScriptedModel([])
    assert observer(model, None, 1) is None  # the API's proxy provider: off
    program = (
        "import sys, trio\n"
        "from trio_agent import Agent\n"
        "from trio_agent.testing import ScriptedModel, scripted_response\n"
        "agent = Agent(model=ScriptedModel([scripted_response('r1', 'hi')]))\n"
        "trio.run(agent.prompt, 'go')\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


async def test_on_when_the_application_sets_a_provider_after_import(sdk):
    # configured after trio_agent was imported (the usual order): seen at the next turn
    exporter, _, _ = sdk
    await Agent(model=ScriptedModel([scripted_response("r1", "hi")])).prompt("go")
    assert len(exporter.get_finished_spans()) == 2


def test_configure_takes_a_bool_or_none():
    with pytest.raises(TypeError, match="capture_content"):
        configure(capture_content="yes")  # type: ignore[arg-type]


async def test_a_named_agent_names_its_turn_span(sdk):
    exporter, _, _ = sdk
    await Agent(model=ScriptedModel([scripted_response("r1", "hi")]), name="planner").prompt("go")
    [turn] = by_name(exporter.get_finished_spans())["invoke_agent planner"]
    assert turn.attributes["gen_ai.agent.name"] == "planner"


def test_an_agent_name_is_short_printable_text():
    for bad in ("", "x" * 129, "a\nb", 5):
        with pytest.raises(ValueError, match="name"):
            Agent(model=ScriptedModel([]), name=bad)  # type: ignore[arg-type]


async def test_tracing_that_cannot_start_never_fails_a_turn(sdk, monkeypatch, caplog):
    # an OpenTelemetry too old for our instruments (create_histogram's advisory
    # argument came in 1.30): the turn runs untraced, and says so once
    from opentelemetry.sdk.metrics import Meter

    from trio_agent.telemetry import _observe

    def old_histogram(self, name, unit="", description=""):
        raise AssertionError("not reached")

    monkeypatch.setattr(Meter, "create_histogram", old_histogram)
    monkeypatch.setattr(_observe, "_made", None)
    monkeypatch.setattr(_observe, "_broken", False)
    first = await Agent(model=ScriptedModel([scripted_response("r1", "hi")])).prompt("go")
    second = await Agent(model=ScriptedModel([scripted_response("r1", "hi")])).prompt("go")
    assert first.end.reason == second.end.reason == "completed"
    warned = [r for r in caplog.records if "tracing is off" in r.getMessage()]
    assert len(warned) == 1 and "TypeError" in warned[0].getMessage()


KEY = "sk-otel-test-0123456789"


def recorded(name: str) -> Reply:
    """A recorded stream of tests/support/fixtures/wire/ (see SOURCES.md there) as a
    server sends it: the blank line some recordings lost after their last event
    put back."""
    body = (WIRE / name).read_bytes()
    return Reply(body=body if body.endswith(b"\n\n") else body + b"\n\n")


@tool
async def get_weather(city: str, state: str) -> str:
    """The weather in a city."""
    return "sunny"


PROVIDER_CASES = {
    # adapter, its output-token keyword, the recordings, and what the provider said
    "openai": (
        OpenAIChatModel,
        "max_completion_tokens",
        ("openai_chat_tool_calls.sse", "openai_chat_text.sse"),
        ("chatcmpl-ABfwCgi41eStOcARjZq97ohCEGBPO", "tool_calls", "gpt-4o-2024-08-06"),
    ),
    "responses": (
        OpenAIResponsesModel,
        "max_output_tokens",
        ("responses_text.sse",),
        ("resp_67e554a21aa88191b65876ac5e5bbe0406c52f0e511c76ed", "completed", "gpt-4o-2024-08-06"),
    ),
    "anthropic": (
        AnthropicModel,
        "max_tokens",
        ("anthropic_text.sse",),
        ("msg_4QpJur2dWWDjF6C758FbBw5vm12BaVipnK", "end_turn", "claude-3-opus-latest"),
    ),
}


@pytest.mark.parametrize("case", list(PROVIDER_CASES))
async def test_a_chat_span_carries_the_providers_own_words(sdk, loopback, case):
    """issue 32: ``gen_ai.response.id`` was ``request-001.chatcmpl-...`` (our
    message id) instead of the provider's; ``gen_ai.response.finish_reasons`` our
    normalised stop reason instead of the provider's; an adapter's own
    output-token keyword (``AnthropicModel(max_tokens=)``) was not
    ``gen_ai.request.max_tokens``; ``server.address``, ``server.port`` and
    ``gen_ai.response.model`` were never set. For each adapter, from a recorded
    stream."""
    exporter, reader, _ = sdk
    adapter, keyword, names, (response_id, finish, answered) = PROVIDER_CASES[case]
    loopback.replies.extend(recorded(name) for name in names)
    path = "" if adapter is AnthropicModel else "/v1"
    model = adapter("the-model", api_key=KEY, base_url=f"{loopback.url}{path}", **{keyword: 321})
    async with model:
        await Agent(model=model, tools=[get_weather]).prompt("weather?")
    first = by_name(exporter.get_finished_spans())["chat the-model"][0]
    attributes = first.attributes
    assert attributes["gen_ai.response.id"] == response_id
    assert attributes["gen_ai.response.finish_reasons"] == (finish,)
    assert attributes["gen_ai.response.model"] == answered
    assert attributes["gen_ai.request.model"] == "the-model"
    assert attributes["gen_ai.request.max_tokens"] == 321
    assert (attributes["server.address"], attributes["server.port"]) == ("127.0.0.1", loopback.port)
    [duration] = metric_points(reader)["gen_ai.client.operation.duration"]
    assert duration.attributes["server.address"] == "127.0.0.1"


async def test_a_settings_or_extra_body_limit_is_the_one_on_the_span(sdk, loopback):
    """issue 32: ``gen_ai.request.max_tokens`` is the limit sent: a setting over
    the keyword, ``extra_body`` over both."""
    exporter, _, _ = sdk
    loopback.replies.extend(recorded("anthropic_text.sse") for _ in range(2))
    model = AnthropicModel("m", api_key=KEY, base_url=loopback.url, max_tokens=100)
    async with model:
        await Agent(model=model, settings=ModelSettings(max_tokens=200)).prompt("hi")
        model.settings = ModelSettings(extra_body={"max_tokens": 300})
        await Agent(model=model).prompt("hi")
    sent = [request.json()["max_tokens"] for request in loopback.requests]
    spans = by_name(exporter.get_finished_spans())["chat m"]
    assert [s.attributes["gen_ai.request.max_tokens"] for s in spans] == sent == [200, 300]


SECRET = "the launch code is 0451"


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


# --- 1. error messages (which quote content) reach span status with capture off
async def test_a_model_error_message_stays_out_of_the_spans(sdk, autojump_clock):
    """Issue 21 (review of telemetry): a model error's message, which may quote the prompt, reached
    the chat span's status with content capture off."""
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


async def test_a_fatal_tool_error_message_stays_out_of_the_spans(sdk):
    """Issue 21 (review of telemetry): a fatal tool error's message, which quotes the arguments,
    reached the tool span's status with content capture off."""
    exporter, _, _ = sdk
    script = [scripted_response("r1", [call("fatal", "c1", {"text": SECRET})])]
    agent = Agent(model=ScriptedModel(script), tools=[fatal])
    await agent.prompt("go")
    spans = exporter.get_finished_spans()
    assert SECRET not in everything(spans), [s.status.description for s in spans]


# --- 3. stop_sequences: an unset stop is an empty attribute, and hides the model's
class Configured(ScriptedModel):
    provider = "OpenAI"
    model = "m"
    settings = ModelSettings(stop=("END",), temperature=0.5)


async def test_stop_sequences_unset_in_the_request_are_the_models(sdk):
    """Issue 21 (review of telemetry): a request that set no stop sequences put an empty
    ``gen_ai.request.stop_sequences`` on the span, hiding the model's own."""
    exporter, _, _ = sdk
    agent = Agent(
        model=Configured([scripted_response("r1", "hi")]), settings=ModelSettings(max_tokens=5)
    )
    await agent.prompt("go")
    [chat] = by_name(exporter.get_finished_spans())["chat m"]
    assert chat.attributes.get("gen_ai.request.stop_sequences") == ("END",), dict(chat.attributes)


# --- 5. the current span is the caller's again after the turn, however it ended
async def test_the_callers_context_is_restored(sdk):
    """Issue 21 (review of telemetry): after a turn, the current span was not the caller's again."""
    exporter, _, _ = sdk
    tracer = trace.get_tracer("app")
    with tracer.start_as_current_span("request") as outer:
        await Agent(model=ScriptedModel([scripted_response("r1", "hi")])).prompt("go")
        assert trace.get_current_span() is outer


# --- 1b. the same through a real provider: the server's 400 message quotes the prompt
async def test_a_provider_400_quoting_the_prompt_stays_out_of_the_spans(sdk, loopback):
    """Issue 21 (review of telemetry): a provider's 400 message quoting the prompt reached the
    spans."""
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
    """Issue 21 (review of telemetry): a 401 message quoting the API key reached the spans."""
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
    """Issue 21 (review of telemetry): after a cancelled turn the caller's span was not current
    again; the turn's span ends, marked cancelled, under the caller's."""
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


async def test_a_run_of_the_loop_reports_its_tokens_on_its_span(sdk):
    """Issue 21 (review of telemetry): a ``run_agent_loop`` run left its tokens off its
    ``invoke_agent`` span."""
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


async def test_a_model_that_raises_leaves_no_span_open_and_no_content_on_one(sdk):
    """Issue 21 (review of telemetry): a model whose ``stream()`` raises a bare error quoting the
    prompt must leave no span open and the prompt on none."""
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


async def test_stop_sequences_on_the_span_are_those_sent(sdk, loopback):
    """Issue 21 (review of telemetry): the stop sequences on the span were not those the request
    sent."""
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


@tool(requires_approval=True)
async def guarded(a: int) -> int:
    """Needs approval."""
    await trio.sleep(0.01)
    return a


async def test_approved_call_runs_in_an_execute_tool_span(debug_sdk):
    """Issue 21 (review of telemetry): an approved held call, run at the next turn, runs in an
    ``execute_tool`` span under that turn's."""
    exporter, _, opened = debug_sdk
    script = [
        scripted_response("r1", [call("guarded", "c1", {"a": 5})]),
        scripted_response("r2", "five"),
    ]
    agent = Agent(model=ScriptedModel(script), tools=[guarded])
    first = await agent.prompt("go")
    assert first.end.reason == "awaiting_approval"
    await agent.approve("c1")
    second = await agent.prompt("ok")
    assert second.end.reason == "completed", second.end
    spans = exporter.get_finished_spans()
    turns = [s for s in spans if s.name == "invoke_agent"]
    assert [t.status.status_code for t in turns] == [StatusCode.UNSET, StatusCode.UNSET]
    [tool_span] = [s for s in spans if s.name == "execute_tool guarded"]
    assert tool_span.parent.span_id == turns[1].context.span_id
    assert not opened.open
