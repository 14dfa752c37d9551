"""Cancel a rich-content session turn after each of its checkpoints in turn
(issue 15): Anthropic's real wire format over the loopback server, thinking
with a signature, a tool that returns an image, a JSONL ledger. Every time,
the contract holds, the ledger derives exactly the agent's transcript, and a
resume can go on with it."""

from __future__ import annotations

from recorded_wire import served

from trio_agent import (
    Agent,
    ImageBlock,
    JsonlStore,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    UserMessage,
    tool,
    validate_transcript,
)
from trio_agent.ledger import derive
from trio_agent.providers import AnthropicModel
from trio_agent.testing import ScriptedModel, assert_run_invariants, explore_cancellation

KEY = "sk-test-SECRET-0123456789"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)


@tool
async def get_weather(location: str) -> ToolResult:
    """The weather map of a place."""
    return ToolResult((TextBlock(f"map of {location}"), ImageBlock("image/png", data=PNG)))


async def test_cancelling_a_thinking_turn_with_an_image_anywhere_keeps_the_contract(
    loopback, tmp_path
):
    from loopback import Reply

    store = JsonlStore(tmp_path)
    state: dict = {"n": 0}

    def scenario():
        state["n"] += 1
        state["id"] = f"s{state['n']}"
        loopback.replies[:] = [
            Reply(body=served("anthropic_thinking_tool_use.sse"), piece=300),
            Reply(body=served("anthropic_text.sse"), piece=300),
        ]
        model = AnthropicModel("claude-sonnet-4-5", api_key=KEY, base_url=loopback.url)
        state["agent"] = Agent(
            model=model, tools=[get_weather], store=store, session_id=state["id"]
        )
        question = UserMessage("u1", (TextBlock("Weather?"), ImageBlock("image/png", data=PNG)))
        return state["agent"].turn(question)

    async def check(events, result):
        assert_run_invariants(events, result)
        agent = state["agent"]
        await agent.aclose()
        loaded = await store.load(state["id"]) if agent.session_id is not None else None
        if loaded is None:
            return  # cancelled before the session was created: nothing stored
        state["loaded"] = state.get("loaded", 0) + 1
        derived = derive(loaded.records)
        assert tuple(derived.messages) == agent.messages
        for message in agent.messages:
            for block in getattr(message, "content", ()):
                if type(block) is ThinkingBlock:
                    assert block.signature  # never a half-streamed block
        resumed = await Agent.resume(
            store, state["id"], model=ScriptedModel([]), tools=[get_weather]
        )
        validate_transcript(resumed.messages)
        await resumed.aclose()

    report = await explore_cancellation(scenario, check)
    assert report.checkpoints > 10 and report.outcomes[-1] == "completed"
    assert "cancelled" in report.outcomes
    assert state["loaded"] > report.checkpoints // 2  # most runs left a ledger to check
