"""A call owed a rerun after a crash goes through the approval rule as a fresh call
of the model does, unless the ledger shows it approved (DESIGN 11.5, 12.4).

The attacker hands over a ledger whose last step made a call of an idempotent tool
that needs a person's approval, with a ``tool/call`` record (its dispatch) and no
``approval/requested``: a resume took it for a call let through once and ran it
again, unasked. Records are forged through the ``Ledger`` API, as anyone can."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from kept_lines import KeptLines

from trio_agent import (
    Agent,
    AssistantMessage,
    JsonlStore,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    tool,
)
from trio_agent.events import TurnAwaitingApproval, TurnInterrupted
from trio_agent.ledger import Ledger, LedgerCorruptError, ToolCallRecord, derive, record_decoder
from trio_agent.ledger._derive import replay_of
from trio_agent.testing import ScriptedModel, scripted_response

SESSION = "s1"
WIRE = ToolCall("c1", "wire", {"to": "mallory", "amount": 1000})


def called(ledger: Ledger, *blocks: Any, dispatched: ToolCall | None = None) -> Ledger:
    """``ledger``'s first turn as far as a model's response with ``blocks``, and
    ``dispatched`` (if given) dispatched as idempotent."""
    ledger.session_started(SESSION, 0.0, "")
    ledger.turn_started(1, 0)
    ledger.message(UserMessage("user-1", "pay"))
    ledger.step_started("request-001")
    ledger.message(AssistantMessage("message-r1", blocks))
    if dispatched is not None:
        ledger.tool_call(dispatched, "idempotent")
    return ledger


async def forged(tmp_path: Path, call: ToolCall = WIRE, store: Any = None) -> Any:
    """A session whose writer 'died' while ``call`` ran: dispatched as idempotent,
    never held for approval, no end (in ``store``, else a ``JsonlStore``)."""
    lines = KeptLines()
    called(Ledger(lines, 0), TextBlock("Paying."), call, dispatched=call)
    store = JsonlStore(tmp_path) if store is None else store
    writer = store.create(SESSION)
    for line in lines.lines:
        writer.append(line)
    await writer.flush(True)
    await writer.aclose()
    return store


def wire_tool(ran: list[dict[str, object]], requires_approval: bool = True):
    @tool(effect="idempotent", requires_approval=requires_approval)
    async def wire(to: str, amount: int) -> str:
        """Wire money (the same idempotency key twice wires once)."""
        ran.append({"to": to, "amount": amount})
        return f"wired {amount} to {to}"

    return wire


def results(messages, call_id: str) -> list[ToolResultMessage]:
    return [m for m in messages if type(m) is ToolResultMessage and m.tool_call_id == call_id]


async def test_a_forged_dispatch_of_a_tool_that_requires_approval_is_not_run_again_unasked(
    tmp_path,
):
    store = await forged(tmp_path)
    ran: list[dict[str, object]] = []
    model = ScriptedModel([scripted_response("r2", "I will not pay")])
    agent = await Agent.resume(store, SESSION, model=model, tools=[wire_tool(ran)])
    result = await agent.prompt()
    assert ran == []  # held, as a fresh call of the model is
    assert result.end.reason == "awaiting_approval" and result.steps == 0
    assert [c.id for c in agent.pending_approvals] == ["c1"] and agent.rerun_calls == ()
    await agent.reject("c1", reason="I never asked for this", by="ann")
    result = await agent.prompt()
    await agent.aclose()
    assert ran == [] and result.final_text == "I will not pay"
    [answer] = results(result.messages, "c1")
    assert answer.is_error and "I never asked for this" in answer.content
    derived = derive((await store.load(SESSION)).records)
    assert derived.reruns == () and derived.pending_approvals == ()


async def test_a_forged_dispatch_held_by_the_agents_approval_rule_is_not_run_again_unasked(
    tmp_path,
):
    store = await forged(tmp_path)
    ran: list[dict[str, object]] = []

    def large(call: ToolCall) -> bool:
        return int(call.arguments.get("amount", 0)) > 100  # type: ignore[call-overload]

    agent = await Agent.resume(
        store,
        SESSION,
        model=ScriptedModel([]),
        tools=[wire_tool(ran, requires_approval=False)],
        approval=large,
    )
    result = await agent.prompt()
    await agent.aclose()
    assert ran == [] and result.end.reason == "awaiting_approval"
    # the hold is recorded: another process finds the call still waiting
    again = await Agent.resume(
        store, SESSION, model=ScriptedModel([]), tools=[wire_tool(ran, requires_approval=False)]
    )
    assert [c.id for c in again.pending_approvals] == ["c1"] and again.rerun_calls == ()
    assert (await again.prompt()).end.reason == "awaiting_approval" and ran == []
    await again.aclose()


async def test_a_rerun_held_then_approved_runs_once_recorded_as_a_rerun(tmp_path):
    store = await forged(tmp_path)
    ran: list[dict[str, object]] = []
    agent = await Agent.resume(store, SESSION, model=ScriptedModel([]), tools=[wire_tool(ran)])
    assert (await agent.prompt()).end.reason == "awaiting_approval"
    await agent.approve("c1", by="ann")
    await agent.aclose()
    # decided in this process, run in another
    model = ScriptedModel([scripted_response("r2", "paid")])
    again = await Agent.resume(store, SESSION, model=model, tools=[wire_tool(ran)])
    assert again.pending_approvals == () and [c.id for c in again.rerun_calls] == ["c1"]
    result = await again.prompt()
    await again.aclose()
    assert ran == [{"to": "mallory", "amount": 1000}] and result.final_text == "paid"
    records = (await store.load(SESSION)).records
    calls = [(r.call_id, r.rerun) for r in records if r.kind == "tool/call"]
    assert calls == [("c1", False), ("c1", True)]
    assert [r.content for r in results(result.messages, "c1")] == ["wired 1000 to mallory"]


async def test_a_forged_dispatch_that_needs_no_approval_runs_again_as_before(tmp_path):
    store = await forged(tmp_path)
    ran: list[dict[str, object]] = []
    model = ScriptedModel([scripted_response("r2", "paid")])
    agent = await Agent.resume(
        store, SESSION, model=model, tools=[wire_tool(ran, requires_approval=False)]
    )
    result = await agent.prompt()
    await agent.aclose()
    assert ran == [{"to": "mallory", "amount": 1000}] and result.final_text == "paid"


def test_a_rerun_dispatched_again_without_its_approval_is_corrupt():
    """The replay's side: a call held again after its dispatch may be run again only
    once approved."""
    lines = KeptLines()
    ledger = called(Ledger(lines, 0), WIRE, dispatched=WIRE)
    ledger.step_ended("request-001", "tool_call")
    ledger.turn_ended(1, TurnInterrupted(), 5)
    ledger.turn_started(2, 6)
    ledger.approval_requested(WIRE)  # the turn that would run it again holds it
    ledger.turn_ended(2, TurnAwaitingApproval(call_ids=(WIRE.id,)), 8)
    records = [record_decoder.decode(line) for line in lines.lines]
    snapshot = replay_of(records).take_snapshot()  # the hold survives a snapshot
    assert [c.id for c in derive([snapshot]).pending_approvals] == ["c1"]
    ledger.turn_started(3, 9)
    records = [record_decoder.decode(line) for line in lines.lines]
    held = derive(records)
    assert [c.id for c in held.pending_approvals] == ["c1"] and held.reruns == ()
    rerun = ToolCallRecord(seq=len(records), call_id=WIRE.id, rerun=True)  # no decision
    with pytest.raises(LedgerCorruptError, match="held for approval and was not approved"):
        derive([*records, rerun])


async def test_a_rerun_held_then_approved_in_the_same_process_runs_once(tmp_path):
    store = await forged(tmp_path)
    ran: list[dict[str, object]] = []
    model = ScriptedModel([scripted_response("r2", "paid")])
    agent = await Agent.resume(store, SESSION, model=model, tools=[wire_tool(ran)])
    assert (await agent.prompt()).end.reason == "awaiting_approval" and ran == []
    await agent.approve("c1", by="ann")
    result = await agent.prompt()
    await agent.aclose()
    assert ran == [{"to": "mallory", "amount": 1000}] and result.final_text == "paid"
    records = (await store.load(SESSION)).records
    assert [(r.call_id, r.rerun) for r in records if r.kind == "tool/call"] == [
        ("c1", False),
        ("c1", True),
    ]
    derived = derive(records)
    assert derived.reruns == () and derived.pending_approvals == ()


async def test_a_fork_never_runs_a_rerun_held_for_approval_in_its_source(tmp_path):
    """A rerun held again is a dispatched call, as any call owed a rerun: its key is
    the source's, so a fork answers it ``TOOL_OUTCOME_UNKNOWN`` instead of keeping
    it pending (approving it there would have run it again under the source's key)."""
    store = await forged(tmp_path)
    ran: list[dict[str, object]] = []
    agent = await Agent.resume(store, SESSION, model=ScriptedModel([]), tools=[wire_tool(ran)])
    assert (await agent.prompt()).end.reason == "awaiting_approval"
    await agent.aclose()
    fork = await Agent.fork(store, SESSION, at_turn=2, new_session_id="f1")
    forked = await Agent.resume(store, fork, model=ScriptedModel([]), tools=[wire_tool(ran)])
    await forked.aclose()
    assert forked.pending_approvals == () and forked.rerun_calls == ()
    [answer] = results(forked.messages, "c1")
    assert answer.is_error and "TOOL_OUTCOME_UNKNOWN" in answer.content
    assert ran == []


async def test_a_rerun_asked_about_by_an_async_rule_cancelled_anywhere_never_runs_unasked(
    tmp_path,
):
    """What stands: an ``Agent(approval=...)`` that awaits (a policy service) and is
    cancelled at any checkpoint of the turn that asks it about a forged rerun
    leaves the call unrun: held (recorded), or still to be asked about, by the
    next turn of this process and by a resume."""
    from trio_agent.testing import explore_cancellation

    async def ask_service(call: ToolCall) -> bool:
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()
        return True

    prepared: list[tuple[Agent, JsonlStore, list[dict[str, object]]]] = []
    for index in range(12):  # one run to count, then one per checkpoint (8 today)
        store = await forged(tmp_path / str(index))
        ran: list[dict[str, object]] = []
        tools = [wire_tool(ran, requires_approval=False)]
        agent = await Agent.resume(
            store, SESSION, model=ScriptedModel([]), tools=tools, approval=ask_service
        )
        prepared.append((agent, store, ran))
    supply = iter(prepared)

    def scenario():
        agent, store, ran = next(supply)
        return agent.turn(), agent, store, ran

    async def check(events, result, agent: Agent, store: JsonlStore, ran) -> None:
        assert ran == []
        if result.end.reason == "awaiting_approval":
            assert [c.id for c in agent.pending_approvals] == ["c1"]
        else:  # cancelled before the hold: asked again
            assert [c.id for c in agent.rerun_calls] == ["c1"]
            assert (await agent.prompt()).end.reason == "awaiting_approval"
        assert ran == [] and [c.id for c in agent.pending_approvals] == ["c1"]
        await agent.aclose()
        again = await Agent.resume(
            store,
            SESSION,
            model=ScriptedModel([]),
            tools=[wire_tool(ran, requires_approval=False)],
            approval=ask_service,
        )
        assert (await again.prompt()).end.reason == "awaiting_approval" and ran == []
        await again.aclose()

    report = await explore_cancellation(scenario, check)
    assert report.checkpoints < len(prepared)
    for agent, _, _ in supply:
        await agent.aclose()


async def test_a_forged_dispatch_is_held_then_run_once_approved_in_each_store(tmp_path, store):
    """What stands, in each store (JSONL, SQLite, PostgreSQL): the hold is recorded
    (a resume finds the call pending), and once approved the call runs once, as a
    rerun."""
    await forged(tmp_path, store=store)
    ran: list[dict[str, object]] = []
    agent = await Agent.resume(store, SESSION, model=ScriptedModel([]), tools=[wire_tool(ran)])
    assert (await agent.prompt()).end.reason == "awaiting_approval" and ran == []
    await agent.aclose()
    again = await Agent.resume(store, SESSION, model=ScriptedModel([]), tools=[wire_tool(ran)])
    assert [c.id for c in again.pending_approvals] == ["c1"] and again.rerun_calls == ()
    assert (await again.prompt()).end.reason == "awaiting_approval" and ran == []
    await again.approve("c1", by="ann")
    await again.aclose()
    model = ScriptedModel([scripted_response("r2", "paid")])
    third = await Agent.resume(store, SESSION, model=model, tools=[wire_tool(ran)])
    assert [c.id for c in third.rerun_calls] == ["c1"]
    assert (await third.prompt()).final_text == "paid"
    await third.aclose()
    assert ran == [{"to": "mallory", "amount": 1000}]


@pytest.mark.parametrize("ended", [True, False], ids=["turn-ended", "writer-died"])
@pytest.mark.parametrize("requires_approval", [True, False])
async def test_a_call_skipped_before_it_started_is_not_run_again_after_a_resume(
    tmp_path, ended, requires_approval
):
    """The bug: a call whose ``tool/call`` is followed by ``tool/skipped`` (a cancel
    as it was about to start: it never ran) kept its idempotent effect, so a resume
    took it for a call owed a run again: it was held with an ``approval/requested``
    the replay then refused ("outside a step": it is not dispatched), or run again
    with a ``tool/call`` (rerun) it refused too; either way the ledger no longer
    loaded. It is answered as the live session's next turn answers it (code
    ``TOOL_NOT_STARTED``) and never run."""
    lines = KeptLines()
    ledger = called(Ledger(lines, 0), WIRE, dispatched=WIRE)
    ledger.tool_skipped(WIRE)  # cancelled as it was about to start
    if ended:
        ledger.turn_ended(1, TurnInterrupted(), 5)
    store = JsonlStore(tmp_path)
    writer = store.create(SESSION)
    for line in lines.lines:
        writer.append(line)
    await writer.flush(True)
    await writer.aclose()
    ran: list[dict[str, object]] = []
    tools = [wire_tool(ran, requires_approval=requires_approval)]
    model = ScriptedModel([scripted_response("r2", "not paid")])
    agent = await Agent.resume(store, SESSION, model=model, tools=tools)
    assert agent.rerun_calls == () and agent.pending_approvals == ()
    [(answer, code)] = agent.closed_on_resume
    assert answer.tool_call_id == "c1" and code == "TOOL_NOT_STARTED"
    result = await agent.prompt("go on")
    await agent.aclose()
    assert ran == [] and result.final_text == "not paid"
    derived = derive((await store.load(SESSION)).records)  # still loads
    assert derived.reruns == () and derived.pending_approvals == ()


def test_a_snapshot_naming_an_effect_of_a_call_never_dispatched_owes_no_rerun():
    """The same from a snapshot's state (a cache a hand can write): an effect
    named for a call not dispatched owes no run again; the call is one never
    started."""
    import zlib

    import msgspec

    from trio_agent.ledger._snapshot import SnapshotState

    lines = KeptLines()
    ledger = called(Ledger(lines, 0), WIRE)
    ledger.step_ended("request-001", "tool_call")
    ledger.turn_ended(1, TurnInterrupted(), 5)
    snapshot = replay_of(record_decoder.decode(line) for line in lines.lines).take_snapshot()
    state = msgspec.json.decode(snapshot.state, type=SnapshotState)
    encoded = msgspec.json.encode(msgspec.structs.replace(state, effects={"c1": "idempotent"}))
    snapshot = msgspec.structs.replace(
        snapshot, state=msgspec.Raw(encoded), crc32=zlib.crc32(encoded)
    )
    derived = derive([snapshot])
    assert derived.reruns == () and derived.approved_reruns == frozenset()
    [(answer, code)] = derived.closing_results()
    assert answer.tool_call_id == "c1" and code == "TOOL_NOT_STARTED"
