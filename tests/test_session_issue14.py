"""Issue 14 ("the first hour of a user"), the session's side: a deadline on a turn,
an explicit ``Agent.resume`` signature, ``tools=`` as any iterable of ``Tool``,
one step budget for the Agent and the loop, metadata, and continuing a turn
the model still owes an answer to."""

from __future__ import annotations

import inspect
import shutil
from types import MappingProxyType

import pytest
import trio

import trio_agent.session._agent as session_module
import trio_agent.session._options as session_options
from trio_agent import (
    MAX_AGENT_STEPS,
    Agent,
    AssistantMessage,
    JsonlStore,
    ToolCall,
    ToolRegistry,
    ToolResultMessage,
    TurnCancelled,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.ledger import TOOL_OUTCOME_UNKNOWN, TurnEndRecord, derive
from trio_agent.testing import ScriptedModel, scripted_response


@tool
async def add(left: int, right: int) -> str:
    """Add two integers."""
    return str(left + right)


@tool
async def wait() -> str:
    """Sleep a long time."""
    await trio.sleep(1000)
    return "late"


def adding(prefix: str = "r") -> list:
    return [
        scripted_response(f"{prefix}1", [ToolCall(f"{prefix}-c1", "add", {"left": 1, "right": 2})]),
        scripted_response(f"{prefix}2", "3"),
    ]


# --------------------------------------------------- 4. a deadline on a turn


async def test_a_deadline_on_prompt_gives_a_cancelled_result_instead_of_raising(autojump_clock):
    model = ScriptedModel([scripted_response("r1", [ToolCall("c1", "wait", {})])])
    agent = Agent(model=model, tools=[wait])
    with trio.fail_after(100):  # without its deadline the turn would wait for the tool
        result = await agent.prompt("go", cancel_scope=trio.CancelScope(relative_deadline=5))
    assert result.end == TurnCancelled() and result.steps == 1
    # complete messages only: the call is there, no result was invented for it
    assert [type(m) for m in result.messages] == [UserMessage, AssistantMessage]
    assert agent.messages == result.messages and trio.current_time() == pytest.approx(5)


async def test_a_deadline_mid_stream_keeps_no_half_message(autojump_clock, tmp_path):
    store = JsonlStore(tmp_path)
    model = ScriptedModel([scripted_response("r1", "half of it", text_chunks=2, hang_at=1)])
    # no fsync: the autojump clock would jump past a wait for a real thread
    agent = Agent(model=model, store=store, session_id="s1", fsync="never")
    async with agent:  # the ledger is made here (a worker thread), before any deadline
        run = agent.turn("go", cancel_scope=trio.CancelScope(deadline=trio.current_time() + 2))
        with trio.fail_after(100):
            async with run:
                kinds = [event.type async for event in run]
    assert kinds[-1] == "turn.finished" and "model.chunk" in kinds
    assert run.result is not None and run.result.end == TurnCancelled()
    assert [m.id for m in agent.messages] == [agent.messages[0].id]  # the user message alone
    ends = [r for r in (await store.load("s1")).records if type(r) is TurnEndRecord]
    assert [e.end for e in ends] == [TurnCancelled()]


async def test_an_outer_move_on_after_still_raises_cancelled_out_of_prompt(autojump_clock):
    model = ScriptedModel([scripted_response("r1", [ToolCall("c1", "wait", {})])])
    agent = Agent(model=model, tools=[wait])
    reached = False
    with trio.move_on_after(5) as outer:
        await agent.prompt("go")
        reached = True  # pragma: no cover - never: Cancelled comes out of prompt()
    assert outer.cancelled_caught and not reached
    assert [type(m) for m in agent.messages] == [UserMessage, AssistantMessage]


async def test_a_turn_scope_that_is_never_reached_changes_nothing():
    agent = Agent(model=ScriptedModel(adding()), tools=[add])
    scope = trio.CancelScope(relative_deadline=60)
    result = await agent.prompt("1+2", cancel_scope=scope)
    assert result.end.reason == "completed" and result.final_text == "3"
    assert not scope.cancelled_caught


@pytest.mark.parametrize("how", ["prompt", "turn"])
async def test_a_turn_scope_is_checked_as_run_agent_loops(how):
    agent = Agent(model=ScriptedModel([]))
    entered = trio.CancelScope()
    with entered:
        pass
    for bad in ("soon", entered):
        with pytest.raises((TypeError, ValueError)) as loop_error:
            run_agent_loop(
                messages=[],
                model=ScriptedModel([]),
                tools=ToolRegistry(),
                max_steps=1,
                cancel_scope=bad,
            )
        with pytest.raises(type(loop_error.value), match=str(loop_error.value)) as ours:
            if how == "prompt":
                await agent.prompt("x", cancel_scope=bad)
            else:
                agent.turn("x", cancel_scope=bad)
        assert str(ours.value) == str(loop_error.value)
    assert agent.turns == 0 and agent.queued_steering == ()
    await agent.prompt(UserMessage("x", "the id was never taken"))


async def test_prompt_without_a_scope_makes_no_scope_of_its_own(monkeypatch):
    scopes = []
    real = session_module.TurnRun.__init__

    def spy(self, agent, prompt, scope, *rest):
        scopes.append(scope)
        real(self, agent, prompt, scope, *rest)

    monkeypatch.setattr(session_module.TurnRun, "__init__", spy)
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]))
    await agent.prompt("hi")
    assert scopes == [None]  # benchmarks W3: no CancelScope per turn


# ------------------------------------------ 5. resume's explicit signature


def test_resume_spells_out_every_option_that_makes_sense_on_resume():
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


async def test_resume_takes_its_options_and_keeps_the_recorded_system(tmp_path):
    store = JsonlStore(tmp_path)
    first = Agent(model=ScriptedModel(adding()), tools=[add], store=store, system="be brief")
    await first.prompt("1+2")
    await first.aclose()
    model = ScriptedModel(adding("s"))
    seen = []

    async def before(call):
        seen.append(call.id)

    resumed = await Agent.resume(
        store, first.session_id, model=model, tools=(add,), before_tool_call=before, max_steps=2
    )
    assert (await resumed.prompt("again")).final_text == "3"
    assert seen == ["s-c1"] and model.requests[0].system == "be brief"
    await resumed.aclose()
    other = await Agent.resume(store, first.session_id, model=ScriptedModel([]), system="new")
    assert other._state.policy.system == "new"
    await other.aclose()


# ------------------------------------- 6. tools= takes any iterable of Tool


@pytest.mark.parametrize("make", [list, tuple, lambda tools: (t for t in tools), ToolRegistry])
async def test_tools_may_be_any_iterable_of_tool(make):
    agent = Agent(model=ScriptedModel(adding()), tools=make([add, wait]))
    result = await agent.prompt("1+2")
    assert result.final_text == "3"
    assert isinstance(result.messages[2], ToolResultMessage) and not result.messages[2].is_error


def test_a_registry_given_is_kept_and_one_is_built_for_anything_else():
    registry = ToolRegistry([add])
    assert Agent(model=ScriptedModel([]), tools=registry)._state.tools is registry
    built = Agent(model=ScriptedModel([]), tools=[add])._state.tools
    assert type(built) is ToolRegistry and [s.name for s in built.specs()] == ["add"]


@pytest.mark.parametrize(
    ("tools", "error", "match"),
    [
        ([add, add], ValueError, "a tool named 'add' is already registered"),
        ([add, "wait"], TypeError, r"tools\[1\] must be a Tool, got str"),
        ([add, wait, None], TypeError, r"tools\[2\] must be a Tool, got NoneType"),
        (add, TypeError, r"pass \[tool\]"),
        ("add", TypeError, "got str"),
        ({"add": add}, TypeError, "got dict"),
        (3, TypeError, "got int"),
    ],
)
def test_bad_tools_are_refused_by_index(tools, error, match):
    with pytest.raises(error, match=match):
        Agent(model=ScriptedModel([]), tools=tools)


def test_run_agent_loop_still_takes_a_registry_only():
    with pytest.raises(TypeError, match="tools must be a ToolRegistry"):
        run_agent_loop(messages=[], model=ScriptedModel([]), tools=[add], max_steps=1)


# ------------------------------ 7. one step budget for the Agent and the loop


@pytest.mark.parametrize("bad", [0, 65, 100, True, 1.5, "3", None])
def test_agent_and_loop_refuse_the_same_step_budgets_in_the_same_words(bad):
    with pytest.raises((TypeError, ValueError)) as loop_error:
        run_agent_loop(messages=[], model=ScriptedModel([]), tools=ToolRegistry(), max_steps=bad)
    with pytest.raises(type(loop_error.value)) as agent_error:
        Agent(model=ScriptedModel([]), max_steps=bad)
    assert str(agent_error.value) == str(loop_error.value)


async def test_a_turns_budget_is_per_turn_and_request_numbers_run_on():
    agent = Agent(
        model=ScriptedModel([*adding("a"), *adding("b")]),
        tools=[add],
        max_steps=MAX_AGENT_STEPS,
        request_sequence_start=MAX_AGENT_STEPS - 1,
    )
    await agent.prompt("one")
    await agent.prompt("two")  # past request-064: a session has many turns
    assert agent.requests == MAX_AGENT_STEPS + 2


# ------------------------------------------------- 8. metadata on the agent


def test_metadata_is_a_read_only_copy():
    given = {"provider": "openai", "settings": {"max_tokens": 100}}
    agent = Agent(model=ScriptedModel([]), metadata=given)
    given["settings"]["max_tokens"] = 1
    seen = agent.metadata
    assert isinstance(seen, MappingProxyType) and seen == {
        "provider": "openai",
        "settings": {"max_tokens": 100},
    }
    with pytest.raises(TypeError):
        seen["provider"] = "x"  # type: ignore[index]
    seen["settings"]["max_tokens"] = 2  # a copy: the agent's own is unchanged
    assert agent.metadata["settings"] == {"max_tokens": 100}
    assert Agent(model=ScriptedModel([])).metadata == {}


# ---------------------------------------------- 9. continuing an owed reply


async def test_a_turn_with_no_input_runs_the_model_only_when_it_owes_a_reply():
    model = ScriptedModel([scripted_response("r1", "answer")])
    agent = Agent(model=model)
    assert not agent.awaiting_reply
    idle = await agent.prompt()
    assert idle.steps == 0 and model.call_count == 0  # nothing waiting: zero steps
    waiting = Agent(model=model, messages=[UserMessage("u1", "a question")])
    assert waiting.awaiting_reply
    result = await waiting.prompt()
    assert result.steps == 1 and result.final_text == "answer"
    assert model.requests[0].messages == (UserMessage("u1", "a question"),)
    assert not waiting.awaiting_reply
    again = await waiting.prompt()
    assert again.steps == 0 and model.call_count == 1


async def test_a_turn_cut_mid_stream_is_continued_by_a_turn_with_no_input(autojump_clock):
    model = ScriptedModel(
        [
            scripted_response("r1", "half", text_chunks=2, hang_at=1),
            scripted_response("r2", "whole"),
        ]
    )
    agent = Agent(model=model)
    with trio.fail_after(100):
        cut = await agent.prompt("go", cancel_scope=trio.CancelScope(relative_deadline=1))
    assert cut.end == TurnCancelled() and agent.awaiting_reply
    run = agent.turn()
    async with run:
        async for _ in run:
            pass
    assert run.result.final_text == "whole" and not agent.awaiting_reply


async def test_calls_a_cut_turn_left_open_are_answered_then_the_model_continues(autojump_clock):
    model = ScriptedModel(
        [scripted_response("r1", [ToolCall("c1", "wait", {})]), scripted_response("r2", "done")]
    )
    agent = Agent(model=model, tools=[wait])
    with trio.fail_after(100):
        await agent.prompt("go", cancel_scope=trio.CancelScope(relative_deadline=1))
    assert type(agent.messages[-1]) is AssistantMessage and agent.awaiting_reply
    result = await agent.prompt()
    assert result.final_text == "done"
    answered = model.requests[1].messages[-1]
    assert type(answered) is ToolResultMessage and answered.is_error


async def crash_copy(tmp_path, script, tools, until):
    """Run a turn until ``until(event)``, copy its ledger as a kill -9 would leave
    it, and return the store holding the copy (the original is then closed)."""
    store = JsonlStore(tmp_path / "live")
    agent = Agent(model=ScriptedModel(script), tools=tools, store=store, session_id="s1")
    crashed = JsonlStore(tmp_path / "crashed")
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            if until(event):
                crashed.directory.mkdir()
                shutil.copy(store.path("s1"), crashed.path("s1"))
                run.cancel()
    await agent.aclose()
    return crashed


async def test_after_a_crash_mid_stream_a_resumed_session_continues_the_turn(tmp_path):
    script = [scripted_response("r1", "lost", text_chunks=2, hang_at=1)]
    crashed = await crash_copy(tmp_path, script, [], lambda e: e.type == "model.chunk")
    model = ScriptedModel([scripted_response("r2", "continued")])
    agent = await Agent.resume(crashed, "s1", model=model)
    assert agent.resume_warnings and agent.awaiting_reply
    result = await agent.prompt()  # no new input: the model owes the answer
    assert result.final_text == "continued" and result.steps == 1
    assert model.requests[0].messages == (UserMessage("u1", "go"),)
    assert model.requests[0].id == "request-002"  # request-001 is never sent again
    await agent.aclose()
    derived = derive((await crashed.load("s1")).records)
    assert derived.turns == 2 and derived.closed


async def test_after_a_crash_mid_call_the_closed_call_is_answered_by_the_model(tmp_path):
    script = [scripted_response("r1", [ToolCall("c1", "wait", {})])]
    crashed = await crash_copy(tmp_path, script, [wait], lambda e: e.type == "tool.started")
    model = ScriptedModel([scripted_response("r2", "I will not wait again")])
    agent = await Agent.resume(crashed, "s1", model=model, tools=[wait])
    assert [code for _, code in agent.closed_on_resume] == [TOOL_OUTCOME_UNKNOWN]
    assert agent.awaiting_reply
    result = await agent.prompt()
    assert result.final_text == "I will not wait again"
    last = model.requests[0].messages[-1]
    assert type(last) is ToolResultMessage and TOOL_OUTCOME_UNKNOWN in last.content
    await agent.aclose()


async def test_a_resumed_session_that_owes_nothing_runs_no_model(tmp_path):
    store = JsonlStore(tmp_path)
    async with Agent(model=ScriptedModel(adding()), tools=[add], store=store) as first:
        await first.prompt("1+2")
    model = ScriptedModel([])
    agent = await Agent.resume(store, first.session_id, model=model, tools=[add])
    assert not agent.awaiting_reply
    assert (await agent.prompt()).steps == 0 and model.call_count == 0
    await agent.aclose()
