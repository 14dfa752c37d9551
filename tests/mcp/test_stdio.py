"""MCP servers over stdio as tool sources (issue 20): listing, calls, results,
cancellation, progress, list_changed, and tools used by an ``Agent``; against a real
server written with the SDK's ``MCPServer`` (tests/support/mcp_servers/demo.py). And
the transport's edges: a crash while a helper holds the server's stdout, a response
nested too deep to parse, a message over the line limit."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import trio
from edge_servers import edge_server
from helpers import call, user
from paths import DEMO_SERVER

from trio_agent import Agent, ToolRegistry, UserMessage, execute_tool_call, run_agent_loop
from trio_agent.mcp import MCPServerError, MCPServerStdio
from trio_agent.messages import ImageBlock, TextBlock
from trio_agent.testing import ScriptedModel, scripted_response
from trio_agent.tools import ToolError

pytest.importorskip("mcp")


WAIT = 120  # seconds: only a failing test waits this long (a server starts in seconds, loaded)
DEMO = str(DEMO_SERVER)


def demo(**options) -> MCPServerStdio:
    return MCPServerStdio(sys.executable, [DEMO], **options)


async def run_call(server: MCPServerStdio, name: str, arguments: dict, id: str = "c1"):
    return await execute_tool_call(ToolRegistry(server.tools()), call(name, id, arguments))


async def test_tools_are_listed_with_the_servers_schemas():
    with trio.fail_after(WAIT):
        async with demo() as server:
            tools = {t.name: t for t in server.tools()}
    assert {"add", "echo", "weather", "fail", "picture", "slow", "count"} <= set(tools)
    add = tools["add"]
    assert add.description == "Add two integers."
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert add.parameters["required"] == ["a", "b"]
    assert add.spec().name == "add" and add.progress


async def test_a_prefix_names_the_tools_and_allow_and_deny_filter_them():
    with trio.fail_after(WAIT):
        async with demo(prefix="d", allow={"add", "echo", "fail"}, deny=["fail"]) as server:
            assert [t.name for t in server.tools()] == ["d_add", "d_echo"]
            result = await run_call(server, "d_add", {"a": 2, "b": 40})
    assert result.content == "42" and not result.is_error


@pytest.mark.parametrize("prefix", ["", "a b", "x" * 33, 3])
def test_a_prefix_must_be_a_short_name(prefix):
    with pytest.raises(ValueError, match="prefix"):
        demo(prefix=prefix)


async def test_text_structured_and_image_results():
    with trio.fail_after(WAIT):
        async with demo() as server:
            echoed = await run_call(server, "echo", {"text": "hello"})
            weather = await run_call(server, "weather", {"city": "Paris"})
            picture = await run_call(server, "picture", {})
    assert echoed.content == "hello" and not echoed.is_error
    assert '"celsius": 21.5' in weather.content
    text, image = picture.content
    assert text == TextBlock("a pixel")
    assert isinstance(image, ImageBlock) and image.media_type == "image/png"
    assert image.data.startswith(b"\x89PNG")


async def test_is_error_is_an_error_result_the_model_sees():
    with trio.fail_after(WAIT):
        async with demo() as server:
            result = await run_call(server, "fail", {"reason": "no luck"})
            later = await run_call(server, "add", {"a": 1, "b": 1}, "c2")
    assert result.is_error and "failed on purpose: no luck" in result.content
    assert later.content == "2"


async def test_arguments_are_checked_against_the_schema_before_sending(caplog):
    caplog.set_level(logging.DEBUG, "trio_agent.mcp")
    with trio.fail_after(WAIT):
        async with demo() as server:
            wrong = await run_call(server, "echo", {"text": 5})
            missing = await run_call(server, "echo", {})
            await run_call(server, "echo", {"text": "sent"})
    assert wrong.is_error and "at `$.text`" in wrong.content
    assert missing.is_error and "'text' is a required property" in missing.content
    logged = [r.getMessage() for r in caplog.records]
    assert any("echo called with 'sent'" in line for line in logged)  # stderr to logging
    assert not any("echo called with 5" in line for line in logged)  # never sent


async def test_arguments_beyond_our_limits_are_refused():
    with trio.fail_after(WAIT):
        async with demo() as server:
            result = await run_call(server, "echo", {"text": "x" * 2_000_000})
    assert result.is_error and "Invalid arguments" in result.content


async def test_a_cancelled_call_is_cancelled_on_the_server_which_keeps_serving(
    tmp_path, monkeypatch
):
    record = tmp_path / "record"
    monkeypatch.setenv("MCP_DEMO_RECORD", str(record))
    with trio.fail_after(WAIT):
        async with demo(env={"MCP_DEMO_RECORD": str(record)}) as server:
            async with trio.open_nursery() as nursery:

                async def slow() -> None:
                    await run_call(server, "slow", {"seconds": 3600})
                    raise AssertionError("the call was not cancelled")

                nursery.start_soon(slow)
                while not record.exists() or "slow started" not in record.read_text():  # noqa: ASYNC110
                    await trio.sleep(0.01)
                cancelled_at = trio.current_time()
                nursery.cancel_scope.cancel()
            # returns at once: not when the server's hour is up (nor WAIT, which is a hang)
            assert trio.current_time() - cancelled_at < WAIT / 3
            while "slow cancelled" not in record.read_text():  # noqa: ASYNC110
                await trio.sleep(0.01)
            after = await run_call(server, "add", {"a": 3, "b": 4})
    assert after.content == "7"
    assert "slow finished" not in record.read_text()


async def test_server_progress_becomes_tool_updated_events():
    script = [
        scripted_response("r1", [call("count", "c1", {"steps": 3})]),
        scripted_response("r2", "done"),
    ]
    updates = []
    with trio.fail_after(WAIT):
        async with demo(allow={"count"}) as server:
            run = run_agent_loop(
                messages=[user()],
                model=ScriptedModel(script),
                tools=ToolRegistry(server.tools()),
                max_steps=2,
            )
            async with run:
                async for event in run:
                    if event.type == "tool.updated":
                        updates.append((event.message, event.fraction))
    assert updates[0] == ("step 1", pytest.approx(1 / 3))
    assert updates[-1][0] in ("step 2", "step 3")
    assert run.result.messages[2].content == "counted 3"


async def test_list_changed_refreshes_the_tools():
    with trio.fail_after(WAIT):
        async with demo(prefix="d") as server:
            assert "d_extra" not in [t.name for t in server.tools()]
            assert (await run_call(server, "d_grow", {})).content == "grown"
            # sent before the call's answer: listed again before the call returned
            assert "d_extra" in [t.name for t in server.tools()]
            extra = await run_call(server, "d_extra", {})
    assert extra.content == "extra"


async def test_a_tool_a_call_added_is_offered_at_the_next_step():
    # regression: the SDK hands notifications to spawned tasks, so the change often
    # reached us after the call returned, and the next step still had the old list
    script = [
        scripted_response("r1", [call("d_grow", "c1", {})]),
        scripted_response("r2", [call("d_extra", "c2", {})]),
        scripted_response("r3", "done"),
    ]
    model = ScriptedModel(script)
    with trio.fail_after(WAIT):
        async with demo(prefix="d") as server:
            agent = Agent(model=model, tool_sources=[server], max_steps=4)
            result = await agent.prompt(UserMessage("u1", "grow"))
    offered = [[spec.name for spec in request.tools] for request in model.requests]
    assert "d_extra" not in offered[0] and "d_extra" in offered[1]
    extra = [m for m in result.messages if m.role == "tool_result"][1]
    assert (extra.content, extra.is_error) == ("extra", False)


async def test_a_server_that_never_lists_its_tools_is_refused_within_init_seconds():
    # answers initialize, then never tools/list: entry is bounded as initialize is
    with trio.fail_after(WAIT):
        # (5 s: a Python process must start and answer initialize within them, loaded)
        with pytest.raises(MCPServerError, match=r"did not list its tools within 5 s"):
            async with MCPServerStdio(
                sys.executable,
                [str(Path(DEMO).parent / "silent.py"), "--answer-initialize"],
                init_seconds=5,
            ):
                pass


async def test_the_tools_work_in_an_agent_run():
    script = [
        scripted_response(
            "r1",
            [
                call("fs_add", "c1", {"a": 20, "b": 22}),
                call("fs_fail", "c2", {"reason": "why"}),
            ],
        ),
        scripted_response("r2", "the sum is 42"),
    ]
    with trio.fail_after(WAIT):
        async with demo(prefix="fs") as server:
            agent = Agent(model=ScriptedModel(script), tools=server.tools(), max_steps=3)
            result = await agent.prompt(UserMessage("u1", "add"))
    assert result.end.reason == "completed"
    results = [m for m in result.messages if m.role == "tool_result"]
    assert (results[0].content, results[0].is_error) == ("42", False)
    assert results[1].is_error and "failed on purpose: why" in results[1].content


async def test_tools_outside_the_block_are_an_error_result():
    with trio.fail_after(WAIT):
        async with demo() as server:
            tools = ToolRegistry(server.tools())
            assert server.session is not None  # the SDK's, for resources and prompts
            listed = await server.session.list_tools()
            assert "add" in [t.name for t in listed.tools]
    assert server.session is None
    result = await execute_tool_call(tools, call("add", "c1", {"a": 1, "b": 2}))
    assert result.is_error and "is closed" in result.content
    with pytest.raises(RuntimeError, match="closed"):
        await server.refresh()


@pytest.mark.parametrize(
    ("command", "args", "label"),
    [
        ("npx", ["-y", "@scope/server", "--token", "sekrit"], "npx @scope/server"),
        ("/usr/bin/srv", ["--token", "sekrit", "run", "x"], "srv run"),
        ("uvx", ["--api-key=sekrit", "mcp-server-fetch"], "uvx mcp-server-fetch"),
        ("server", ["KEY=sekrit"], "server"),
    ],
)
def test_a_stdio_servers_name_in_messages_leaves_its_other_arguments_out(command, args, label):
    server = MCPServerStdio(command, args)
    assert server.label == f"MCP server {label!r}"
    assert "sekrit" not in server.label


@pytest.mark.filterwarnings(r"ignore:Async generator 'httpx?(core)?2\.:ResourceWarning")
async def test_a_crash_is_seen_when_a_helper_still_holds_the_servers_stdout():
    """Issue 20 (review of the MCP servers): a crash went unseen while a helper process still held
    the server's stdout: the call hung until the helper exited, and the next call failed with
    'Connection closed' instead of restarting the server."""
    wrapper = f"sleep 600 & exec {sys.executable} {DEMO}"
    with trio.fail_after(3 * WAIT):
        async with MCPServerStdio("sh", ["-c", wrapper], restart=True) as mcp:
            tools = {t.name: t for t in mcp.tools()}
            with trio.fail_after(WAIT):  # observed: hangs until the helper exits (10 minutes)
                with pytest.raises(ToolError, match="exited with status 3"):
                    await tools["crash"].execute({})
            # observed: 'MCP error -32000: Connection closed', no restart
            with trio.fail_after(WAIT):
                assert await tools["add"].execute({"a": 1, "b": 2}) == "3"


@pytest.mark.filterwarnings(r"ignore:Async generator 'httpx?(core)?2\.:ResourceWarning")
async def test_a_response_nested_too_deep_to_parse_is_an_error_result_not_a_hang():
    """Issue 20 (review of the MCP servers): a response nested too deep to parse hung the call; it
    is an error result."""
    with trio.fail_after(2 * WAIT):
        async with edge_server("deep_server.py") as mcp:
            tools = {t.name: t for t in mcp.tools()}
            with trio.fail_after(WAIT):  # observed: never returns
                with pytest.raises(ToolError):
                    await tools["tree"].execute({"depth": 220})


@pytest.mark.filterwarnings(r"ignore:Async generator 'httpx?(core)?2\.:ResourceWarning")
async def test_a_message_over_the_line_limit_is_named_as_such(monkeypatch):
    """Issue 20 (review of the MCP servers): a message over the line limit was reported as the
    server closing its stdout, which it had not."""
    from trio_agent.mcp import _stdio as _mcp_stdio

    monkeypatch.setattr(_mcp_stdio, "_MAX_LINE", 1024 * 1024)
    with trio.fail_after(WAIT):
        async with edge_server("big_server.py") as mcp:
            tools = {t.name: t for t in mcp.tools()}
            with pytest.raises(ToolError) as caught:
                await tools["big"].execute({"mb": 2})
    # observed: "... stopped during the call: it closed its stdout" (it did not)
    assert "closed its stdout" not in str(caught.value), str(caught.value)


@pytest.mark.filterwarnings(r"ignore:Async generator 'httpx?(core)?2\\.:ResourceWarning")
async def test_a_long_message_is_parsed_off_the_trio_thread(monkeypatch):
    """Review of issue 38: each stdout line was validated by the SDK on the trio
    thread, so a server's 64 MiB answer stalled every task for most of a second.
    A line over 64 KiB is parsed in a worker thread; short ones stay inline."""
    import threading

    from trio_agent.mcp import _stdio as _mcp_stdio

    parsed_on: list[tuple[int, bool]] = []  # (line length, on the trio thread)
    trio_thread = threading.current_thread()
    parse = _mcp_stdio._parse

    def recording(line: bytes, bad):
        parsed_on.append((len(line), threading.current_thread() is trio_thread))
        return parse(line, bad)

    monkeypatch.setattr(_mcp_stdio, "_parse", recording)
    with trio.fail_after(WAIT):
        async with edge_server("big_server.py") as mcp:
            tools = {t.name: t for t in mcp.tools()}
            text = await tools["big"].execute({"mb": 1})
            assert await tools["add"].execute({"a": 1, "b": 2}) == "3"
    assert text == "x" * 2**20
    long = [inline for length, inline in parsed_on if length > 2**20]
    assert long == [False], parsed_on
    assert any(inline for length, inline in parsed_on if length < 2**16), parsed_on


async def test_a_server_never_entered_is_a_clear_error_at_once_not_an_empty_tool_list(tmp_path):
    """Issue 35: an MCP server given in ``tool_sources=`` (or whose ``tools()`` was
    read) without ``async with server:`` offered zero tools, and the turn "completed"
    with the model told "Unknown tool ... Available tools: none". It is an error at
    once, naming the server and saying to enter it; nothing is sent or recorded."""
    from trio_agent import JsonlStore

    server = demo()
    with pytest.raises(RuntimeError, match=r"MCP server .* was never entered.*async with server"):
        server.tools()
    model = ScriptedModel(
        [
            scripted_response("r1", [call("add", "c1", {"a": 1, "b": 2})]),
            scripted_response("r2", "3"),
        ]
    )
    store = JsonlStore(tmp_path)
    agent = Agent(model=model, tool_sources=[server], store=store, session_id="s")
    with pytest.raises(RuntimeError, match="was never entered"):
        await agent.prompt("add 1 and 2")
    with pytest.raises(RuntimeError, match="was never entered"):
        agent.turn("add 1 and 2")
    assert model.requests == [] and agent.turns == 0 and list(tmp_path.iterdir()) == []
    run = run_agent_loop(
        messages=[user()], model=model, tools=ToolRegistry(), max_steps=2, tool_sources=[server]
    )
    with pytest.raises(RuntimeError, match="was never entered"):
        await run.wait()
    assert model.requests == [] and run.result is None
    with trio.fail_after(WAIT):
        async with server:  # entered, the same agent goes on
            result = await agent.prompt("add 1 and 2")
    await agent.aclose()
    assert result.end.reason == "completed" and result.messages[2].content == "3"


async def test_a_server_whose_block_has_ended_is_a_clear_error_at_the_next_turn():
    """Issue 35 (a review after it): the check caught a server never entered, but one
    used after its ``async with`` block ended still offered its tools; every call
    answered "is closed" and the turn reported ``completed``. The next turn is an
    error at once, naming the server; nothing is sent."""
    model = ScriptedModel(
        [
            scripted_response("r1", [call("add", "c1", {"a": 1, "b": 2})]),
            scripted_response("r2", "3"),
        ]
    )
    with trio.fail_after(WAIT):
        async with demo() as server:
            agent = Agent(model=model, tool_sources=[server])
            assert "add" in {tool.name for tool in server.tools()}
    with pytest.raises(RuntimeError, match=r"MCP server .* is closed.*async with server"):
        await agent.prompt("add 1 and 2")
    run = run_agent_loop(
        messages=[user()], model=model, tools=ToolRegistry(), max_steps=2, tool_sources=[server]
    )
    with pytest.raises(RuntimeError, match="is closed"):
        await run.wait()
    assert model.requests == [] and agent.turns == 0


def test_entering_a_server_from_asyncio_says_the_library_runs_on_trio():
    """Issue 35 (a review after it): under ``asyncio.run`` the agent's entry points
    said trio-agent runs on trio, but entering an MCP server failed deep in trio's
    nursery as "MCPServerError: ... AttributeError: 'RunContext' object has no
    attribute 'runner'". It says the same as every other entry point, at once."""
    import asyncio

    async def enter() -> None:
        async with demo():
            pass

    with pytest.raises(RuntimeError, match=r"^trio-agent runs on trio; call it from trio\.run"):
        asyncio.run(enter())
