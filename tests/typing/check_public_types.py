"""What a type checker sees of trio-agent, checked by ``mypy --strict`` (tests/test_types.py).

Never run, only checked. Each ``assert_type`` pins a type a user relies on;
each ``# type: ignore[code]`` marks a mistake the checker must catch: were
the type lost (a tool's signature, a provider's keywords), the ignore would
be unused, and ``--strict`` reports unused ignores.
"""

from __future__ import annotations

from typing import Any, Literal, assert_type

import msgspec

import trio_agent as ta
from trio_agent import Tool, tool


@tool
async def add(left: int, right: int = 0) -> int:
    """Add two numbers."""
    return left + right


@tool(name="shout", description="Upper-case a text.")
def shout(text: str) -> str:
    return text.upper()


async def tools_keep_their_signatures() -> None:
    assert_type(await add(1, right=2), int)
    assert_type(shout("hi"), str)
    await add("1")  # type: ignore[arg-type]
    shout(text=3)  # type: ignore[arg-type]
    every: list[Tool[..., Any]] = [add, shout]
    ta.ToolRegistry(every)


def events_narrow_by_type(event: ta.SessionEvent) -> None:
    if event.type == "model.chunk":
        assert_type(event, ta.ModelChunk)
        if event.chunk.type == "text_delta":
            assert_type(event.chunk, ta.TextDelta)
        elif event.chunk.type == "thinking_delta":
            assert_type(event.chunk, ta.ThinkingDelta)
        elif event.chunk.type == "redacted_thinking":
            assert_type(event.chunk, ta.RedactedThinkingBlock)
        else:
            assert_type(event.chunk, ta.ToolCall)
    elif event.type == "tool.finished":
        assert_type(event.result, ta.ToolResultMessage)
    elif event.type == "turn.finished":
        end = event.result.end
        if end.reason == "failed":
            assert_type(end.code, str)
        elif end.reason == "max_steps":
            assert_type(end.max_steps, int)
    _ = event.chunk  # type: ignore[union-attr]


def results_narrow_by_status(result: ta.RunResult) -> None:
    if result.status == "completed":
        assert_type(result, ta.Completed)
        assert_type(result.final_text, str)
    elif result.status == "failed":
        assert_type(result.code, str)
    _ = result.final_text  # type: ignore[union-attr]


def messages_narrow_by_role(message: ta.Message) -> None:
    if message.role == "assistant":
        for block in message.content:
            if block.type == "tool_call":
                assert_type(block.arguments, dict[str, Any])
    elif message.role == "tool_result":
        assert_type(message.is_error, bool)


def providers_say_what_they_take() -> None:
    ta.OpenAIChatModel("gpt-4o", api_key="k", base_url="http://localhost:8000/v1", read_seconds=5)
    ta.AnthropicModel("claude", max_tokens=1024, connect_seconds=3.0)
    ta.OpenAIChatModel("gpt-4o", api_kye="k")  # type: ignore[call-arg]
    ta.AnthropicModel("claude", read_seconds="slow")  # type: ignore[arg-type]


async def iterating_a_turn_gives_typed_events(agent: ta.Agent) -> None:
    async with agent.turn("hi") as turn:
        async for event in turn:
            assert_type(event, ta.SessionEvent)
            if event.type == "turn.finished":
                assert_type(event.result.final_text, str)
            _ = event.result  # type: ignore[union-attr]
    assert_type(turn.result, ta.TurnResult | None)
    assert_type(await agent.prompt("again"), ta.TurnResult)


async def iterating_a_run_gives_typed_events(model: ta.Model) -> None:
    run = ta.run_agent_loop(messages=[], model=model, tools=ta.ToolRegistry(), max_steps=1)
    async with run:
        async for event in run:
            assert_type(event, ta.Event)
    assert_type(await run.wait(), ta.RunResult)


def content_blocks_narrow_by_type(message: ta.UserMessage, answer: ta.AssistantMessage) -> None:
    if isinstance(message.content, str):
        assert_type(message.content, str)
    else:
        for part in message.content:
            if part.type == "image":
                assert_type(part, ta.ImageBlock)
                assert_type(part.data, bytes | None)
            elif part.type == "document":
                assert_type(part.title, str)
            else:
                assert_type(part, ta.TextBlock)
    for block in answer.content:
        if block.type == "thinking":
            assert_type(block.signature, str)
        elif block.type == "redacted_thinking":
            assert_type(block.data, str)
    result = ta.ToolResult((ta.TextBlock("chart"), ta.ImageBlock("image/png", data=b"")))
    assert_type(result.is_error, bool)
    ta.ToolResult(("not a block",))  # type: ignore[arg-type]
    ta.ImageBlock("image/png", data="not bytes")  # type: ignore[arg-type]


class Person(msgspec.Struct):
    name: str
    age: int


async def a_typed_run_gives_a_typed_output(model: ta.Model) -> None:
    run = ta.run_agent_loop(
        messages=[], model=model, tools=ta.ToolRegistry(), max_steps=1, output_type=Person
    )
    assert_type(run, ta.AgentRun[Person])
    result = await run.wait()
    if isinstance(result, ta.Completed):
        assert_type(result.output, Person | None)
        if result.output is not None:
            assert_type(result.output.age, int)
            _ = result.output.height  # type: ignore[attr-defined]
    listed = ta.run_agent_loop(
        messages=[], model=model, tools=ta.ToolRegistry(), max_steps=1, output_type=list[int]
    )
    assert_type(listed, ta.AgentRun[list[int]])
    ta.run_agent_loop(  # not a type: the output is typed Any
        messages=[], model=model, tools=ta.ToolRegistry(), max_steps=1, output_type=None
    )
    ta.run_agent_loop(  # type: ignore[call-overload]
        messages=[], model=model, tools=ta.ToolRegistry(), max_steps=1, output_mode="json"
    )


async def a_typed_turn_gives_a_typed_output(agent: ta.Agent) -> None:
    result = await agent.prompt("who?", output_type=Person)
    assert_type(result, ta.TurnResult[Person])
    assert_type(result.output, Person | None)
    plain = await agent.prompt("hi")
    assert_type(plain.output, Any | None)


# -- issue 35: typed agents, dependencies, a list of mixed tools


class Report(msgspec.Struct):
    title: str


class Deps:
    def __init__(self, user: str) -> None:
        self.user = user


@tool
async def whoami(ctx: ta.ToolContext[Deps], greeting: str = "hi") -> str:
    """Greet the user the turn's deps name."""
    assert_type(ctx.deps, Deps)
    return f"{greeting} {ctx.deps.user}"


@tool
def word_count(text: str) -> int:
    return len(text.split())


TOOLS = [whoami, word_count, add]  # different parameters and returns: a checker's join


async def a_typed_agent_gives_typed_turns(model: ta.Model) -> None:
    agent = ta.Agent(model=model, tools=TOOLS, output_type=Report)
    assert_type(agent, ta.Agent[Report])
    assert_type(agent, ta.Agent[Report, Any])
    result = await agent.prompt("report")
    assert_type(result, ta.TurnResult[Report])
    assert_type(result.output, Report | None)
    assert_type(agent.turn("report"), ta.TurnRun[Report])
    async with agent.turn("report") as run:
        async for event in run:
            assert_type(event, ta.SessionEvent)
    assert_type(run.result, ta.TurnResult[Report] | None)
    assert_type(await agent.turn("again").wait(), ta.TurnResult[Report])
    assert_type(await agent.prompt("who?", output_type=Person), ta.TurnResult[Person])
    assert_type(agent.turn("who?", output_type=Person), ta.TurnRun[Person])
    assert_type(await agent.prompt("?", output_type=Literal["a", "b"]), ta.TurnResult[Any])
    assert_type(await agent.prompt("?", output_type=None), ta.TurnResult[Report])
    _ = result.output.title  # type: ignore[union-attr]  # None until narrowed
    listed = ta.Agent(model=model, output_type=list[Report])
    assert_type(await listed.prompt("all"), ta.TurnResult[list[Report]])
    assert_type(ta.Agent(model=model, output_type=Literal["a", "b"]), ta.Agent[Any, Any])
    plain = ta.Agent(model=model, tools=[whoami])
    assert_type(plain, ta.Agent[Any, Any])
    assert_type(await plain.prompt("hi"), ta.TurnResult[Any])


async def deps_are_typed_by_the_agents_deps_type(model: ta.Model, store: ta.SessionStore) -> None:
    agent = ta.Agent(model=model, tools=TOOLS, output_type=Report, deps_type=Deps)
    assert_type(agent, ta.Agent[Report, Deps])
    assert_type(await agent.prompt("x", deps=Deps("ann")), ta.TurnResult[Report])
    await agent.prompt("x")  # a turn may go without deps
    await agent.prompt("x", deps="ann")  # type: ignore[call-overload]
    agent.turn("x", deps=3)  # type: ignore[call-overload]
    only_deps = ta.Agent(model=model, deps_type=Deps)
    assert_type(only_deps, ta.Agent[Any, Deps])
    loose = ta.Agent(model=model)  # no deps_type: any deps
    await loose.prompt("x", deps=Deps("bob"))
    await loose.prompt("x", deps={"user": "bob"})
    resumed = await ta.Agent.resume(store, "s", model=model, output_type=Report, deps_type=Deps)
    assert_type(resumed, ta.Agent[Report, Deps])
    assert_type(await ta.Agent.resume(store, "s", model=model), ta.Agent[Any, Any])
    run = ta.run_agent_loop(
        messages=[], model=model, tools=ta.ToolRegistry(TOOLS), max_steps=1, deps=Deps("c")
    )
    assert_type(run, ta.AgentRun[Any])


async def before_with_context(call: ta.ToolCall, ctx: ta.ToolContext[Deps]) -> None:
    assert_type(ctx.deps.user, str)


async def after_with_context(
    call: ta.ToolCall, result: ta.ToolResultMessage, ctx: ta.ToolContext[Deps]
) -> ta.ToolResultMessage:
    return result


async def before_plain(call: ta.ToolCall) -> ta.ToolBlocked | None:
    return ta.block("no") if call.name == "rm" else None


def hooks_may_take_the_calls_context(model: ta.Model) -> None:
    ta.Agent(model=model, before_tool_call=before_with_context, after_tool_call=after_with_context)
    ta.Agent(model=model, before_tool_call=before_plain)


def keep_last_four(messages: tuple[ta.Message, ...]) -> list[ta.Message]:
    return list(messages[-4:])


def hooks_may_be_plain_functions(model: ta.Model) -> None:
    ta.Agent(
        model=model,
        transform_context=keep_last_four,
        compact=keep_last_four,
        before_tool_call=lambda call: None,
        should_stop_turn=lambda state: state.steps > 3,
        approval=lambda call: call.name == "rm",
    )
    ta.Agent(model=model, should_stop_turn=lambda state: "no")  # type: ignore[arg-type,return-value]


def a_bare_context_and_the_approval_lists(ctx: ta.ToolContext, agent: ta.Agent) -> None:
    assert_type(ctx.deps, Any)
    assert_type(ta.tool_context().deps, Any)
    assert_type(agent.pending_approvals, tuple[ta.ToolCall, ...])
    assert_type(agent.decided_approvals, tuple[ta.ToolCall, ...])


def models_by_name_fallback_and_limits() -> None:
    ta.Agent(model="openai:gpt-4o", usage_limits=ta.UsageLimits(requests=3, cost=0.5))
    ta.Agent(model=ta.FallbackModel("openai:gpt-4o", "anthropic:claude-sonnet-4-5"))
    assert_type(
        ta.infer_model("ollama:llama3.2"),
        ta.OpenAIChatModel | ta.OpenAIResponsesModel | ta.AnthropicModel,
    )
    ta.UsageLimits(3)  # type: ignore[call-arg]  # keywords only
