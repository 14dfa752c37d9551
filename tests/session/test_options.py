"""The options of an ``Agent`` (``AgentOptions``): ``Agent.resume`` spells out every
option that makes sense on resume (issue 14), and the Agent refuses a bad step
budget as the loop does (issue 13)."""

from __future__ import annotations

import inspect

import attrs
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


def test_agent_takes_exactly_the_declared_options_with_their_defaults():
    """Issue 33 (the house): the options of an Agent were written in five places
    (``Agent()``, ``Agent.resume``, ``RESUMED_OPTIONS``, ``SessionPolicy``,
    ``agent_maker``); ``AgentOptions`` is now their one declaration, and
    ``Agent()``'s keywords are held to it, name by name and default by default."""
    made = inspect.signature(Agent.__init__).parameters
    declared = attrs.fields(session_options.AgentOptions)
    assert set(made) - {"self"} == {
        *session_options.AGENT_OPTIONS,
        *session_options.SESSION_OPTIONS,
    }
    for field in declared:
        parameter = made[field.name]
        assert parameter.kind is parameter.KEYWORD_ONLY, field.name
        if field.default is attrs.NOTHING:
            assert parameter.default is parameter.empty, field.name
        else:
            assert parameter.default == field.default, field.name
        assert parameter.annotation == field.type, field.name


def test_an_agent_made_from_its_options_runs_as_one_made_by_hand():
    """``AgentOptions`` builds the agents the fleet and ``as_tool`` make: the same
    options give the same agent (a copy of an agent's options makes an agent with
    the same policy)."""
    options = session_options.AgentOptions(model=ScriptedModel([]), max_steps=7, system="be brief")
    by_hand = Agent(model=options.model, max_steps=7, system="be brief")
    made = Agent(**options.as_keywords())
    assert made._state.policy is by_hand._state.policy  # shared: the same plain options
    assert made._state.options().max_steps == 7 and made._state.options().system == "be brief"
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_step'"):
        session_options.AgentOptions(model=ScriptedModel([]), max_step=3)  # type: ignore[call-arg]


async def test_an_agent_says_its_options_so_another_session_can_be_made_or_resumed_alike(
    tmp_path,
):
    """Issue 35 (the CLI runs your agent): an application's ``Agent`` is the template
    of the sessions ``trio-agent run/resume/worker --agent`` make, but its options
    were reachable only through a private attribute. ``agent.options`` gives them,
    and they make another session, or resume a recorded one, with the same tools
    and policy (the recorded system prompt kept on resume)."""
    from trio_agent import JsonlStore, tool
    from trio_agent.session import AgentOptions
    from trio_agent.testing import scripted_response

    @tool
    async def ping() -> str:
        """Answer pong."""
        return "pong"

    template = Agent(
        model=ScriptedModel([scripted_response("r1", "hi")]),
        tools=[ping],
        system="be brief",
        max_steps=5,
        metadata={"app": "x"},
    )
    options = template.options
    assert isinstance(options, AgentOptions)
    assert options.max_steps == 5 and options.system == "be brief"
    assert list(options.tools.names()) == ["ping"]  # type: ignore[union-attr]
    store = JsonlStore(tmp_path)
    made = Agent(**options.as_keywords(), store=store, session_id="s")
    assert (await made.prompt("hello")).final_text == "hi"
    await made.aclose()
    again = await Agent.resume(
        store, "s", **attrs.evolve(options, model=ScriptedModel([])).resume_keywords()
    )
    assert again.options.system == "be brief" and again.options.max_steps == 5
    assert list(again.options.tools.names()) == ["ping"]  # type: ignore[union-attr]
    assert again.turns == 1 and not again.metadata  # the session is not an option
    await again.aclose()


def test_an_agents_options_keep_its_deps_type():
    """Issue 35 (found writing its docs): ``agent.options`` left ``deps_type`` out, so
    an agent made or resumed from them (``as_keywords``, ``agent_maker``,
    ``--agent``) lost its dependencies' type."""

    class Deps:
        pass

    agent = Agent(model=ScriptedModel([]), deps_type=Deps, max_steps=5)
    assert agent.options.deps_type is Deps
    again = Agent(**agent.options.as_keywords())
    assert again.options.deps_type is Deps and again.options.max_steps == 5


async def test_an_agents_options_hold_settings_of_their_own():
    """Agents made with equal settings share one policy, and ``agent.options`` gave
    that policy's own ``ModelSettings``: a change to its ``extra_body`` or
    ``extra_headers`` (dicts) reached every agent made alike, mid-session too. The
    options now hold a copy, and still make an agent with the same policy."""
    from trio_agent import ModelSettings
    from trio_agent.testing import scripted_response

    def made() -> tuple[Agent, ScriptedModel]:
        model = ScriptedModel([scripted_response("r1", "ok")])
        settings = ModelSettings(extra_body={"k": 1}, extra_headers={"x-k": "1"})
        return Agent(model=model, settings=settings), model

    (mine, _), (other, model) = made(), made()
    options = mine.options
    assert options.settings is not None and options.settings.extra_body is not None
    assert options.settings.extra_headers is not None
    options.settings.extra_body["k"] = "changed"
    options.settings.extra_headers["x-k"] = "changed"
    await other.prompt("hi")
    sent = model.requests[0].settings
    assert sent is not None and (sent.extra_body, sent.extra_headers) == ({"k": 1}, {"x-k": "1"})
    assert mine.options.settings == other.options.settings
    assert Agent(**mine.options.as_keywords())._state.policy is other._state.policy
