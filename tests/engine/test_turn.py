"""A turn (``engine/_turn.py``): a journal failure while a chunk streams is the
journal's, not the model's."""

from __future__ import annotations

import pytest

from trio_agent import ToolRegistry, UserMessage
from trio_agent.testing import ScriptedModel, scripted_response


async def test_regression_a_journal_failure_while_streaming_is_not_a_model_failure():
    """The model-error handler also caught errors of emitting a chunk event, so a ledger that could
    not write was retried as a flaky model."""
    from trio_agent.engine import Conversation, Emitter, StepHooks, TurnSpec, TurnState, run_turn

    class FullDisk:
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

        async def barrier(self, point):
            return None

        async def before_event(self, sequence):
            raise OSError(28, "No space left on device")

    asked = []

    class Hooks(StepHooks):
        def retry_delay(self, error, attempt):
            asked.append(error)
            return 0

    model = ScriptedModel([scripted_response("r1", "done")] * 3)
    conversation = Conversation.from_messages([UserMessage("u1", "hi")])
    spec = TurnSpec(model=model, tools=ToolRegistry(), specs=(), system="", max_steps=4)
    with pytest.raises(OSError, match="No space left"):
        await run_turn(conversation, spec, TurnState(), Emitter(None, journal=FullDisk()), Hooks())
    assert asked == [] and model.call_count == 1


async def test_a_subclass_that_overrides_a_hook_is_asked_and_one_that_does_not_is_not():
    """Issue 38: a step awaits ``prepare_request``, ``before_tool_call`` and
    ``after_step`` only when they can do something. A subclass that overrides one
    is still asked (its flag follows the override); the core's hooks are not."""
    from trio_agent import ToolCall, tool
    from trio_agent.engine import (
        Conversation,
        Emitter,
        StepHooks,
        TurnSpec,
        TurnState,
        run_turn,
    )

    @tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    asked: list[str] = []

    class Asking(StepHooks):
        async def prepare_request(self, request, conversation):
            asked.append("prepare_request")
            return request

        async def before_tool_call(self, call):
            asked.append("before_tool_call")
            return None

        async def after_step(self, state):
            asked.append("after_step")
            return None

        async def after_tool_call(self, call, result):
            asked.append("after_tool_call")
            return result

    class Quiet(StepHooks):
        def retry_delay(self, error, attempt):
            return None

    planned = ("prepares_requests", "gates_calls", "checks_steps", "reviews_results")
    assert [getattr(Asking, flag) for flag in planned] == [True] * 4
    assert [getattr(Quiet, flag) for flag in planned] == [False] * 4
    assert not (StepHooks().prepares_requests or StepHooks().checks_steps)
    for hooks, expected in ((Asking(), 5), (Quiet(), 0)):
        asked.clear()
        script = [
            scripted_response("r1", [ToolCall("c1", "echo", {"text": "a"})]),
            scripted_response("r2", "done"),
        ]
        spec = TurnSpec(
            model=ScriptedModel(script),
            tools=ToolRegistry([echo]),
            specs=(),
            system="",
            max_steps=4,
        )
        conversation = Conversation.from_messages([UserMessage("u1", "hi")])
        outcome = await run_turn(conversation, spec, TurnState(), Emitter(None), hooks)
        assert outcome.kind == "completed" and len(conversation.messages) == 4
        # two requests, one call, one step that went on
        assert len(asked) == expected, asked
