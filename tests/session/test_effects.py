"""Tool effects on resume (DESIGN 12.4): a call whose process died mid-call is run
again with the same idempotency key when its tool is ``idempotent`` or ``pure``,
and answered ``TOOL_OUTCOME_UNKNOWN`` when it is ``once``; the key a call sees.

A crash mid-call is made exactly: the tool itself copies the session's ledger
file while it runs, which is what a kill -9 at that moment leaves on disk (its
``tool/call`` is stored before it is dispatched)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

from trio_agent import (
    Agent,
    JsonlStore,
    ToolCall,
    ToolContext,
    ToolRegistry,
    ToolResultMessage,
    UserMessage,
    run_agent_loop,
    tool,
)
from trio_agent.ledger import TOOL_OUTCOME_UNKNOWN, derive
from trio_agent.testing import ScriptedModel, explore_cancellation, scripted_response

SESSION = "s1"


class Far:
    """The far end of the tools' effects: what each call did, by idempotency key,
    and a copy of the live ledger taken while a chosen call ran (the crash)."""

    def __init__(self, live: JsonlStore, crashed: JsonlStore, crash_in: str) -> None:
        self.live, self.crashed, self.crash_in = live, crashed, crash_in
        self.runs: list[tuple[str, str]] = []  # (tool, idempotency key), each time one ran

    def ran(self, name: str, ctx: ToolContext) -> None:
        self.runs.append((name, ctx.idempotency_key))
        if ctx.call.id == self.crash_in and not self.crashed.directory.exists():
            self.crashed.directory.mkdir()
            shutil.copy(self.live.path(SESSION), self.crashed.path(SESSION))

    def tools(self) -> list:
        @tool(effect="idempotent")
        async def put(key: str, ctx: ToolContext) -> str:
            """Store a value under a key (the same key twice stores it once)."""
            self.ran("put", ctx)
            return f"stored {key}"

        @tool(effect="pure")
        async def read(key: str, ctx: ToolContext) -> str:
            """Read a value."""
            self.ran("read", ctx)
            return f"value of {key}"

        @tool
        async def send(text: str, ctx: ToolContext) -> str:
            """Send a message (twice is two messages)."""
            self.ran("send", ctx)
            return "sent"

        return [put, read, send]


def step(calls: list[ToolCall]) -> list:
    return [scripted_response("r1", calls), scripted_response("r2", "done")]


async def crash_in(tmp_path: Path, calls: list[ToolCall], crash_in: str) -> Far:
    """Run a turn whose calls are ``calls`` (parallel: all dispatched at once), the
    ledger copied while call ``crash_in`` runs; the live session then finishes."""
    live, crashed = JsonlStore(tmp_path / "live"), JsonlStore(tmp_path / "crashed")
    far = Far(live, crashed, crash_in)
    agent = Agent(
        model=ScriptedModel(step(calls)),
        tools=far.tools(),
        store=live,
        session_id=SESSION,
        tool_execution="parallel",
    )
    async with agent:
        await agent.prompt("go")
    return far


def results_for(messages, call_id: str) -> list[ToolResultMessage]:
    return [m for m in messages if type(m) is ToolResultMessage and m.tool_call_id == call_id]


async def test_an_idempotent_call_cut_by_a_crash_runs_again_with_the_same_key(tmp_path):
    calls = [ToolCall("c1", "put", {"key": "k"})]
    far = await crash_in(tmp_path, calls, "c1")
    first_key = far.runs[0][1]
    assert first_key == f"{SESSION}/c1"
    model = ScriptedModel([scripted_response("r3", "stored it")])
    agent = await Agent.resume(far.crashed, SESSION, model=model, tools=far.tools())
    assert agent.closed_on_resume == ()
    assert [call.id for call in agent.rerun_calls] == ["c1"] and agent.awaiting_reply
    result = await agent.prompt()  # no new input: the call runs again, then the model
    await agent.aclose()
    assert far.runs == [("put", first_key), ("put", first_key)]  # the live run, the rerun
    assert result.final_text == "stored it"
    [answer] = results_for(result.messages, "c1")
    assert answer.content == "stored k" and not answer.is_error
    assert model.requests[0].messages[-1] == answer  # the model reads the rerun's result
    records = (await far.crashed.load(SESSION)).records
    calls_recorded = [(r.call_id, r.rerun, r.effect) for r in records if r.kind == "tool/call"]
    assert calls_recorded == [("c1", False, "idempotent"), ("c1", True, "once")]
    derived = derive(records)
    assert derived.reruns == () and derived.closed
    assert results_for(derived.messages, "c1") == [answer]


async def test_a_once_call_cut_by_a_crash_is_never_run_again(tmp_path):
    calls = [ToolCall("c1", "send", {"text": "hello"})]
    far = await crash_in(tmp_path, calls, "c1")
    model = ScriptedModel([scripted_response("r3", "I will check first")])
    agent = await Agent.resume(far.crashed, SESSION, model=model, tools=far.tools())
    assert agent.rerun_calls == ()
    assert [code for _, code in agent.closed_on_resume] == [TOOL_OUTCOME_UNKNOWN]
    await agent.prompt()
    await agent.aclose()
    assert [name for name, _ in far.runs] == ["send"]  # only the live run
    last = model.requests[0].messages[-1]
    assert type(last) is ToolResultMessage and TOOL_OUTCOME_UNKNOWN in last.content


async def test_a_step_with_each_effect_reruns_only_the_repeatable_calls(tmp_path):
    """One parallel step with a once, a pure and an idempotent call, all cut by the
    crash: the once call is answered as unknown, the two others run again, in call
    order, and each call ends with exactly one result."""
    calls = [
        ToolCall("c1", "send", {"text": "x"}),
        ToolCall("c2", "read", {"key": "a"}),
        ToolCall("c3", "put", {"key": "b"}),
    ]
    far = await crash_in(tmp_path, calls, "c3")  # the last to start: all three run
    live_runs = len(far.runs)
    model = ScriptedModel([scripted_response("r3", "ok")])
    agent = await Agent.resume(far.crashed, SESSION, model=model, tools=far.tools())
    assert [c.id for c in agent.rerun_calls] == ["c2", "c3"]
    result = await agent.prompt()
    await agent.aclose()
    assert far.runs[live_runs:] == [("read", f"{SESSION}/c2"), ("put", f"{SESSION}/c3")]
    for call in calls:
        assert len(results_for(result.messages, call.id)) == 1
    assert TOOL_OUTCOME_UNKNOWN in results_for(result.messages, "c1")[0].content


async def test_a_rerun_cut_at_any_checkpoint_is_done_once_or_still_owed(tmp_path):
    """The resumed turn that runs a call again, cancelled after each of its
    checkpoints: the call either has its one result, or the ledger still owes its
    rerun (never 'not started', never a second result), and a resume then ends
    it with exactly one result."""
    far = await crash_in(tmp_path, [ToolCall("c1", "put", {"key": "k"})], "c1")
    source = far.crashed.path(SESSION).read_bytes()
    pool: list[tuple[Agent, JsonlStore]] = []
    for n in range(120):  # resumed ahead: a scenario is a plain function
        store = JsonlStore(tmp_path / f"copy-{n}")
        store.directory.mkdir()
        store.path(SESSION).write_bytes(source)
        model = ScriptedModel([scripted_response("r3", "ok")])
        pool.append((await Agent.resume(store, SESSION, model=model, tools=far.tools()), store))
    used: list[tuple[Agent, JsonlStore]] = []
    outcomes = {"done": 0, "owed": 0}

    def scenario():
        agent, store = pool.pop()
        used.append((agent, store))
        return agent.turn(), store

    async def check(events, result, store):
        agent = used[-1][0]
        if agent.running:
            return
        await agent.aclose()
        derived = derive((await store.load(SESSION)).records)
        answered = results_for(derived.messages, "c1")
        if answered:
            assert answered[0].content == "stored k" and derived.reruns == ()
            outcomes["done"] += 1
        else:
            assert [c.id for c in derived.reruns] == ["c1"]
            outcomes["owed"] += 1
            again = await Agent.resume(
                store,
                SESSION,
                model=ScriptedModel([scripted_response("r4", "ok")]),
                tools=far.tools(),
            )
            assert [c.id for c in again.rerun_calls] == ["c1"]
            await again.prompt()
            await again.aclose()
            final = derive((await store.load(SESSION)).records)
            assert [r.content for r in results_for(final.messages, "c1")] == ["stored k"]

    report = await explore_cancellation(scenario, check)
    for agent, _ in pool:
        await agent.aclose()
    assert report.checkpoints > 5
    assert outcomes["done"] > 0 and outcomes["owed"] > 0, outcomes
    keys = {key for _, key in far.runs}
    assert keys == {f"{SESSION}/c1"}  # every run of the call, live or again, had one key


async def test_a_resume_without_the_tool_of_a_call_to_run_again_is_refused_at_the_turn(
    tmp_path,
):
    far = await crash_in(tmp_path, [ToolCall("c1", "put", {"key": "k"})], "c1")
    agent = await Agent.resume(far.crashed, SESSION, model=ScriptedModel([]))
    with pytest.raises(RuntimeError, match="resumed call 'c1' needs the tool 'put'"):
        await agent.prompt()
    await agent.aclose()
    assert [c.id for c in derive((await far.crashed.load(SESSION)).records).reruns] == ["c1"]


async def test_a_call_to_run_again_is_not_held_for_approval_a_second_time(tmp_path):
    """Its first dispatch was approved (the ledger shows it held and approved): the
    rerun does not ask again, even under an approval policy that holds every call.
    (One the ledger shows no approval for is asked about as a fresh call is:
    test_rerun_approval.)"""
    live, crashed = JsonlStore(tmp_path / "live"), JsonlStore(tmp_path / "crashed")
    far = Far(live, crashed, "c1")

    async def everything(call: ToolCall) -> bool:
        return True

    agent = Agent(
        model=ScriptedModel(step([ToolCall("c1", "put", {"key": "k"})])),
        tools=far.tools(),
        store=live,
        session_id=SESSION,
        approval=everything,
    )
    async with agent:
        assert (await agent.prompt("go")).end.reason == "awaiting_approval"
        await agent.approve("c1", by="ann")
        await agent.prompt()
    agent = await Agent.resume(
        far.crashed,
        SESSION,
        model=ScriptedModel([scripted_response("r3", "ok")]),
        tools=far.tools(),
        approval=everything,
    )
    assert [call.id for call in agent.rerun_calls] == ["c1"]
    result = await agent.prompt()
    await agent.aclose()
    assert agent.pending_approvals == () and result.final_text == "ok"
    assert [name for name, _ in far.runs] == ["put", "put"]


async def test_the_idempotency_key_is_the_session_and_call_ids(tmp_path):
    keys: list[str] = []

    @tool(effect="idempotent")
    async def put(ctx: ToolContext) -> str:
        """Record the key."""
        keys.append(ctx.idempotency_key)
        return "ok"

    def script(prefix: str) -> list:
        return [
            scripted_response(f"{prefix}1", [ToolCall(f"{prefix}-c", "put", {})]),
            scripted_response(f"{prefix}2", "done"),
        ]

    stored = Agent(
        model=ScriptedModel(script("a")), tools=[put], store=JsonlStore(tmp_path), session_id="s9"
    )
    await stored.prompt("go")
    await stored.aclose()
    in_memory = Agent(model=ScriptedModel(script("b") + script("c")), tools=[put])
    await in_memory.prompt("go")
    await in_memory.prompt("again")
    other = Agent(model=ScriptedModel(script("b")), tools=[put])
    await other.prompt("go")
    async with run_agent_loop(
        messages=[UserMessage("u", "go")],
        model=ScriptedModel(script("d")),
        tools=ToolRegistry([put]),
        max_steps=4,
    ) as run:
        async for _ in run:
            pass
    assert keys[0] == "s9/a-c"
    memory_id = keys[1].removesuffix("/b-c")
    assert memory_id.startswith("memory-") and keys[2] == f"{memory_id}/c-c"  # stable
    assert keys[3] != keys[1] and keys[3].endswith("/b-c")  # another agent, another id
    assert keys[4].startswith("run-") and keys[4].endswith("/d-c")


def test_a_tool_declares_its_effect_and_a_bad_one_is_refused():
    @tool
    async def plain() -> str:
        """Plain."""
        return ""

    @tool(effect="pure")
    async def look() -> str:
        """Look."""
        return ""

    assert plain.effect == "once" and look.effect == "pure"
    with pytest.raises(ValueError, match="effect must be 'once', 'idempotent' or 'pure'"):
        tool(effect="twice")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="effect must be"):
        type(plain)(
            name="x",
            description="",
            parameters={"type": "object"},
            execute=plain.execute,
            effect="sometimes",  # type: ignore[arg-type]
        )


async def test_an_effect_is_recorded_with_its_dispatch_and_once_costs_no_bytes(tmp_path):
    far = await crash_in(
        tmp_path,
        [ToolCall("c1", "send", {"text": "x"}), ToolCall("c2", "read", {"key": "a"})],
        "none",
    )
    lines = far.live.path(SESSION).read_bytes().splitlines()
    calls = [line for line in lines if b'"tool/call"' in line]
    assert b"effect" not in calls[0] and b"rerun" not in calls[0]
    assert b'"effect":"pure"' in calls[1]
    await trio.lowlevel.checkpoint()


async def test_a_tool_now_declared_once_is_not_run_again_whatever_was_recorded(tmp_path):
    """The stricter effect wins: a call recorded as idempotent whose tool the resuming
    agent declares ``"once"`` (it turned out not to be idempotent) is answered
    ``TOOL_OUTCOME_UNKNOWN``, never run again."""
    far = await crash_in(tmp_path, [ToolCall("c1", "put", {"key": "k"})], "c1")

    @tool(name="put")
    async def put_once(key: str) -> str:
        """Store a value (not idempotent after all)."""
        far.runs.append(("put-once", key))
        return "stored"

    model = ScriptedModel([scripted_response("r3", "checking")])
    agent = await Agent.resume(far.crashed, SESSION, model=model, tools=[put_once])
    assert agent.rerun_calls == ()
    assert [code for _, code in agent.closed_on_resume] == [TOOL_OUTCOME_UNKNOWN]
    await agent.prompt()
    await agent.aclose()
    assert [name for name, _ in far.runs] == ["put"]  # the live run only


async def test_a_call_run_again_is_not_counted_twice_against_the_tool_call_limits(tmp_path):
    """The rerun of a call cut by a crash went through the usage meter as a new call:
    the session's tool_calls count (read from the ledger on resume) already held its
    first dispatch, so under ``session_usage_limits=UsageLimits(tool_calls=1)`` the
    one call was counted twice, blocked, and answered "this call did not run" (false:
    its first run's outcome is unknown), and the live count disagreed with the one a
    later resume derives. A rerun is the call admitted at its first dispatch."""
    from trio_agent import UsageLimits

    far = await crash_in(tmp_path, [ToolCall("c1", "put", {"key": "k"})], "c1")
    limits = UsageLimits(tool_calls=1)
    model = ScriptedModel([scripted_response("r3", "stored it")])
    agent = await Agent.resume(
        far.crashed, SESSION, model=model, tools=far.tools(), session_usage_limits=limits
    )
    result = await agent.prompt()
    await agent.aclose()
    assert result.end.reason == "completed" and result.final_text == "stored it"
    [answer] = results_for(result.messages, "c1")
    assert answer.content == "stored k" and not answer.is_error
    assert far.runs == [("put", f"{SESSION}/c1")] * 2  # the live run, the rerun
    assert derive((await far.crashed.load(SESSION)).records).tool_calls == 1


async def test_an_approved_call_run_again_after_a_crash_keeps_the_approvers_arguments(tmp_path):
    """A held call approved with edited arguments ran with them, and its process died
    mid-call; the resume ran it again with the model's own arguments, which nobody
    approved (``deploy(env="prod")`` where the person had said ``"staging"``), under
    the same idempotency key. A call run again runs as it was dispatched: with the
    approver's arguments."""
    live, crashed = JsonlStore(tmp_path / "live"), JsonlStore(tmp_path / "crashed")
    ran: list[tuple[str, str]] = []

    @tool(effect="idempotent", requires_approval=True)
    async def deploy(env: str, ctx: ToolContext) -> str:
        """Deploy to an environment (the same key twice deploys once)."""
        ran.append((env, ctx.idempotency_key))
        if not crashed.directory.exists():  # what a kill -9 now leaves on disk
            crashed.directory.mkdir()
            shutil.copy(live.path(SESSION), crashed.path(SESSION))
        return f"deployed {env}"

    script = [
        scripted_response("r1", [ToolCall("c1", "deploy", {"env": "prod"})]),
        scripted_response("r2", "done"),
    ]
    agent = Agent(model=ScriptedModel(script), tools=[deploy], store=live, session_id=SESSION)
    async with agent:
        assert (await agent.prompt("deploy")).end.reason == "awaiting_approval"
        await agent.approve("c1", arguments={"env": "staging"}, by="ann")
        await agent.prompt()
    model = ScriptedModel([scripted_response("r3", "deployed again")])
    resumed = await Agent.resume(crashed, SESSION, model=model, tools=[deploy])
    assert [call.arguments for call in resumed.rerun_calls] == [{"env": "staging"}]
    result = await resumed.prompt()
    await resumed.aclose()
    assert ran == [("staging", f"{SESSION}/c1")] * 2  # never "prod"
    [answer] = results_for(result.messages, "c1")
    assert answer.content == "deployed staging"
