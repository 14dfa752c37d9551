"""Human approval of tool calls (issue 19, DESIGN 11.5) with the scripted model: a
step holds the calls that need a yes, runs the others, ends the turn awaiting
approval; decisions are single use; the next turn runs or answers the held
calls before anything else, at most once."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from trio_agent import (
    Agent,
    Tool,
    ToolCall,
    ToolRegistry,
    ToolResultMessage,
    UserMessage,
    tool,
    validate_transcript,
)
from trio_agent.testing import (
    ScriptedModel,
    assert_run_invariants,
    explore_cancellation,
    scripted_response,
)


class Desk:
    """Tools that write down what ran, and how often."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

        @tool(requires_approval=True)
        async def write(path: str, text: str = "") -> str:
            """Write a file."""
            self.ran.append(("write", {"path": path, "text": text}))
            return f"wrote {path}"

        @tool
        async def read(path: str) -> str:
            """Read a file."""
            self.ran.append(("read", {"path": path}))
            return f"content of {path}"

        self.tools = ToolRegistry([write, read])


def step(rid: str, *calls: tuple[str, str, dict[str, Any]]) -> Any:
    return scripted_response(rid, [ToolCall(cid, name, args) for cid, name, args in calls])


def three_calls() -> list[Any]:
    return [
        step(
            "r1",
            ("c1", "read", {"path": "a"}),
            ("c2", "write", {"path": "b"}),
            ("c3", "write", {"path": "c"}),
        ),
        scripted_response("r2", "done"),
    ]


async def record(run: Any) -> tuple[list[Any], Any]:
    events: list[Any] = []
    async with run:
        async for event in run:
            events.append(event)
    assert_run_invariants(events, run.result)
    return events, run.result


def types(events: list[Any]) -> list[str]:
    return [event.type for event in events]


async def test_a_step_holds_the_calls_that_need_a_yes_and_runs_the_others():
    desk = Desk()
    model = ScriptedModel(three_calls())
    agent = Agent(model=model, tools=desk.tools)
    events, result = await record(agent.turn("go"))
    assert result.end.reason == "awaiting_approval"
    assert result.end.call_ids == ("c2", "c3")
    assert [call.id for call in agent.pending_approvals] == ["c2", "c3"]
    assert agent.pending_approvals[0].arguments == {"path": "b"}
    assert desk.ran == [("read", {"path": "a"})]  # only the call that needs no yes
    assert types(events).count("approval.requested") == 2
    assert len(model.requests) == 1  # no request while a held call is undecided
    assert agent.awaiting_reply


async def test_approve_and_reject_then_the_next_turn_runs_and_answers_them_in_call_order():
    desk = Desk()
    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools)
    await record(agent.turn("go"))
    await agent.approve("c2", by="ann")
    await agent.reject("c3", "not that file", by="ann")
    events, result = await record(agent.turn())
    assert result.end.reason == "completed" and result.final_text == "done"
    assert desk.ran == [("read", {"path": "a"}), ("write", {"path": "b", "text": ""})]
    decided = [e for e in events if e.type == "approval.decided"]
    assert [(e.call.id, e.approved, e.by) for e in decided] == [
        ("c2", True, "ann"),
        ("c3", False, "ann"),
    ]
    results = [m for m in agent.messages if type(m) is ToolResultMessage]
    assert [r.tool_call_id for r in results] == ["c1", "c2", "c3"]
    assert results[2].is_error and "rejected by ann: not that file" in results[2].content
    assert agent.pending_approvals == ()
    validate_transcript(agent.messages)


async def test_an_approval_with_edited_arguments_runs_with_them():
    desk = Desk()
    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools)
    await record(agent.turn("go"))
    await agent.approve("c2", arguments={"path": "b", "text": "edited"})
    await agent.reject("c3")
    await agent.prompt()
    assert ("write", {"path": "b", "text": "edited"}) in desk.ran
    rejected = [m for m in agent.messages if type(m) is ToolResultMessage][2]
    assert "no reason given" in rejected.content


@pytest.mark.parametrize(
    ("arguments", "error"),
    [({"path": "x" * 5000}, ValueError), ("not a dict", ValueError)],
)
async def test_edited_arguments_are_checked_like_a_models(arguments, error):
    desk = Desk()
    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools)
    await record(agent.turn("go"))
    with pytest.raises(error, match="arguments"):
        await agent.approve("c2", arguments=arguments)
    assert [c.id for c in agent.pending_approvals] == ["c2", "c3"]  # nothing was decided
    await agent.approve("c2")  # still decidable


async def test_deciding_twice_or_an_unknown_call_raises_and_records_nothing():
    desk = Desk()
    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools)
    await record(agent.turn("go"))
    await agent.approve("c2")
    with pytest.raises(ValueError, match="already decided"):
        await agent.approve("c2")
    with pytest.raises(ValueError, match="already decided"):
        await agent.reject("c2")
    for unknown in ("c1", "nope"):  # c1 needed no approval: it is not held
        with pytest.raises(ValueError, match="waiting for approval"):
            await agent.approve(unknown)
        with pytest.raises(ValueError, match="waiting for approval"):
            await agent.reject(unknown, "no")
    assert [c.id for c in agent.pending_approvals] == ["c3"]
    assert [c.id for c in agent.decided_approvals] == ["c2"]
    with pytest.raises(TypeError):
        await agent.approve(3)  # type: ignore[arg-type]


async def test_a_decision_is_single_use_the_call_never_runs_twice():
    desk = Desk()
    script = [*three_calls(), scripted_response("r3", "again")]
    agent = Agent(model=ScriptedModel(script), tools=desk.tools)
    await record(agent.turn("go"))
    await agent.approve("c2")
    await agent.approve("c3")
    await agent.prompt()
    await agent.prompt("once more")
    writes = [entry for entry in desk.ran if entry[0] == "write"]
    assert len(writes) == 2
    with pytest.raises(ValueError):
        await agent.approve("c2")  # answered: not held any more


async def test_new_input_while_undecided_waits_in_the_inbox_until_the_calls_are_answered():
    desk = Desk()
    model = ScriptedModel(three_calls())
    agent = Agent(model=model, tools=desk.tools)
    await record(agent.turn("go"))
    events, result = await record(agent.turn("and also this"))
    assert result.end.reason == "awaiting_approval" and result.steps == 0
    assert types(events) == ["turn.started", "turn.finished"]
    await agent.approve("c2")
    await agent.reject("c3")
    events, result = await record(agent.turn())
    # the held calls are answered first, then the waiting input goes in
    order = [e.type for e in events if e.type in ("tool.finished", "message.accepted")]
    assert order == ["tool.finished", "tool.finished", "message.accepted"]
    last_user = [m for m in agent.messages if type(m) is UserMessage][-1]
    assert last_user.content == "and also this"
    assert len(model.requests) == 2


async def test_deciding_while_a_turn_runs_is_refused():
    desk = Desk()
    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools)
    await record(agent.turn("go"))
    refused = 0
    async with agent.turn("x") as run:
        async for event in run:
            if event.type == "turn.started":  # the turn runs (it ends at once: undecided)
                with pytest.raises(RuntimeError, match="between turns"):
                    await agent.approve("c2")
                refused += 1
    assert refused == 1
    await agent.approve("c2")  # between turns it is taken


async def test_an_approval_policy_decides_per_call_which_need_a_yes():
    desk = Desk()
    asked: list[str] = []

    async def outside_scratch(call: ToolCall) -> bool:
        asked.append(call.id)
        return not str(call.arguments.get("path", "")).startswith("scratch/")

    @tool
    async def delete(path: str) -> str:
        """Delete a file."""
        desk.ran.append(("delete", {"path": path}))
        return "deleted"

    desk.tools.register(delete)
    script = [
        step(
            "r1",
            ("c1", "delete", {"path": "scratch/tmp"}),
            ("c2", "delete", {"path": "src/main.py"}),
        ),
        scripted_response("r2", "ok"),
    ]
    agent = Agent(model=ScriptedModel(script), tools=desk.tools, approval=outside_scratch)
    _, result = await record(agent.turn("clean up"))
    assert asked == ["c1", "c2"]
    assert result.end.call_ids == ("c2",)
    assert desk.ran == [("delete", {"path": "scratch/tmp"})]


@pytest.mark.parametrize("execution", ["sequential", "parallel"])
async def test_held_calls_never_block_the_others_in_a_batch(execution):
    desk = Desk()
    script = [
        step(
            "r1",
            ("c1", "write", {"path": "b"}),
            ("c2", "read", {"path": "a"}),
            ("c3", "read", {"path": "z"}),
        ),
        scripted_response("r2", "done"),
    ]
    agent = Agent(model=ScriptedModel(script), tools=desk.tools, tool_execution=execution)
    _, result = await record(agent.turn("go"))
    assert result.end.call_ids == ("c1",)
    assert sorted(p["path"] for _, p in desk.ran) == ["a", "z"]
    await agent.approve("c1")
    await agent.prompt()
    results = [m.tool_call_id for m in agent.messages if type(m) is ToolResultMessage]
    assert results == ["c1", "c2", "c3"]  # call order in the transcript
    validate_transcript(agent.messages)


async def test_approve_then_cancel_the_next_turn_before_it_runs_the_call():
    desk = Desk()
    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools)
    await record(agent.turn("go"))
    await agent.approve("c2")
    await agent.approve("c3")
    scope = trio.CancelScope()
    scope.cancel()
    result = await agent.prompt(cancel_scope=scope)
    assert result.end.reason == "cancelled"
    # nothing ran twice, and the session goes on with a valid transcript
    await agent.prompt("go on")
    assert len([e for e in desk.ran if e[0] == "write"]) <= 2
    validate_transcript(agent.messages)


def paused_scenario() -> tuple[Any, Desk]:
    desk = Desk()
    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools)
    return agent.turn("go"), desk


async def test_cancelled_at_every_checkpoint_of_a_turn_that_pauses(autojump_clock):
    def check(events: Any, result: Any, desk: Desk) -> None:
        assert_run_invariants(events, result)
        assert all(name == "read" for name, _ in desk.ran)  # no held call ran

    report = await explore_cancellation(paused_scenario, check)
    assert report.outcomes[-1] == "awaiting_approval"


async def test_cancelled_at_every_checkpoint_of_a_turn_that_resumes_approvals(autojump_clock):
    prepared: list[tuple[Agent, Desk]] = []
    for _ in range(200):
        desk = Desk()
        agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools)
        await agent.prompt("go")
        await agent.approve("c2")
        await agent.reject("c3", "no")
        prepared.append((agent, desk))
    supply = iter(prepared)

    def scenario() -> tuple[Any, Agent, Desk]:
        agent, desk = next(supply)
        return agent.turn(), agent, desk

    def check(events: Any, result: Any, agent: Agent, desk: Desk) -> None:
        assert_run_invariants(events, result)
        writes = [entry for entry in desk.ran if entry[0] == "write"]
        assert len(writes) <= 1  # the approved call ran at most once, c3 never
        assert all(entry[1]["path"] == "b" for entry in writes)
        if result.end.reason == "completed":
            assert writes and agent.pending_approvals == ()
            validate_transcript(agent.messages)

    report = await explore_cancellation(scenario, check)
    assert report.checkpoints > 5 and report.outcomes[-1] == "completed"


async def test_changing_what_pending_approvals_shows_changes_nothing_that_runs():
    desk = Desk()
    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools)
    await record(agent.turn("go"))
    shown = agent.pending_approvals[0]
    shown.arguments["path"] = "/etc/passwd"  # a client tampering with what it was shown
    await agent.approve("c2")
    await agent.reject("c3")
    await agent.prompt()
    assert ("write", {"path": "b", "text": ""}) in desk.ran
    assert all(args.get("path") != "/etc/passwd" for _, args in desk.ran)
    calls = [b for m in agent.messages if hasattr(m, "content") for b in getattr(m, "content", ())]
    assert all(getattr(b, "arguments", {}).get("path") != "/etc/passwd" for b in calls)


async def test_an_approval_policy_that_changes_the_call_changes_nothing():
    desk = Desk()

    async def meddling(call: ToolCall) -> bool:
        call.arguments["path"] = "elsewhere"
        return True

    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools, approval=meddling)
    events, _ = await record(agent.turn("go"))  # the invariants: the transcript is as streamed
    assert [c.arguments["path"] for c in agent.pending_approvals] == ["a", "b", "c"]


@pytest.mark.parametrize("answer", [1, "yes", None])
async def test_an_approval_policy_that_returns_no_bool_fails_the_turn_and_runs_nothing(answer):
    desk = Desk()

    async def sloppy(call: ToolCall) -> Any:
        return answer

    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools, approval=sloppy)
    _, result = await record(agent.turn("go"))
    assert result.end.reason == "failed" and result.end.code == "HOOK_ERROR"
    assert "must return a bool" in result.end.detail
    assert desk.ran == []


async def test_edited_arguments_the_tool_refuses_are_refused_and_the_decision_kept_open():
    desk = Desk()
    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools)
    await record(agent.turn("go"))
    with pytest.raises(ValueError, match=r"Expected `str`, got `int` - at `\$.path`"):
        await agent.approve("c2", arguments={"path": 5})
    with pytest.raises(ValueError, match="unknown field `bogus`"):
        await agent.approve("c2", arguments={"path": "b", "bogus": True})
    await agent.approve("c2", arguments={"path": "b2"})  # still open, and taken now


async def test_a_held_call_beside_a_final_answer_ends_the_turn_awaiting_approval():
    import msgspec

    from trio_agent import OUTPUT_TOOL_NAME

    class Out(msgspec.Struct):
        answer: int

    desk = Desk()
    script = [
        step("r1", ("c1", "write", {"path": "b"}), ("o1", OUTPUT_TOOL_NAME, {"answer": 3})),
        step("r2", ("o2", OUTPUT_TOOL_NAME, {"answer": 4})),
    ]
    agent = Agent(model=ScriptedModel(script), tools=desk.tools, output_type=Out)
    _, result = await record(agent.turn("go"))
    assert result.end.reason == "awaiting_approval" and result.output is None
    refused = [m for m in result.messages if type(m) is ToolResultMessage]
    assert refused[0].is_error and "wait for a person's approval" in refused[0].content
    await agent.approve("c1")
    result = await agent.prompt()
    assert result.output == Out(4) and desk.ran == [("write", {"path": "b", "text": ""})]
    validate_transcript(agent.messages)


async def test_each_decision_is_announced_once_even_across_a_cancelled_resolving_turn(
    autojump_clock,
):
    announced: list[str] = []
    for cut in range(1, 12):
        desk = Desk()
        agent = Agent(model=ScriptedModel([*three_calls(), *three_calls()]), tools=desk.tools)
        await agent.prompt("go")
        await agent.approve("c2")
        await agent.reject("c3")
        seen: list[str] = []
        count = 0
        async with agent.turn() as run:
            async for event in run:
                count += 1
                if event.type == "approval.decided":
                    seen.append(event.call.id)
                if count == cut:
                    run.cancel()
        async with agent.turn() as run:
            async for event in run:
                if event.type == "approval.decided":
                    seen.append(event.call.id)
        assert len(seen) == len(set(seen)), (cut, seen)
        announced += seen
    assert announced  # decisions were announced at all


async def test_an_after_tool_call_hook_may_turn_a_rejection_into_any_result_and_the_ledger_replays(
    tmp_path,
):
    import msgspec

    from trio_agent import JsonlStore

    async def soften(call: ToolCall, result: ToolResultMessage) -> ToolResultMessage:
        return msgspec.structs.replace(result, is_error=False)

    desk = Desk()
    store = JsonlStore(tmp_path)
    agent = Agent(
        model=ScriptedModel(three_calls()),
        tools=desk.tools,
        store=store,
        session_id="s",
        after_tool_call=soften,
    )
    await agent.prompt("go")
    await agent.reject("c2")
    await agent.reject("c3")
    await agent.prompt()
    await agent.aclose()
    again = await Agent.resume(store, "s", model=ScriptedModel([]), tools=desk.tools)
    assert again.messages == agent.messages
    await again.aclose()


@pytest.mark.parametrize("execution", ["sequential", "parallel"])
async def test_the_bare_loop_refuses_a_call_that_needs_approval_it_has_no_one_to_ask(execution):
    """Issue 32: ``run_agent_loop`` with a tool that needs a person's approval
    (``Workspace(network="ask")`` asked with ``network: true``) ran the call:
    there is no one to ask, so it is refused with an error result (fail
    closed) and the others in the batch run."""
    from trio_agent import run_agent_loop

    desk = Desk()
    script = [
        step("r1", ("c1", "read", {"path": "a"}), ("c2", "write", {"path": "b"})),
        scripted_response("r2", "done"),
    ]
    run = run_agent_loop(
        messages=[UserMessage(content="go", id="u1")],
        model=ScriptedModel(script),
        tools=desk.tools,
        max_steps=4,
        tool_execution=execution,
    )
    result = await run.wait()
    assert desk.ran == [("read", {"path": "a"})]  # the write never ran
    answers = {m.tool_call_id: m for m in result.messages if isinstance(m, ToolResultMessage)}
    assert answers["c2"].is_error and "no one to ask" in str(answers["c2"].content)
    assert not answers["c1"].is_error
    validate_transcript(result.messages)


async def test_the_bare_loop_runs_a_call_whose_approval_rule_says_no_and_refuses_one_that_fails():
    """Issue 32: a rule of the arguments decides per call in the bare loop
    too; a rule that raises is a refusal, never a run."""
    from trio_agent import run_agent_loop

    ran: list[str] = []

    def rule(arguments: dict[str, Any]) -> bool:
        if arguments.get("boom"):
            raise RuntimeError("rule broke")
        return bool(arguments.get("network"))

    @tool(requires_approval=rule)
    async def fetch(url: str, network: bool = False, boom: bool = False) -> str:
        """Fetch."""
        ran.append(url)
        return "ok"

    script = [
        step(
            "r1",
            ("c1", "fetch", {"url": "local"}),
            ("c2", "fetch", {"url": "remote", "network": True}),
            ("c3", "fetch", {"url": "broken", "boom": True}),
        ),
        scripted_response("r2", "done"),
    ]
    run = run_agent_loop(
        messages=[UserMessage(content="go", id="u1")],
        model=ScriptedModel(script),
        tools=ToolRegistry([fetch]),
        max_steps=4,
    )
    result = await run.wait()
    assert ran == ["local"]
    answers = {m.tool_call_id: m for m in result.messages if isinstance(m, ToolResultMessage)}
    assert "rule broke" in str(answers["c3"].content) and answers["c3"].is_error
    assert answers["c2"].is_error and not answers["c1"].is_error


async def test_the_bare_loop_runs_no_command_asking_for_the_network_of_a_workspace_that_asks(
    tmp_path,
):
    """Issue 32: ``run_agent_loop`` with ``Workspace(network="ask")`` ran a
    command asking for the network: nobody could say yes, so it is refused;
    the same command without the network runs."""
    from trio_agent import run_agent_loop
    from trio_agent.workspace import Workspace

    root = tmp_path / "ws"
    root.mkdir()
    workspace = Workspace(root, sandbox="bwrap", network="ask")
    script = [
        step(
            "r1",
            ("off", "run", {"command": "echo offline > off.txt"}),
            ("on", "run", {"command": "echo online > on.txt", "network": True}),
        ),
        scripted_response("r2", "done"),
    ]
    run = run_agent_loop(
        messages=[UserMessage(content="go", id="u1")],
        model=ScriptedModel(script),
        tools=workspace.tools(),
        max_steps=4,
    )
    result = await run.wait()
    answers = {m.tool_call_id: m for m in result.messages if isinstance(m, ToolResultMessage)}
    assert answers["on"].is_error and "approval" in str(answers["on"].content)
    assert (root / "off.txt").read_text() == "offline\n"
    assert not (root / "on.txt").exists()


async def test_pending_approvals_lists_only_undecided_calls_and_decided_approvals_the_rest(
    tmp_path,
):
    """Issue 35: ``pending_approvals`` listed decided calls too, so the natural loop
    ``for c in agent.pending_approvals: await agent.approve(c.id)`` raised "already
    decided" after a decision made elsewhere (``trio-agent approve``, another process).
    Pending calls are the undecided ones; ``decided_approvals`` holds the decided ones
    until the next turn answers them."""
    from trio_agent import JsonlStore

    desk = Desk()
    store = JsonlStore(tmp_path)
    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools, store=store, session_id="s")
    await agent.prompt("go")
    assert [c.id for c in agent.pending_approvals] == ["c2", "c3"]
    assert agent.decided_approvals == ()
    await agent.reject("c2", "not now")  # decided in this process, by another person
    assert [c.id for c in agent.pending_approvals] == ["c3"]
    assert [c.id for c in agent.decided_approvals] == ["c2"]
    await agent.aclose()
    again = await Agent.resume(store, "s", model=ScriptedModel([]), tools=desk.tools)
    assert [c.id for c in again.pending_approvals] == ["c3"]
    assert [c.id for c in again.decided_approvals] == ["c2"]
    for held in again.pending_approvals:  # the natural loop: no "already decided"
        await again.approve(held.id)
    assert again.pending_approvals == () and [c.id for c in again.decided_approvals] == [
        "c2",
        "c3",
    ]
    await again.aclose()
    last = await Agent.resume(
        store, "s", model=ScriptedModel([scripted_response("r2", "ok")]), tools=desk.tools
    )
    result = await last.prompt()
    await last.aclose()
    assert result.end.reason == "completed"
    assert last.pending_approvals == () and last.decided_approvals == ()
    assert desk.ran[-1] == ("write", {"path": "c", "text": ""})


async def test_regression_sessions_that_never_asked_share_one_empty_map_and_nothing_else():
    """The maps of a session that holds nothing are one shared, read-only empty map
    (192 bytes a session less); holding, deciding and answering in one session
    never shows in another, before, during or after its turn."""
    first_desk, second_desk = Desk(), Desk()
    first = Agent(model=ScriptedModel(three_calls()), tools=first_desk.tools)
    second = Agent(model=ScriptedModel(three_calls()), tools=second_desk.tools)
    idle = Agent(model=ScriptedModel([]))
    await first.prompt("go")
    assert [call.id for call in first.pending_approvals] == ["c2", "c3"]
    assert second.pending_approvals == () and idle.pending_approvals == ()
    await first.approve("c2")
    await second.prompt("go")
    await second.reject("c3", reason="no")
    assert [call.id for call in first.decided_approvals] == ["c2"]
    assert [call.id for call in second.decided_approvals] == ["c3"]
    assert idle.pending_approvals == idle.decided_approvals == ()
    await first.reject("c3")
    await first.prompt()  # answers both: nothing is held or decided any more
    assert first.pending_approvals == first.decided_approvals == ()
    assert [call.id for call in second.pending_approvals] == ["c2"]
    assert [name for name, _ in first_desk.ran] == ["read", "write"]
    assert [name for name, _ in second_desk.ran] == ["read"]


async def test_deciding_on_a_closed_session_is_refused_and_the_call_stays_pending(tmp_path):
    """``approve``/``reject`` on an agent whose session ``aclose()`` closed returned as
    if the decision counted: with no ledger open it was kept in memory only, the
    agent listed the call as decided, and the session (resumed anywhere) still had
    it undecided. The decision was lost in silence. It is now a ``RuntimeError``
    that says to resume the session, and nothing changes."""
    from trio_agent import JsonlStore
    from trio_agent.ledger import derive

    desk = Desk()
    store = JsonlStore(tmp_path)
    agent = Agent(model=ScriptedModel(three_calls()), tools=desk.tools, store=store, session_id="s")
    await agent.prompt("go")
    await agent.aclose()
    with pytest.raises(RuntimeError, match=r"closed; resume it with Agent\.resume"):
        await agent.approve("c2", by="ann")
    with pytest.raises(RuntimeError, match=r"closed; resume it with Agent\.resume"):
        await agent.reject("c3", "no", by="ann")
    assert [c.id for c in agent.pending_approvals] == ["c2", "c3"]
    assert agent.decided_approvals == ()
    derived = derive((await store.load("s")).records)
    assert [c.id for c in derived.pending_approvals] == ["c2", "c3"] and derived.decisions == {}
    again = await Agent.resume(store, "s", model=ScriptedModel([]), tools=desk.tools)
    await again.approve("c2", by="ann")  # where the decision is recorded
    await again.aclose()
    assert list(derive((await store.load("s")).records).decisions) == ["c2"]


def test_deciding_from_asyncio_says_so_at_once_and_decides_nothing(tmp_path):
    """``asyncio.run(agent.approve(...))`` on a session with a store wrote the decision
    and kept it, then failed deep inside the ledger's flush with "must be called from
    async context": the caller saw an error, yet the call ran at the next turn. Deciding
    from asyncio now says the library runs on trio, before anything is decided."""
    import asyncio

    from trio_agent import JsonlStore
    from trio_agent.ledger import derive

    desk = Desk()
    store = JsonlStore(tmp_path)
    model = ScriptedModel([*three_calls(), scripted_response("r3", "after")])
    agent = Agent(model=model, tools=desk.tools, store=store, session_id="s")
    trio.run(agent.prompt, "go")
    for decide in (lambda: agent.approve("c2"), lambda: agent.reject("c3", "no")):
        with pytest.raises(RuntimeError, match=r"^trio-agent runs on trio; call it from trio\.run"):
            asyncio.run(decide())
    assert [c.id for c in agent.pending_approvals] == ["c2", "c3"]

    async def later() -> Any:
        recorded = derive((await store.load("s")).records)
        result = await agent.prompt()  # nothing decided: still waiting
        await agent.aclose()
        return recorded, result

    recorded, result = trio.run(later)
    assert recorded.decisions == {} and result.end.reason == "awaiting_approval"
    assert [name for name, _ in desk.ran] == ["read"]


def test_regression_an_async_requires_approval_rule_is_refused_when_the_tool_is_made():
    """``Agent(approval=)`` may be async, so ``@tool(requires_approval=)`` was
    written async too: its call gave a coroutine, not a bool, and the first call
    of the tool failed the turn with HOOK_ERROR and a "never awaited" warning.
    The tool is refused when made, pointing to ``Agent(approval=...)``."""

    async def large(arguments: dict[str, Any]) -> bool:
        return bool(arguments["amount"] > 100)

    async def refund(order: str, amount: int) -> str:
        """Refund part of an order."""
        return order

    said = r"plain function \(def\).*async function '.*large'.*Agent\(approval=\.\.\.\)"
    with pytest.raises(TypeError, match=said):
        tool(requires_approval=large)(refund)
    with pytest.raises(TypeError, match=said):
        Tool("refund", "", {"type": "object"}, refund, requires_approval=large)
