"""Dependencies of a turn (issue 35, DESIGN 12.3): ``prompt(..., deps=x)``,
``turn(..., deps=x)`` and ``run_agent_loop(..., deps=x)`` hand ``x`` to every tool
that takes a ``ToolContext`` (``ctx.deps``), however it runs (in the step's task,
as a task of a parallel batch, in a worker thread, an approved call at a later
turn, the inner turn of an agent tool) and to the tool-call hooks that ask for the
context; ``x`` is never written to the ledger."""

from __future__ import annotations

import threading
from typing import Any

import attrs
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
from trio_agent.session import block
from trio_agent.testing import ScriptedModel, scripted_response

SECRET = "deps-secret-4f1c9a"


@attrs.frozen
class Deps:
    """What an application gives its tools: a name and a secret."""

    user: str
    token: str = SECRET


def calls(*names: str, rid: str = "r1") -> Any:
    return scripted_response(rid, [ToolCall(f"{rid}-{n}", n, {}) for n in names])


def answer(rid: str = "r9") -> Any:
    return scripted_response(rid, "done")


class Seen:
    """Tools that write down the deps they saw, and where they ran."""

    def __init__(self) -> None:
        self.deps: dict[str, Any] = {}
        self.threads: dict[str, bool] = {}

        @tool
        async def fetch(ctx: ToolContext[Deps]) -> str:
            """Fetch for the user."""
            self.deps["fetch"] = ctx.deps
            return f"fetched for {ctx.deps.user}"

        @tool
        def lookup(ctx: ToolContext[Deps]) -> str:
            """Look up for the user (a plain def: it runs in a worker thread)."""
            self.deps["lookup"] = ctx.deps
            self.threads["lookup"] = threading.current_thread() is not threading.main_thread()
            return "looked up"

        @tool
        async def untyped(ctx: ToolContext) -> str:
            """A tool whose context is not parametrised."""
            self.deps["untyped"] = ctx.deps
            return "ok"

        self.tools = ToolRegistry([fetch, lookup, untyped])


@pytest.mark.parametrize("execution", ["sequential", "parallel"])
async def test_every_tool_that_takes_a_context_reads_the_turns_deps(execution):
    """Issue 35: tools had no way to get the application's dependencies but closures
    or globals; now the object given to ``prompt(deps=)`` is the ``ctx.deps`` of each
    tool, async or plain def (in a thread), sequential or parallel."""
    seen = Seen()
    deps = Deps("ann")
    agent = Agent(
        model=ScriptedModel([calls("fetch", "lookup", "untyped"), answer()]),
        tools=seen.tools,
        tool_execution=execution,
    )
    result = await agent.prompt("go", deps=deps)
    assert result.end.reason == "completed"
    assert seen.deps == {"fetch": deps, "lookup": deps, "untyped": deps}
    assert all(value is deps for value in seen.deps.values())  # the object itself
    assert seen.threads == {"lookup": True}
    assert "fetched for ann" in [m.content for m in result.messages]


async def test_a_turn_without_deps_gives_its_tools_none_and_each_turn_its_own():
    """Deps belong to one turn: a turn given none gives its tools None, the next turn
    given others gives those."""
    seen = Seen()
    script = [calls("untyped"), answer("r2"), calls("untyped", rid="r3"), answer("r4")]
    agent = Agent(model=ScriptedModel(script), tools=seen.tools)
    await agent.prompt("first")
    assert seen.deps == {"untyped": None}
    other = Deps("bob")
    async with agent.turn("second", deps=other) as run:
        async for _ in run:
            pass
    assert seen.deps["untyped"] is other


async def test_run_agent_loop_gives_its_deps_to_its_tools():
    """``run_agent_loop(deps=)``: the core loop hands them on as the session does."""
    seen = Seen()
    deps = Deps("carl")
    run = run_agent_loop(
        messages=[UserMessage("u1", "go")],
        model=ScriptedModel([calls("fetch", "lookup"), answer()]),
        tools=seen.tools,
        max_steps=2,
        deps=deps,
    )
    result = await run.wait()
    assert result.status == "completed"
    assert seen.deps["fetch"] is deps and seen.deps["lookup"] is deps


async def test_tool_call_hooks_that_take_one_argument_more_get_the_calls_context():
    """DESIGN 12.3: ``before_tool_call(call, ctx)`` and ``after_tool_call(call, result,
    ctx)`` (told apart by their signature) get the call's ``ToolContext`` with the
    turn's deps; hooks of the old shape keep working beside them."""
    seen = Seen()
    deps = Deps("dora", token="t")
    hooked: list[tuple[str, str, Any]] = []

    async def before(call: ToolCall, ctx: ToolContext[Deps]) -> Any:
        hooked.append(("before", call.name, ctx.deps))
        assert ctx.call == call
        return block("not for dora") if call.name == "lookup" else None

    async def after(
        call: ToolCall, result: ToolResultMessage, ctx: ToolContext[Deps]
    ) -> ToolResultMessage:
        hooked.append(("after", call.name, ctx.deps))
        return result

    agent = Agent(
        model=ScriptedModel([calls("fetch", "lookup"), answer()]),
        tools=seen.tools,
        before_tool_call=before,
        after_tool_call=after,
    )
    result = await agent.prompt("go", deps=deps)
    assert hooked[:3] == [
        ("before", "fetch", deps),
        ("after", "fetch", deps),
        ("before", "lookup", deps),
    ]
    assert "lookup" not in seen.deps  # blocked by the hook that read the deps
    assert result.messages[3].is_error

    plain: list[str] = []

    async def old_before(call: ToolCall) -> None:
        plain.append(call.name)

    async def old_after(call: ToolCall, result: ToolResultMessage) -> ToolResultMessage:
        plain.append(f"after {call.name}")
        return result

    agent = Agent(
        model=ScriptedModel([calls("fetch"), answer()]),
        tools=seen.tools,
        before_tool_call=old_before,
        after_tool_call=old_after,
    )
    await agent.prompt("go", deps=deps)
    assert plain == ["fetch", "after fetch"]


def test_a_tool_call_hook_that_can_take_neither_shape_is_refused_when_the_agent_is_made():
    """A hook of the wrong shape failed only at the first call, as HOOK_ERROR; it is
    refused at once, naming both shapes."""

    async def none() -> None: ...

    async def three(call: ToolCall, ctx: Any, extra: Any) -> None: ...

    for hook in (none, three):
        with pytest.raises(TypeError, match=r"before_tool_call must take \(call\), or"):
            Agent(model=ScriptedModel([]), before_tool_call=hook)
    with pytest.raises(TypeError, match=r"after_tool_call must take \(call, result\), or"):
        Agent(model=ScriptedModel([]), after_tool_call=none)


async def test_deps_are_never_written_to_the_ledger(tmp_path):
    """DESIGN 12.3: the deps are the application's (a client, a token): no record of
    the session holds them, nor anything a tool or hook read from them but its result."""
    seen = Seen()
    store = JsonlStore(tmp_path)

    async def before(call: ToolCall, ctx: ToolContext[Deps]) -> None:
        assert ctx.deps.token == SECRET

    agent = Agent(
        model=ScriptedModel([calls("fetch", "lookup"), answer()]),
        tools=seen.tools,
        store=store,
        session_id="s",
        before_tool_call=before,
    )
    result = await agent.prompt("go", deps=Deps("erin"))
    await agent.aclose()
    assert result.end.reason == "completed" and seen.deps["fetch"].token == SECRET
    written = b"".join(path.read_bytes() for path in tmp_path.rglob("*") if path.is_file())
    assert b"fetched for erin" in written  # the tool's result is recorded
    assert SECRET.encode() not in written
    assert b"Deps(" not in written and b"token" not in written


async def test_an_approved_call_runs_with_the_deps_of_the_turn_that_runs_it(tmp_path):
    """A call held for approval runs at a later turn, perhaps in another process: it
    gets that turn's deps (those of the turn that held it are gone), also after
    ``Agent.resume``."""
    ran: list[Any] = []

    @tool(requires_approval=True)
    async def pay(ctx: ToolContext[Deps]) -> str:
        """Pay."""
        ran.append(ctx.deps)
        return "paid"

    store = JsonlStore(tmp_path)
    agent = Agent(model=ScriptedModel([calls("pay")]), tools=[pay], store=store, session_id="s")
    first = await agent.prompt("pay", deps=Deps("held"))
    assert first.end.reason == "awaiting_approval" and ran == []
    await agent.approve("r1-pay")
    await agent.aclose()
    later = Deps("later")
    again = await Agent.resume(store, "s", model=ScriptedModel([answer()]), tools=[pay])
    result = await again.prompt(deps=later)
    await again.aclose()
    assert result.end.reason == "completed"
    assert ran == [later] and ran[0] is later


async def test_an_agent_tool_runs_its_inner_turn_with_the_calling_turns_deps():
    """``as_tool``: the inner agent's turn gets the outer call's deps, so its tools
    read what the outer agent's tools read (fresh copies and fresh=False alike)."""
    for fresh in (True, False):
        seen = Seen()
        inner = Agent(
            model=ScriptedModel([calls("fetch"), answer("i2")]), tools=seen.tools, max_steps=3
        )
        helper = inner.as_tool("helper", "Ask the helper.", fresh=fresh)
        outer = Agent(
            model=ScriptedModel(
                [
                    scripted_response("o1", [ToolCall("h1", "helper", {"input": "look"})]),
                    answer("o2"),
                ]
            ),
            tools=[helper],
        )
        deps = Deps("fay")
        result = await outer.prompt("go", deps=deps)
        assert result.end.reason == "completed", fresh
        assert seen.deps["fetch"] is deps, fresh


async def test_deps_reach_a_tool_reporting_progress_in_its_own_task(autojump_clock):
    """A tool that reports progress runs in a task of its own (``ToolBatch``): the
    context it gets there carries the deps too, and its reports still arrive."""
    got: list[Any] = []

    @tool
    async def slow(ctx: ToolContext[Deps]) -> str:
        """Work a while."""
        ctx.report("half", 0.5)
        await trio.sleep(1)
        got.append(ctx.deps)
        return "ok"

    deps = Deps("gus")
    agent = Agent(model=ScriptedModel([calls("slow"), answer()]), tools=[slow])
    updates = []
    async with agent.turn("go", deps=deps) as run:
        async for event in run:
            if event.type == "tool.updated":
                updates.append(event.message)
    assert got == [deps] and updates == ["half"]
