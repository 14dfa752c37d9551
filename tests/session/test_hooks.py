"""The session's side of a turn (``SessionHooks``): the context-window guard,
compaction and the tool-result size cap (issue 3), and their regressions, each named
after the behaviour it pins."""

from __future__ import annotations

import pytest
from helpers import agent_with, call
from sessions import u

from trio_agent import (
    Agent,
    AssistantMessage,
    ContextCompacted,
    ContextOverflowError,
    ModelRequest,
    RetryPolicy,
    TextBlock,
    ToolRegistry,
    TurnCompleted,
    TurnFailed,
    UserMessage,
    estimate_tokens,
    tool,
    truncate_text,
    validate_transcript,
)
from trio_agent.testing import ScriptedModel, scripted_response


def by_messages(request: ModelRequest) -> int:
    """A counter easy to reason about: 100 tokens a message."""
    return 100 * len(request.messages)


async def turn(agent, message):
    events = []
    async with agent.turn(message) as run:
        async for event in run:
            events.append(event)
    return events, run.result


def history(n: int) -> list:
    out = []
    for i in range(n):
        out += [
            UserMessage(f"u{i}", f"question {i}"),
            AssistantMessage(f"a{i}", (TextBlock(f"answer {i}"),)),
        ]
    return out


def crowded(script, compact=None) -> tuple[Agent, ScriptedModel]:
    """An agent whose 6 messages of history leave no room for a 7th (600 of 1000 tokens)."""
    model = ScriptedModel(script)
    agent = Agent(
        model=model,
        messages=history(3),
        context_window=1000,
        reserve_output_tokens=400,
        count_tokens=by_messages,
        compact=compact,
    )
    return agent, model


async def test_a_request_that_would_not_fit_is_never_sent():
    agent, model = crowded([scripted_response("r1", "never")])
    result = await agent.prompt(UserMessage("u9", "one more"))  # 7 messages: 700 > 600
    assert isinstance(result.end, TurnFailed) and result.end.code == "CONTEXT_OVERFLOW"
    assert "700 tokens" in result.end.detail and "600" in result.end.detail
    assert model.call_count == 0 and result.steps == 0
    validate_transcript(agent.messages)


async def test_the_compact_hook_makes_the_request_fit():
    seen = []

    async def summarize(messages):
        seen.append(len(messages))
        return (UserMessage("summary", "earlier: 3 questions answered"), messages[-1])

    agent, model = crowded([scripted_response("r1", "ok")], summarize)
    events, result = await turn(agent, UserMessage("u9", "one more"))
    assert result.end == TurnCompleted()
    assert seen == [7]
    assert [m.id for m in model.requests[0].messages] == ["summary", "u9"]
    assert [m.id for m in agent.messages] == ["summary", "u9", "message-r1"]
    compacted = [e for e in events if isinstance(e, ContextCompacted)]
    assert len(compacted) == 1 and compacted[0].request_id == "request-001"
    assert [m.id for m in compacted[0].messages] == ["summary", "u9"]


async def test_compaction_that_does_not_free_enough_room_fails_the_turn():
    async def useless(messages):
        return messages

    agent, model = crowded([scripted_response("r1", "never")], useless)
    result = await agent.prompt(UserMessage("u9", "x"))
    assert result.end.code == "CONTEXT_OVERFLOW" and "after compaction" in result.end.detail
    assert model.call_count == 0


@pytest.mark.parametrize("returned", [None, [42], [UserMessage("d", "x"), UserMessage("d", "y")]])
async def test_compaction_returning_an_unusable_transcript_is_a_hook_error(returned):
    async def bad(messages):
        return returned

    agent, _ = crowded([], bad)
    before = agent.messages
    result = await agent.prompt(UserMessage("u9", "x"))
    assert result.end.code == "HOOK_ERROR" and "compact" in result.end.detail
    assert agent.messages == (*before, UserMessage("u9", "x"))  # the transcript is intact


async def test_a_provider_overflow_is_never_retried_unchanged():
    model = ScriptedModel([ContextOverflowError("prompt is too long"), scripted_response("r", "x")])
    agent = Agent(model=model, retry=RetryPolicy(jitter=0))
    result = await agent.prompt(UserMessage("u1", "x"))
    assert result.end == TurnFailed(
        code="CONTEXT_OVERFLOW", detail="ContextOverflowError: prompt is too long"
    )
    assert model.call_count == 1


async def test_the_default_estimate_counts_the_whole_request():
    small = ModelRequest(id="request-001", messages=(UserMessage("u", "hi"),), tools=())
    big = ModelRequest(id="request-001", messages=(UserMessage("u", "x" * 4000),), tools=())
    assert 0 < estimate_tokens(small) < 50
    assert 1000 <= estimate_tokens(big) <= 1050


async def test_oversized_tool_results_are_cut_with_a_marker():
    @tool
    async def dump() -> str:
        return "HEAD" + "x" * 10_000 + "TAIL"

    model = ScriptedModel(
        [scripted_response("r1", [call("dump", "c1")]), scripted_response("r2", "ok")]
    )
    agent = Agent(model=model, tools=ToolRegistry([dump]), max_tool_result_chars=1000)
    result = await agent.prompt(UserMessage("u1", "x"))
    content = result.messages[2].content
    assert len(content) <= 1000
    assert content.startswith("HEAD") and content.endswith("TAIL")
    assert "characters cut: result longer than 1000" in content
    assert model.requests[1].messages[2].content == content


def test_truncate_text():
    assert truncate_text("short", 10) == "short"
    cut = truncate_text("a" * 50 + "b" * 50, 60)
    assert len(cut) <= 60 and cut.startswith("a") and cut.endswith("b")
    assert "[... 40 characters cut" in cut


async def test_final_text_survives_compaction_of_the_transcript():
    """A turn's final text was lost when compaction replaced the transcript it was read from."""

    async def summarize(messages):
        return (u("summary", "earlier"), messages[-1])

    history = []
    for i in range(3):
        history += [u(f"u{i}"), AssistantMessage(f"a{i}", (TextBlock("old"),))]
    agent, _ = agent_with(
        [scripted_response("r1", "fresh answer")],
        messages=history,
        context_window=1000,
        reserve_output_tokens=400,
        count_tokens=lambda request: 100 * len(request.messages),
        compact=summarize,
    )
    result = await agent.prompt(u("u9"))
    assert result.end == TurnCompleted() and result.final_text == "fresh answer"


async def test_the_result_cap_applies_when_after_tool_call_raises():
    """A tool result kept when ``after_tool_call`` raised escaped ``max_tool_result_chars``."""

    @tool
    async def dump() -> str:
        return "x" * 50_000

    async def broken(call, result):
        raise ValueError("hook bug")

    agent, _ = agent_with(
        [scripted_response("r1", [call("dump", "c1")])],
        tools=ToolRegistry([dump]),
        after_tool_call=broken,
        max_tool_result_chars=1000,
    )
    result = await agent.prompt(u("u1"))
    assert result.end.code == "HOOK_ERROR"
    assert len(result.messages[-1].content) <= 1000


async def test_grouped_context_overflow_is_reported_as_such():
    """A context overflow inside an exception group was reported as a model error, not
    CONTEXT_OVERFLOW."""
    group = ExceptionGroup("from a nursery", [ContextOverflowError("too long")])
    agent, model = agent_with([group, scripted_response("ok", "x")])
    result = await agent.prompt(u("u1"))
    assert result.end.code == "CONTEXT_OVERFLOW" and model.call_count == 1


async def test_count_tokens_that_raises_is_a_hook_error():
    """A ``count_tokens`` that raises failed the turn as an internal error; it is a HOOK_ERROR
    naming it."""

    def broken(request):
        raise ValueError("no tokenizer")

    agent, _ = agent_with([], context_window=1000, count_tokens=broken)
    result = await agent.prompt(u("u1"))
    assert result.end.code == "HOOK_ERROR" and "count_tokens" in result.end.detail


async def test_a_session_with_no_hook_configured_awaits_none_on_its_steps(monkeypatch):
    """Issue 38: a feature that is off costs nothing. With no context window, no
    tool-call hook, no usage limit and no stop hook, a step awaits none of
    ``prepare_request``, ``before_tool_call``, ``after_tool_call`` and ``after_step``
    (the repeated-failure count is kept without a hook); configure one and
    its hook is awaited again."""
    from trio_agent import ToolCall
    from trio_agent.session._hooks import SessionHooks

    asked: list[str] = []
    for name in ("prepare_request", "before_tool_call", "after_step", "after_tool_call"):
        original = getattr(SessionHooks, name)

        async def spy(self, *args, _name=name, _original=original):
            asked.append(_name)
            return await _original(self, *args)

        monkeypatch.setattr(SessionHooks, name, spy)

    @tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    def script():
        return ScriptedModel(
            [
                scripted_response("r1", [ToolCall("c1", "echo", {"text": "a"})]),
                scripted_response("r2", "done"),
            ]
        )

    result = await Agent(model=script(), tools=[echo]).prompt("go")
    assert result.final_text == "done" and asked == []
    blocked: list[str] = []

    async def before(call):
        blocked.append(call.id)

    async def never(state):
        return False

    async def keep(call, result):
        return result

    agent = Agent(
        model=script(),
        tools=[echo],
        before_tool_call=before,
        should_stop_turn=never,
        after_tool_call=keep,
        context_window=100_000,
    )
    assert (await agent.prompt("go")).final_text == "done"
    assert blocked == ["c1"]
    assert asked == [
        "prepare_request",
        "before_tool_call",
        "after_tool_call",
        "after_step",
        "prepare_request",
    ]


async def test_plain_functions_serve_as_hooks_as_async_ones_do():
    """Review of issue 38: a hook written as a plain function (as pydantic-ai's
    history processors may be) passed the agent's check and failed each turn
    with HOOK_ERROR ("can't be used in 'await' expression"). Each hook may be
    a plain function; what it returns is used as an async hook's result is."""
    from trio_agent import block

    seen: list[str] = []

    def transform(messages):
        seen.append("transform")
        return messages

    def before(call):
        seen.append(f"before {call.id}")
        return block("not now") if call.id == "c2" else None

    def after(call, result):
        seen.append(f"after {call.id}")
        return result

    def stop(state):
        seen.append(f"stop {state.steps}")
        return state.steps >= 2

    agent, model = agent_with(
        [
            scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})]),
            scripted_response("r2", [call("add", "c2", {"left": 3, "right": 4})]),
            scripted_response("r3", "never asked"),
        ],
        transform_context=transform,
        before_tool_call=before,
        after_tool_call=after,
        should_stop_turn=stop,
    )
    result = await agent.prompt("add")
    assert type(result.end).__name__ == "TurnBlocked", result
    assert seen == [
        "transform",
        "before c1",
        "after c1",
        "stop 1",
        "transform",
        "before c2",
        "after c2",
        "stop 2",
    ]
    results = [m for m in agent.messages if m.role == "tool_result"]
    assert results[0].content == '{"sum":3}' and not results[0].is_error
    assert "not now" in results[1].content and results[1].is_error
    assert model.call_count == 2
