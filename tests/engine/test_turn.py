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
