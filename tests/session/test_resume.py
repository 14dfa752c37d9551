"""``Agent.resume``: a recorded session taken over with the options given and its
recorded system (issue 14), continued after a crash mid-stream or mid-call, a resume
that loses the race to a closing writer (issue 12), a bad option refused before
anything is opened."""

from __future__ import annotations

import os
import shutil

import pytest
from helpers import add
from ledger_scenario import agent_on, records_of, sums
from sessions import add_text, adding, wait

from trio_agent import (
    Agent,
    JsonlStore,
    ToolCall,
    ToolRegistry,
    ToolResultMessage,
    UserMessage,
)
from trio_agent.ledger import TOOL_OUTCOME_UNKNOWN, derive
from trio_agent.testing import ScriptedModel, scripted_response


async def test_resume_takes_its_options_and_keeps_the_recorded_system(tmp_path):
    """Issue 14: a resume takes the options given and keeps the recorded system unless given
    another."""
    store = JsonlStore(tmp_path)
    first = Agent(model=ScriptedModel(adding()), tools=[add_text], store=store, system="be brief")
    await first.prompt("1+2")
    await first.aclose()
    model = ScriptedModel(adding("s"))
    seen = []

    async def before(call):
        seen.append(call.id)

    resumed = await Agent.resume(
        store,
        first.session_id,
        model=model,
        tools=(add_text,),
        before_tool_call=before,
        max_steps=2,
    )
    assert (await resumed.prompt("again")).final_text == "3"
    assert seen == ["s-c1"] and model.requests[0].system == "be brief"
    await resumed.aclose()
    other = await Agent.resume(store, first.session_id, model=ScriptedModel([]), system="new")
    assert other._state.policy.system == "new"
    await other.aclose()


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
    """Issue 14: after a crash mid-stream, a resumed session continues the turn with the next
    request number."""
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
    """Issue 14: after a crash mid-call, the call closed as outcome unknown is answered by the
    model."""
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
    """Issue 14: a resumed session that owes nothing runs no model on a turn with no input."""
    store = JsonlStore(tmp_path)
    async with Agent(model=ScriptedModel(adding()), tools=[add_text], store=store) as first:
        await first.prompt("1+2")
    model = ScriptedModel([])
    agent = await Agent.resume(store, first.session_id, model=model, tools=[add_text])
    assert not agent.awaiting_reply
    assert (await agent.prompt()).steps == 0 and model.call_count == 0
    await agent.aclose()


async def test_regression_resume_refuses_a_bad_fsync_before_opening_anything(tmp_path):
    """Resume opened (and could truncate) the ledger file before the policy was checked, leaking the
    descriptor."""

    from trio_agent import JsonlStore
    from trio_agent.testing import scripted_response

    store = JsonlStore(tmp_path)
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]), store=store, session_id="s")
    await agent.prompt("go")
    await agent.aclose()
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(ValueError, match="fsync"):
        await Agent.resume(store, "s", model=ScriptedModel([]), fsync="sometimes")
    assert len(os.listdir("/proc/self/fd")) == before


async def test_a_resume_that_loses_the_race_to_a_closing_writer_loads_again(store, monkeypatch):
    """Issue 12: a resume that lost the race to a closing writer failed; it loads again."""
    async with agent_on(store, sums("a")):
        pass
    # a resume loads from the last snapshot on (``load_tail``) where the store can
    method = "load_tail" if hasattr(store, "load_tail") else "load"
    real_load = getattr(type(store), method)
    loads = []

    async def load_then_someone_writes(self, session_id):
        loaded = await real_load(self, session_id)
        loads.append(len(loaded.records))
        if len(loads) == 1:  # between this load and the reopen, another writer works
            other = await Agent.resume(
                store, "s1", model=ScriptedModel(sums("b")), tools=ToolRegistry([add])
            )
            await other.prompt(UserMessage("u1", "go"))
            await other.aclose()
        return loaded

    monkeypatch.setattr(type(store), method, load_then_someone_writes)
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    monkeypatch.undo()
    assert loads[0] < loads[-1] and len(resumed.messages) == 5
    await resumed.aclose()
    assert derive(await records_of(store)).turns == 1


async def test_a_resumed_session_without_the_tool_an_approved_call_needs_fails_naming_it(
    tmp_path,
):
    """Issue 35: a session resumed without the tool of a call approved for it answered
    the call "Unknown tool" and reported the turn ``completed``: the approval was
    spent on nothing. The turn that would run it now raises at once, naming the call,
    the tool and what to pass, before it sends or records anything; the decision
    stays, and a resume with the tool runs the call."""
    from trio_agent import tool

    ran = []

    @tool(requires_approval=True)
    async def deploy(env: str) -> str:
        """Deploy."""
        ran.append(env)
        return f"deployed {env}"

    store = JsonlStore(tmp_path)
    first = Agent(
        model=ScriptedModel([scripted_response("r1", [ToolCall("c1", "deploy", {"env": "prod"})])]),
        tools=[deploy],
        store=store,
        session_id="s",
    )
    await first.prompt("deploy")
    await first.approve("c1")
    await first.aclose()
    model = ScriptedModel([scripted_response("r2", "done")])
    without = await Agent.resume(store, "s", model=model, tools=[add])
    with pytest.raises(RuntimeError, match=r"approved call 'c1' needs the tool 'deploy'.*tools="):
        await without.prompt()
    await without.aclose()
    assert model.requests == [] and ran == []
    kinds = [record.kind for record in await records_of(store, "s")]
    assert kinds.count("turn/start") == 1 and "tool/call" not in kinds  # nothing recorded
    again = await Agent.resume(store, "s", model=model, tools=[deploy])
    result = await again.prompt()
    await again.aclose()
    assert ran == ["prod"] and result.end.reason == "completed"


async def test_resume_checks_each_stored_message_once(tmp_path, monkeypatch):
    """Issue 39: a resume checked every message three times: in derive's replay,
    again when the closed transcript was rebuilt, and again by Agent(messages=...).
    Now the replay's checked conversation is taken over: one check and one link
    per stored message (and one link per closing result)."""
    import trio_agent.engine._transcript as transcript_module
    import trio_agent.messages._rules as rules

    store = JsonlStore(tmp_path)
    agent = Agent(model=ScriptedModel(adding("a") + adding("b")), tools=[add_text], store=store)
    await agent.prompt("1+2")
    await agent.prompt("again")
    await agent.aclose()
    stored = len(agent.messages)
    checks, links = [], []
    real_check, real_add = rules.checked_message, rules.Linker.add

    def counted_check(message, index):
        checks.append(message.id)
        return real_check(message, index)

    def counted_add(self, message):
        links.append(message.id)
        return real_add(self, message)

    monkeypatch.setattr(rules, "checked_message", counted_check)
    monkeypatch.setattr(transcript_module, "checked_message", counted_check)
    monkeypatch.setattr(rules.Linker, "add", counted_add)
    resumed = await Agent.resume(store, agent.session_id, model=ScriptedModel([]))
    assert resumed.messages == agent.messages
    await resumed.aclose()
    assert len(checks) == stored and len(set(checks)) == stored
    assert len(links) == stored


async def test_a_ledger_copied_under_another_id_is_refused_naming_both(tmp_path):
    """Bug: a ledger copied (or renamed) to another session's file was resumed as
    that session, though its records name the first: each snapshot the resumed
    session wrote named the first session, so every later resume warned and replayed
    the whole ledger. Refused, naming both ids; a fork makes a session of it."""
    from trio_agent import LedgerCorruptError
    from trio_agent.stores import SnapshotPolicy

    store = JsonlStore(tmp_path, snapshots=SnapshotPolicy(every_turns=1))
    agent = agent_on(store, sums())
    await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    shutil.copy(store.path("s1"), store.path("copy"))
    before = store.path("copy").read_bytes()
    with pytest.raises(LedgerCorruptError, match=r"copy: its records are those of session 's1'"):
        await Agent.resume(store, "copy", model=ScriptedModel([]))
    assert store.path("copy").read_bytes() == before  # nothing written
    forked = await Agent.fork(store, "copy", at_turn=1, new_session_id="mine")
    resumed = await Agent.resume(store, forked, model=ScriptedModel([]))
    await resumed.aclose()
    assert resumed.resume_warnings == ()
