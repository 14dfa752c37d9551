"""MCP servers over streamable HTTP (issue 20): the demo server's app served by uvicorn
on loopback in a subprocess; listing, calls, headers, cancellation, progress, a
server that is down, and a key in its URL kept out of error results."""

from __future__ import annotations

import gc

import pytest
import trio
from edge_servers import call_tool
from helpers import call
from mcp_http_server import demo_over_http, free_port

from trio_agent import ToolRegistry, execute_tool_call
from trio_agent.mcp import MCPServerError, MCPServerHTTP
from trio_agent.tools import ToolContext

pytest.importorskip("mcp")

# The SDK's HTTP client (httpx2) leaves async generators unexhausted when its task
# group is cancelled at exit; trio warns about each when it is collected. Theirs,
# not ours (see the report of issue 20): ignored here, collected in the fixture.
pytestmark = pytest.mark.filterwarnings(r"ignore:Async generator 'httpx?(core)?2\.:ResourceWarning")


WAIT = 120  # seconds: only a failing test waits this long (a server starts in seconds, loaded)


@pytest.fixture
async def url():
    try:
        async with demo_over_http() as served:
            yield served
    finally:
        gc.collect()  # the SDK's abandoned generators are finalized under the filter


async def test_list_and_call_over_http(url):
    with trio.fail_after(WAIT):
        async with MCPServerHTTP(url, headers={"X-Trace": "t1"}, prefix="h") as server:
            tools = ToolRegistry(server.tools())
            assert {"h_add", "h_weather", "h_fail"} <= set(tools.names())
            added = await execute_tool_call(tools, call("h_add", "c1", {"a": 20, "b": 22}))
            weather = await execute_tool_call(tools, call("h_weather", "c2", {"city": "Oslo"}))
            failed = await execute_tool_call(tools, call("h_fail", "c3", {"reason": "x"}))
    assert added.content == "42" and not added.is_error
    assert '"city": "Oslo"' in weather.content
    assert failed.is_error and "failed on purpose: x" in failed.content


async def test_a_cancelled_http_call_returns_at_once_and_the_server_keeps_serving(url):
    with trio.fail_after(WAIT):
        async with MCPServerHTTP(url) as server:
            tools = ToolRegistry(server.tools())
            with trio.move_on_after(0.5) as scope:
                await execute_tool_call(tools, call("slow", "c1", {"seconds": 3600}))
            assert scope.cancelled_caught
            # the cancel returned at once, and the server answered the next call at once:
            # neither waited for the slow call's hour (nor WAIT, which is a hang)
            after = await execute_tool_call(tools, call("add", "c2", {"a": 1, "b": 2}))
            assert trio.current_time() - scope.deadline < WAIT / 3
    assert after.content == "3"


async def test_progress_over_http(url):
    seen: list[tuple[str, float | None]] = []
    context = ToolContext(call("count", "c1", {}), lambda m, f: seen.append((m, f)))
    from trio_agent.tools._context import CURRENT

    with trio.fail_after(WAIT):
        async with MCPServerHTTP(url, allow={"count"}) as server:
            [count] = server.tools()
            token = CURRENT.set(context)
            try:
                result = await count.execute({"steps": 2})
            finally:
                CURRENT.reset(token)
    assert result == "counted 2"
    assert seen and seen[0] == ("step 1", 0.5)


async def test_a_server_that_is_down_is_a_clear_error_at_entry():
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with trio.fail_after(WAIT), pytest.raises(MCPServerError, match="could not be used"):
        async with MCPServerHTTP(url):
            pass
    gc.collect()


def test_only_http_urls():
    with pytest.raises(ValueError, match="http"):
        MCPServerHTTP("ftp://example.com/mcp")


async def _start_http(port: int) -> trio.Process:
    from mcp_http_server import start_demo_http

    return await start_demo_http(port)


async def test_a_key_in_the_url_is_not_in_error_results_the_model_sees():
    """Issue 20 (review of the MCP servers): a key in the server's URL reached the error results the
    model sees."""
    from mcp_http_server import free_port

    port = free_port()
    process = await _start_http(port)
    with trio.fail_after(60):
        async with MCPServerHTTP(f"http://127.0.0.1:{port}/mcp?api_key=sk-live-0123") as mcp:
            registry = ToolRegistry(mcp.tools())
            process.kill()
            await process.wait()
            result = await call_tool(registry, "add", {"a": 1, "b": 2})
    assert result.is_error
    assert "sk-live-0123" not in str(result.content), result.content
