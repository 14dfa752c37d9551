"""``FallbackModel`` (issue 35): an attempt that fails with a provider's error moves
to the next model, each attempt recorded with its model; over the loopback server
for the real adapters, and scripted models for the rounds and cancellation."""

from __future__ import annotations

import json

import pytest
import trio
from loopback import Reply
from otel_helpers import metric_points, otel_sdk
from sse_bodies import DONE, REQUEST, anthropic_hello, choice, sse

from trio_agent import (
    Agent,
    AnthropicModel,
    AttemptFailed,
    JsonlStore,
    ModelAuthenticationError,
    ModelChunk,
    OpenAIChatModel,
    RetryPolicy,
    ToolRegistry,
    TransientModelError,
    TurnCancelled,
    UserMessage,
    run_agent_loop,
)
from trio_agent.pricing import Price
from trio_agent.providers import FallbackModel
from trio_agent.testing import ScriptedModel, scripted_response


def openai(loopback):
    return OpenAIChatModel("gpt-4o-mini", base_url=f"{loopback.url}/v1")


def anthropic(loopback):
    return AnthropicModel("claude", base_url=loopback.url)


def records(path):
    [ledger] = path.glob("*.jsonl")
    return [json.loads(line) for line in ledger.read_text().splitlines()]


ERROR_BODY = b'{"error": {"message": "no", "type": "server_error"}}'


@pytest.mark.parametrize("status", [503, 429, 401])
async def test_a_providers_error_moves_to_the_next_model_and_each_attempt_names_its_model(
    loopback, tmp_path, status
):
    loopback.replies += [Reply(status, ERROR_BODY), Reply(body=anthropic_hello())]
    agent = Agent(
        model=FallbackModel(openai(loopback), anthropic(loopback)), store=JsonlStore(tmp_path)
    )
    async with agent:
        async with agent.turn("hello") as run:
            events = [event async for event in run]
    result = run.result
    assert result.end.reason == "completed" and result.final_text == "Hi"
    assert [seen.path for seen in loopback.requests] == ["/v1/chat/completions", "/v1/messages"]
    [failed] = [e for e in events if type(e) is AttemptFailed]
    assert (failed.attempt, failed.model, failed.retry_in) == (1, "OpenAI:gpt-4o-mini", 0.0)
    chunks = [e for e in events if type(e) is ModelChunk]
    assert {chunk.attempt for chunk in chunks} == {2}
    kept = records(tmp_path)
    [start] = [r for r in kept if r["kind"] == "turn/start"]
    assert start["model"] == "fallback(OpenAI:gpt-4o-mini, Anthropic:claude)"
    [attempt] = [r for r in kept if r["kind"] == "attempt/failed"]
    assert attempt["model"] == "OpenAI:gpt-4o-mini" and attempt["retry_in"] == 0.0
    [answer] = [r for r in kept if r["kind"] == "message" and r["message"]["role"] == "assistant"]
    assert answer["model"] == "Anthropic:claude"


async def test_without_a_fallback_the_records_stay_as_they_were(tmp_path):
    """A turn's model is named by turn/start alone: an answer's record names no model."""
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]), store=JsonlStore(tmp_path))
    async with agent:
        await agent.prompt("hi")
    answer = [r for r in records(tmp_path) if r["kind"] == "message"][-1]
    assert "model" not in answer


async def test_an_error_that_is_not_a_providers_ends_the_step_on_that_model():
    second = ScriptedModel([scripted_response("r1", "never")])
    agent = Agent(model=FallbackModel(ScriptedModel([RuntimeError("a bug")]), second))
    result = await agent.prompt("hi")
    assert result.end.reason == "failed" and result.end.code == "MODEL_ERROR"
    assert "a bug" in result.end.detail and second.call_count == 0


async def test_a_step_that_breaks_the_loops_rules_does_not_move_on():
    broken = scripted_response(
        "r1", "said", response=scripted_response("r1", "other").final_response(REQUEST)
    )
    second = ScriptedModel([scripted_response("r1", "never")])
    result = await Agent(model=FallbackModel(ScriptedModel([broken]), second)).prompt("hi")
    assert result.end.reason == "failed" and result.end.code == "MODEL_PROTOCOL_ERROR"
    assert second.call_count == 0


async def test_a_failed_round_is_retried_from_the_first_model_counting_rounds(autojump_clock):
    first = ScriptedModel([TransientModelError("429"), scripted_response("r1", "first again")])
    second = ScriptedModel([TransientModelError("503")])
    agent = Agent(model=FallbackModel(first, second), retry=RetryPolicy(attempts=2, jitter=0))
    async with agent.turn("hi") as run:
        failures = [e async for e in run if type(e) is AttemptFailed]
    assert run.result.final_text == "first again"
    assert [(f.attempt, f.retry_in) for f in failures] == [(1, 0.0), (2, 0.5)]
    assert (first.call_count, second.call_count) == (2, 1)


async def test_a_retry_policy_of_one_attempt_tries_the_chain_once():
    first, second = (
        ScriptedModel([TransientModelError("429")]),
        ScriptedModel([TransientModelError("503")]),
    )
    agent = Agent(model=FallbackModel(first, second), retry=RetryPolicy(attempts=1))
    result = await agent.prompt("hi")
    assert result.end.code == "MODEL_ERROR" and "503" in result.end.detail
    assert (first.call_count, second.call_count) == (1, 1)


async def test_fallback_on_says_which_errors_move_on():
    second = ScriptedModel([scripted_response("r1", "never")])
    chain = FallbackModel(
        ScriptedModel([ModelAuthenticationError("401")]), second, fallback_on=(TransientModelError,)
    )
    result = await Agent(model=chain).prompt("hi")
    assert result.end.code == "MODEL_ERROR" and second.call_count == 0


async def test_under_cancellation_no_next_model_is_tried(autojump_clock):
    second = ScriptedModel([scripted_response("r1", "never")])
    chain = FallbackModel(ScriptedModel([scripted_response("r1", "slow", hang_at=0)]), second)
    result = await Agent(model=chain).prompt(
        "hi", cancel_scope=trio.CancelScope(relative_deadline=5)
    )
    assert result.end == TurnCancelled() and second.call_count == 0


async def test_the_bare_loop_moves_on_once_and_its_chunks_say_their_attempt():
    chain = FallbackModel(
        ScriptedModel([TransientModelError("503")]), ScriptedModel([scripted_response("r1", "hi")])
    )
    run = run_agent_loop(
        messages=[UserMessage("u1", "hi")], model=chain, tools=ToolRegistry(), max_steps=1
    )
    async with run:
        chunks = [e async for e in run if type(e) is ModelChunk]
    assert run.result.status == "completed" and run.result.final_text == "hi"
    assert [c.attempt for c in chunks] == [2]
    both_fail = FallbackModel(
        ScriptedModel([TransientModelError("503")]), ScriptedModel([TransientModelError("429")])
    )
    failed = await run_agent_loop(
        messages=[UserMessage("u1", "hi")], model=both_fail, tools=ToolRegistry(), max_steps=1
    ).wait()
    assert failed.status == "failed" and failed.code == "MODEL_ERROR" and "429" in failed.detail


async def test_each_attempts_chat_span_names_its_model(loopback):
    loopback.replies += [Reply(503, ERROR_BODY), Reply(body=anthropic_hello())]
    with otel_sdk() as (exporter, _, _):
        await Agent(model=FallbackModel(openai(loopback), anthropic(loopback))).prompt("hi")
        spans = {s.name: s for s in exporter.get_finished_spans() if s.name.startswith("chat")}
    assert set(spans) == {"chat gpt-4o-mini", "chat claude"}
    failed, answered = spans["chat gpt-4o-mini"], spans["chat claude"]
    assert failed.attributes["gen_ai.provider.name"] == "openai"
    assert failed.attributes["error.type"] == "TransientModelError"
    assert answered.attributes["gen_ai.provider.name"] == "anthropic"
    assert answered.attributes["trio_agent.attempt"] == 2


async def test_regression_each_attempts_metrics_name_its_model_not_the_fallback(loopback):
    """Bug: the chat spans named each attempt's model, but the duration and token
    metrics of every attempt carried the ``FallbackModel``'s names (provider
    ``FallbackModel``, no model): a dashboard could not tell which model failed
    or how many tokens each spent."""
    loopback.replies += [Reply(503, ERROR_BODY), Reply(body=anthropic_hello())]
    with otel_sdk() as (_, reader, _):
        await Agent(model=FallbackModel(openai(loopback), anthropic(loopback))).prompt("hi")
        points = metric_points(reader)

    def names(point) -> tuple[str, str, str | None]:
        said = point.attributes
        return said["gen_ai.provider.name"], said["gen_ai.request.model"], said.get("error.type")

    durations = sorted(names(p) for p in points["gen_ai.client.operation.duration"])
    assert durations == [
        ("anthropic", "claude", None),
        ("openai", "gpt-4o-mini", "TransientModelError"),
    ]
    tokens = {
        (names(p), p.attributes["gen_ai.token.type"]) for p in points["gen_ai.client.token.usage"]
    }
    assert tokens == {(("anthropic", "claude", None), kind) for kind in ("input", "output")}


async def test_a_turns_cost_prices_each_answer_with_the_model_that_gave_it(loopback):
    loopback.replies += [Reply(503, ERROR_BODY), Reply(body=anthropic_hello())]
    prices = {
        "gpt-4o-mini": Price(input=100.0, output=100.0),
        "claude": Price(input=1.0, output=2.0),
    }
    agent = Agent(model=FallbackModel(openai(loopback), anthropic(loopback)), prices=prices)
    result = await agent.prompt("hi")
    assert result.usage.input_tokens == 3 and result.usage.cost == 3.0  # claude's 3 input tokens


async def test_used_directly_the_first_model_whose_stream_opens_answers(loopback):
    loopback.replies += [Reply(503, ERROR_BODY), Reply(body=anthropic_hello())]
    async with FallbackModel(openai(loopback), anthropic(loopback)).stream(REQUEST) as stream:
        chunks = [chunk async for chunk in stream]
        response = await stream.response()
    assert [c.text for c in chunks] == ["Hi"] and response.stop_reason == "stop"


async def test_used_directly_every_failure_is_reported_together(loopback):
    loopback.replies += [Reply(503, ERROR_BODY), Reply(401, ERROR_BODY)]
    with pytest.raises(ExceptionGroup) as caught:
        async with FallbackModel(openai(loopback), anthropic(loopback)).stream(REQUEST):
            pass
    assert [type(e) for e in caught.value.exceptions] == [
        TransientModelError,
        ModelAuthenticationError,
    ]


def test_models_may_be_named_and_a_bad_one_is_refused(monkeypatch):
    monkeypatch.delenv("OLLAMA_BASE_URL", raising=False)
    chain = FallbackModel("ollama:llama3.2", "vllm:qwen")
    assert [m.model for m in chain.models] == ["llama3.2", "qwen"]
    with pytest.raises(TypeError, match="not FallbackModels"):
        FallbackModel(chain, "ollama:x")
    with pytest.raises(TypeError, match="callable stream"):
        FallbackModel("ollama:x", object())
    with pytest.raises(ValueError, match="unknown provider"):
        FallbackModel("nope:x")
    with pytest.raises(TypeError, match="fallback_on must be"):
        FallbackModel("ollama:x", fallback_on=(ValueError, "x"))
    with pytest.raises(TypeError, match="fallback_on must be"):
        FallbackModel("ollama:x", fallback_on=3)


async def test_a_fallback_on_that_raises_fails_the_turn_naming_it():
    def broken(error: Exception) -> bool:
        raise KeyError("oops")

    chain = FallbackModel(
        ScriptedModel([TransientModelError("503")]),
        ScriptedModel([scripted_response("r1", "never")]),
        fallback_on=broken,
    )
    result = await Agent(model=chain).prompt("hi")
    assert result.end.reason == "failed" and result.end.code == "HOOK_ERROR"
    assert "fallback_on raised KeyError" in result.end.detail


async def test_a_fallback_on_function_decides_per_error():
    second = ScriptedModel([scripted_response("r1", "from the second")])
    chain = FallbackModel(
        ScriptedModel([TransientModelError("503 overloaded")]),
        second,
        fallback_on=lambda error: "overloaded" in str(error),
    )
    assert (await Agent(model=chain).prompt("hi")).final_text == "from the second"


async def test_it_closes_the_models_it_made_from_names_and_only_those(loopback, monkeypatch):
    from sse_bodies import read

    from trio_agent import ModelRequestError

    monkeypatch.setenv("OLLAMA_BASE_URL", f"{loopback.url}/v1")
    given = openai(loopback)
    async with FallbackModel("ollama:llama3.2", given) as chain:
        made = chain.models[0]
    with pytest.raises(ModelRequestError, match="connection pool was closed"):
        await read(made)
    loopback.replies.append(Reply(body=sse(choice({"content": "hi"}), choice({}, "stop")) + DONE))
    chunks, _ = await read(given)  # the one given belongs to the caller: still open
    assert [c.text for c in chunks] == ["hi"]
    await given.aclose()
