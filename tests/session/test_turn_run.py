"""One turn of an ``Agent`` (``TurnRun``), from taking its input to recording its end:
a turn cancelled before it starts, an internal error, a base exception or a failure
at its start (issue 13), the tools it runs with, and a deadline on a turn (issue
14): ``cancel_scope=``, checked as ``run_agent_loop`` checks it and given to one
turn only (review 14)."""

from __future__ import annotations

import pytest
import trio
from helpers import agent_with
from sessions import add_text, adding, kinds, model, u, user_texts, wait

import trio_agent.session._agent as session_module
import trio_agent.session._turn_run as _turn_run
from trio_agent import (
    Agent,
    AssistantMessage,
    ToolCall,
    ToolRegistry,
    TranscriptError,
    TurnCancelled,
    TurnFailed,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.ledger import Ledger, LedgerError, TurnEndRecord
from trio_agent.session._state import SessionState
from trio_agent.stores import JsonlStore
from trio_agent.testing import ScriptedModel, scripted_response


@pytest.mark.parametrize("how", ["run.cancel() before start", "outer cancel at once"])
async def test_a_turn_cancelled_before_it_starts_keeps_its_prompt_and_steering(how):
    """A turn cancelled before it started lost its prompt and the steering queued for it."""
    agent, model = agent_with([scripted_response("r1", "x")])
    agent.steer(u("s1", "steer"))
    run = agent.turn(u("p1", "prompt"))
    events = []
    if how == "run.cancel() before start":
        run.cancel()
        async with run:
            async for event in run:
                events.append(event)
    else:
        with trio.move_on_after(0):
            async with run:
                async for event in run:
                    events.append(event)
    assert run.result.end == TurnCancelled()
    kept = [m.id for m in agent.messages] + [m.id for m in agent.queued_steering]
    assert sorted(kept) == ["p1", "s1"]
    assert model.call_count == 0


async def test_an_internal_error_still_ends_the_turn_visibly(monkeypatch):
    """An internal error ended the turn without ``turn.finished`` or a result."""
    import trio_agent.session._turn_run as _turn_run

    async def broken_run_turn(*args, **kwargs):
        raise RuntimeError("engine bug")

    monkeypatch.setattr(_turn_run, "run_turn", broken_run_turn)  # where TurnRun finds it
    agent, _ = agent_with([scripted_response("r1", "x")])
    events = []
    with pytest.raises(RuntimeError, match="engine bug"):
        async with agent.turn(u("u1")) as run:
            async for event in run:
                events.append(event)
    assert run.result.end == TurnFailed(code="INTERNAL_ERROR", detail="RuntimeError: engine bug")
    assert events[-1].type == "turn.finished"


async def test_regression_a_base_exception_at_turn_start_leaves_the_agent_usable(monkeypatch):
    """Issue 13 (review of the room-making split): a BaseException at a turn's start left the agent
    running for ever, its steering lost."""
    real, fired = _turn_run.TurnState, []

    def ki_once():
        if not fired:
            fired.append(1)
            raise KeyboardInterrupt
        return real()

    monkeypatch.setattr(_turn_run, "TurnState", ki_once)  # where TurnRun finds it
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]))
    agent.steer("queued")
    with pytest.raises(KeyboardInterrupt):
        await agent.prompt("first")
    assert not agent.running
    assert [m.content for m in agent.queued_steering] == ["queued"]
    await agent.aclose()


async def test_regression_a_failed_turn_start_lets_the_prompt_id_go(monkeypatch, tmp_path):
    """Issue 13 (review of the room-making split): a turn whose start failed (turn/start not
    written) kept its prompt's id reserved."""
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]), store=JsonlStore(tmp_path))

    def fail(self, turn, sequence, model=""):
        raise LedgerError("No space left on device")

    with monkeypatch.context() as m:
        m.setattr(Ledger, "turn_started", fail)
        with pytest.raises(LedgerError):
            await agent.prompt(UserMessage("u1", "hi"))
    agent.steer(UserMessage("u1", "hi"))  # HEAD: TranscriptError "message id 'u1' is queued"
    await agent.aclose()


@tool
async def extra() -> str:
    """Registered while the turn starts."""
    return "x"


async def test_regression_a_tool_registered_on_turn_started_waits_for_the_next_turn():
    """Issue 13 (review of the room-making split): a tool registered on ``turn.started`` reached the
    turn already running; a turn runs with the tools it started with."""
    tools, model = ToolRegistry(), ScriptedModel([scripted_response("r1", "ok")])
    agent = Agent(model=model, tools=tools)
    async with agent.turn("go") as run:
        async for event in run:
            if event.type == "turn.started":
                tools.register(extra)
    assert model.requests[0].tools == ()


async def test_a_deadline_on_prompt_gives_a_cancelled_result_instead_of_raising(autojump_clock):
    """Issue 14: a deadline on a turn (``cancel_scope=``) ends it with a cancelled result instead of
    raising, keeping complete messages only."""
    model = ScriptedModel([scripted_response("r1", [ToolCall("c1", "wait", {})])])
    agent = Agent(model=model, tools=[wait])
    with trio.fail_after(100):  # without its deadline the turn would wait for the tool
        result = await agent.prompt("go", cancel_scope=trio.CancelScope(relative_deadline=5))
    assert result.end == TurnCancelled() and result.steps == 1
    # complete messages only: the call is there, no result was invented for it
    assert [type(m) for m in result.messages] == [UserMessage, AssistantMessage]
    assert agent.messages == result.messages and trio.current_time() == pytest.approx(5)


async def test_a_deadline_mid_stream_keeps_no_half_message(autojump_clock, tmp_path):
    """Issue 14: a deadline that lands mid-stream keeps no half message, and the ledger records the
    turn as cancelled."""
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
    """Issue 14: an outer ``move_on_after`` still raises Cancelled out of ``prompt()``."""
    model = ScriptedModel([scripted_response("r1", [ToolCall("c1", "wait", {})])])
    agent = Agent(model=model, tools=[wait])
    reached = False
    with trio.move_on_after(5) as outer:
        await agent.prompt("go")
        reached = True  # pragma: no cover - never: Cancelled comes out of prompt()
    assert outer.cancelled_caught and not reached
    assert [type(m) for m in agent.messages] == [UserMessage, AssistantMessage]


async def test_a_turn_scope_that_is_never_reached_changes_nothing():
    """Issue 14: a turn's scope whose deadline is never reached changes nothing."""
    agent = Agent(model=ScriptedModel(adding()), tools=[add_text])
    scope = trio.CancelScope(relative_deadline=60)
    result = await agent.prompt("1+2", cancel_scope=scope)
    assert result.end.reason == "completed" and result.final_text == "3"
    assert not scope.cancelled_caught


@pytest.mark.parametrize("how", ["prompt", "turn"])
async def test_a_turn_scope_is_checked_as_run_agent_loops(how):
    """Issue 14: a turn's scope is checked as run_agent_loop checks it, in the same words, and a
    refused turn takes no id."""
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
    """Issue 14: a prompt without a scope makes no CancelScope of its own (benchmarks W3)."""
    scopes = []
    real = session_module.TurnRun.__init__

    def spy(self, agent, prompt, scope, *rest):
        scopes.append(scope)
        real(self, agent, prompt, scope, *rest)

    monkeypatch.setattr(session_module.TurnRun, "__init__", spy)
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]))
    await agent.prompt("hi")
    assert scopes == [None]  # benchmarks W3: no CancelScope per turn


async def test_regression_one_cancel_scope_given_to_two_turns_is_refused_for_the_second(
    tmp_path,
):
    """Review 14 (sessions and stores): one cancel scope given to two turns was accepted, and the
    second failed INTERNAL_ERROR after turn/start was recorded, its prompt lost; it is refused
    before anything is recorded."""
    store = JsonlStore(tmp_path)
    agent = Agent(model=model(), store=store, session_id="s")
    scope = trio.CancelScope(relative_deadline=10)
    first = agent.turn("one", cancel_scope=scope)
    # HEAD: accepted, then turn/start recorded and the turn failed INTERNAL_ERROR
    # ("Each CancelScope may only be used for a single 'with' block"), its prompt lost.
    with pytest.raises(ValueError, match="already given to another turn"):
        agent.turn(UserMessage("u2", "two"), cancel_scope=scope)
    with pytest.raises(ValueError, match="already given to another turn"):
        await agent.prompt(UserMessage("u3", "three"), cancel_scope=scope)
    assert (await first.wait()).end.reason == "completed"
    with pytest.raises(ValueError, match="already been entered"):
        await agent.prompt(UserMessage("u3", "three"), cancel_scope=scope)
    # Nothing of the refused turns was recorded or kept: their ids are free.
    assert agent.turns == 1
    await agent.prompt(UserMessage("u2", "two"))
    await agent.prompt(UserMessage("u3", "three"), cancel_scope=trio.CancelScope())
    assert user_texts(agent) == ["one", "two", "three"]
    await agent.aclose()
    records = kinds(tmp_path / "s.jsonl")
    assert records.count("turn/start") == records.count("turn/end") == 3


async def test_a_scope_entered_before_its_turn_starts_raises_valueerror_with_nothing_recorded(
    tmp_path,
):
    """Review 14 (sessions and stores): a scope entered before its turn starts raises ValueError,
    with nothing recorded and the id let go."""
    agent = Agent(model=model(), store=JsonlStore(tmp_path), session_id="s")
    scope = trio.CancelScope()
    run = agent.turn(UserMessage("u1", "one"), cancel_scope=scope)
    with scope:
        pass
    with pytest.raises(ValueError, match="already been entered"):
        await run.wait()
    assert not (tmp_path / "s.jsonl").exists(), "the session was created for a turn refused"
    assert (agent.turns, agent.running) == (0, False)
    other = trio.CancelScope()
    streamed = agent.turn(UserMessage("u2", "two"), cancel_scope=other)
    with other:
        pass
    with pytest.raises(ValueError, match="already been entered"):
        async with streamed:
            pass
    result = await agent.prompt(UserMessage("u1", "one"))  # the id was let go
    assert result.end.reason == "completed"
    await agent.prompt(UserMessage("u2", "two"))
    await agent.aclose()
    assert kinds(tmp_path / "s.jsonl").count("turn/start") == 2


async def test_a_scope_entered_while_the_session_is_created_refuses_the_turn_before_turn_start(
    tmp_path, monkeypatch
):
    """Review 14 (sessions and stores): a scope entered while the session is created refuses the
    turn before turn/start."""
    agent = Agent(model=model(), store=JsonlStore(tmp_path), session_id="s")
    scope = trio.CancelScope()
    opened = SessionState.open

    async def open_and_enter(self, prompt=None):
        await opened(self, prompt)
        with scope:  # someone enters it while the ledger is made
            pass

    monkeypatch.setattr(SessionState, "open", open_and_enter)
    with pytest.raises(ValueError, match="already been entered"):
        await agent.turn(UserMessage("u1", "one"), cancel_scope=scope).wait()
    monkeypatch.undo()
    assert "turn/start" not in kinds(tmp_path / "s.jsonl")
    assert (await agent.prompt(UserMessage("u1", "one"))).end.reason == "completed"
    await agent.aclose()
    assert kinds(tmp_path / "s.jsonl").count("turn/start") == 1


async def test_a_turn_entered_holds_the_session_before_its_first_event():
    """Docs review: ``async with agent.turn(a):`` then ``agent.prompt(b)`` in the block,
    before the first event, ran ``b`` and failed the entered turn in its own task (an
    exception group out of the block); one turn runs at a time, and the entered one
    is it, so ``prompt(b)`` is refused and ``a`` runs to its end."""
    agent = Agent(model=model())
    async with agent.turn(UserMessage("u1", "one")) as turn:
        assert agent.running
        with pytest.raises(RuntimeError, match="already running a turn"):
            await agent.prompt(UserMessage("u2", "two"))
        with pytest.raises(RuntimeError, match="already running a turn"):
            async with agent.turn("three"):
                pass
        result = await turn.wait()
    assert result.end.reason == "completed" and user_texts(agent) == ["one"]
    assert (await agent.prompt(UserMessage("u2", "two"))).end.reason == "completed"  # id let go
    assert user_texts(agent) == ["one", "two"]


async def test_a_decision_inside_an_entered_turn_is_refused_before_its_first_event():
    """Docs review: ``approve()`` inside ``async with agent.turn(...)`` before the turn's
    first event was taken (the turn had not yet claimed the agent), and the turn then
    ran the call; deciding while a turn runs is refused, and the call stays held."""

    @tool(requires_approval=True)
    async def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    agent = Agent(
        model=ScriptedModel([scripted_response("r1", [ToolCall("c1", "pay", {"amount": 3})])]),
        tools=[pay],
    )
    assert (await agent.prompt("pay")).end.reason == "awaiting_approval"
    async with agent.turn() as turn:
        with pytest.raises(RuntimeError, match="between turns"):
            await agent.approve("c1")
        result = await turn.wait()
    assert result.end.reason == "awaiting_approval" and result.steps == 0
    assert [call.id for call in agent.pending_approvals] == ["c1"]


@pytest.mark.parametrize("driven", ["entered", "awaited"])
async def test_a_turn_whose_tools_cannot_be_read_as_it_starts_lets_the_agent_go(driven):
    """Review of issue 38: once an entered turn held its agent from the entry, a
    tool source failing as the turn's task read it (its tool gone between
    ``turn()`` and the entry, which a ``tool_choice`` naming it finds) left the
    agent held by a turn that never ran: every later turn was refused as
    "already running"; awaited (``prompt()``, ``wait()``) its message id stayed
    queued. The error leaves the block and the agent is free, the message's id
    with it, however the turn was driven."""
    from trio_agent import ModelSettings

    @tool
    async def lookup() -> str:
        """Look up."""
        return "found"

    class Flaky:
        def __init__(self) -> None:
            self.gone = False

        def tools(self) -> list:
            return [] if self.gone else [lookup]

    source = Flaky()
    agent = Agent(model=model(), tool_sources=[source])
    turn = agent.turn(UserMessage("u1", "one"), settings=ModelSettings(tool_choice="lookup"))
    source.gone = True
    with pytest.raises(ValueError, match="lookup"):
        if driven == "awaited":
            await turn.wait()
        else:
            async with turn:
                async for _ in turn:
                    pass
    assert not agent.running and agent.turns == 0
    assert (await agent.prompt(UserMessage("u1", "one"))).end.reason == "completed"
    assert user_texts(agent) == ["one"]


async def test_a_turn_driven_inline_a_second_time_is_refused():
    """Review: an entered turn holds the session, and its driving skipped the claim
    when the session was its own: ``drive_inline()`` of a turn already entered, or
    already driven inline, ran the same turn twice at once over one conversation."""
    agent = Agent(model=model())
    async with agent.turn(UserMessage("u1", "one")) as turn:
        with pytest.raises(RuntimeError, match="only once"):
            await turn.drive_inline()
        result = await turn.wait()
    assert result.end.reason == "completed" and user_texts(agent) == ["one"]

    again = agent.turn(UserMessage("u2", "two"))
    first = again.drive_inline()
    with pytest.raises(RuntimeError, match="only once"):
        await again.drive_inline()
    await first
    assert again.result is not None and again.result.end.reason == "completed"
    assert user_texts(agent) == ["one", "two"] and not agent.running


async def test_regression_a_turn_made_and_dropped_lets_its_message_id_go():
    """A ``TurnRun`` made and never entered nor awaited kept its message's id reserved for the
    session's whole life: the same message could never be sent again ("is queued")."""
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]))
    pending = agent.turn(UserMessage("u1", "hi"))
    with pytest.raises(TranscriptError, match="queued"):
        agent.steer(UserMessage("u1", "hi"))  # held: still its turn's
    del pending
    result = await agent.prompt(UserMessage("u1", "hi"))
    assert [m.id for m in result.messages] == ["u1", "message-r1"]


async def test_a_turn_that_ran_keeps_its_message_after_it_is_dropped():
    """Dropping a turn that was entered lets nothing go: its message is in the transcript."""
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]))
    run = agent.turn(UserMessage("u1", "hi"))
    async with run:
        agent.steer(UserMessage("s1", "more"))  # queued while the turn runs
        await run.wait()
    del run
    with pytest.raises(TranscriptError, match="u1"):
        agent.steer(UserMessage("u1", "again"))
    assert "s1" in [m.id for m in agent.messages]
