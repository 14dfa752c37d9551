"""The options of an ``Agent`` (``AgentOptions``): ``Agent.resume`` spells out every
option that makes sense on resume (issue 14), and the Agent refuses a bad step
budget as the loop does (issue 13)."""

from __future__ import annotations

import inspect

import pytest

import trio_agent.session._options as session_options
from trio_agent import Agent
from trio_agent.testing import ScriptedModel


@pytest.mark.parametrize("bad", [True, 1.5, "3", None])
def test_regression_agent_max_steps_of_the_wrong_type_is_refused_as_the_loop_does(bad):
    """Issue 13 (review of the room-making split), then issue 14: the Agent refuses what
    run_agent_loop refuses, in its words (a wrong type is a TypeError there), instead of a message
    of its own."""
    with pytest.raises(TypeError, match="max_steps must be an int, got"):
        Agent(model=ScriptedModel([]), max_steps=bad)


def test_resume_spells_out_every_option_that_makes_sense_on_resume():
    """Issue 14: ``Agent.resume`` spells out every option that makes sense on resume, with the
    Agent's defaults and annotations."""
    made = inspect.signature(Agent.__init__).parameters
    resume = inspect.signature(Agent.resume).parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in resume.values())
    session_own = {"self", "messages", "request_sequence_start", "sequence_start", "store"}
    session_own |= {"session_id", "metadata"}
    assert set(resume) == {"store", "session_id"} | (set(made) - session_own)
    for name, parameter in resume.items():
        if name in ("store", "session_id"):
            assert parameter.kind is parameter.POSITIONAL_OR_KEYWORD
            continue
        assert parameter.kind is parameter.KEYWORD_ONLY, name
        if name == "system":  # None: the recorded one
            assert (parameter.default, parameter.annotation) == (None, "str | None")
        elif name != "model":
            assert parameter.default == made[name].default, name
        if name != "system":
            assert parameter.annotation == made[name].annotation, name
    assert session_options.RESUMED_OPTIONS == tuple(
        name for name in resume if name not in ("store", "session_id", "model", "system", "fsync")
    )
