"""Regressions found by trying to break the MCP servers (issue 20's review), each
named after what went wrong: a ``$ref`` fetched or read, a call held by list
changes, a crash hidden by a child holding stdout, a redeployed HTTP server,
a failed restart retried by every waiting call, a listing that stalled the
loop, secrets in error results, a response too deep to parse, a line over the
limit, leaving the block during a restart. Servers: tests/support/mcp_servers/edge/
(written with the SDK's ``MCPServer``) and tests/support/mcp_servers/demo.py."""

from __future__ import annotations

import http.server
import sys
import threading
import time

import pytest
import trio
from paths import DEMO_SERVER, EDGE_SERVERS

pytest.importorskip("mcp")

from trio_agent import ToolCall
from trio_agent.mcp import MCPServerError, MCPServerHTTP, MCPServerStdio
from trio_agent.tools import ToolError, ToolRegistry, execute_tool_call

HERE = EDGE_SERVERS
DEMO = str(DEMO_SERVER)
pytestmark = pytest.mark.filterwarnings(
    "ignore:Async generator 'http(x|core)2\\.:ResourceWarning"  # README: the SDK's, over HTTP
)


def server(script: str, **kwargs) -> MCPServerStdio:
    return MCPServerStdio(sys.executable, [str(HERE / script)], **kwargs)


async def call(tool_registry: ToolRegistry, name: str, arguments: dict):
    return await execute_tool_call(tool_registry, ToolCall("c1", name, arguments))


# 1 -------------------------------------------------------------------------------------


def _json_server(hits: list) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/internal/schema.json"


@pytest.mark.filterwarnings("default::DeprecationWarning")  # as in a user's program
async def test_a_remote_ref_in_an_input_schema_is_not_fetched():
    hits: list = []
    httpd, url = _json_server(hits)
    try:
        with trio.fail_after(30):
            async with server("ref_server.py", env={"REF_URL": url}) as mcp:
                await call(ToolRegistry(mcp.tools()), "lookup", {"x": "hello"})
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert hits == []  # observed: ['/internal/schema.json'], fetched by urllib in the event loop


@pytest.mark.filterwarnings("default::DeprecationWarning")  # as in a user's program
async def test_a_file_ref_in_an_input_schema_is_not_read(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"enum": ["AWS_SECRET=abc123"]}')
    with trio.fail_after(30):
        async with server("ref_server.py", env={"REF_URL": secret.as_uri()}) as mcp:
            result = await call(ToolRegistry(mcp.tools()), "lookup", {"x": "hello"})
    assert "AWS_SECRET" not in str(result.content)


# 2 -------------------------------------------------------------------------------------


async def test_a_call_returns_while_the_server_keeps_announcing_list_changes():
    env = {"STORM_MS": "50", "LIST_MS": "100"}  # 20 announcements a second, a 100 ms tools/list
    with trio.fail_after(60):
        async with server("storm_server.py", env=env) as mcp:
            tools = {t.name: t for t in mcp.tools()}
            await tools["storm"].execute({})
            await trio.sleep(0.3)
            with trio.fail_after(5):  # observed: never returns
                assert await tools["add"].execute({"a": 1, "b": 2}) == "3"


async def test_a_call_returns_its_result_when_the_relisting_never_answers():
    env = {"LIST_MS": "3600000", "FAST_LISTS": "1"}
    with trio.fail_after(60):
        async with server("storm_server.py", env=env, init_seconds=5) as mcp:
            tools = {t.name: t for t in mcp.tools()}
            with trio.fail_after(10):  # observed: never returns
                assert await tools["notify"].execute({}) == "notified"
            with trio.fail_after(10):  # observed: every later call hangs too
                assert await tools["add"].execute({"a": 1, "b": 2}) == "3"


# 3 -------------------------------------------------------------------------------------


async def test_a_crash_is_seen_when_a_helper_still_holds_the_servers_stdout():
    wrapper = f"sleep 30 & exec {sys.executable} {DEMO}"
    with trio.fail_after(60):
        async with MCPServerStdio("sh", ["-c", wrapper], restart=True) as mcp:
            tools = {t.name: t for t in mcp.tools()}
            with trio.fail_after(5):  # observed: hangs until the helper exits
                with pytest.raises(ToolError, match="exited with status 3"):
                    await tools["crash"].execute({})
            with trio.fail_after(10):  # observed: 'MCP error -32000: Connection closed', no restart
                assert await tools["add"].execute({"a": 1, "b": 2}) == "3"


# 4 -------------------------------------------------------------------------------------


async def _start_http(port: int) -> trio.Process:
    from mcp_http_server import start_demo_http

    return await start_demo_http(port)


async def test_restart_reconnects_when_an_http_server_was_redeployed():
    from mcp_http_server import free_port

    port = free_port()
    process = await _start_http(port)
    try:
        with trio.fail_after(60):
            async with MCPServerHTTP(f"http://127.0.0.1:{port}/mcp", restart=True) as mcp:
                tools = {t.name: t for t in mcp.tools()}
                assert await tools["add"].execute({"a": 1, "b": 2}) == "3"
                process.kill()
                await process.wait()
                process = await _start_http(port)  # the same URL, a new process
                outcomes = []
                for _ in range(3):
                    try:
                        outcomes.append(await tools["add"].execute({"a": 1, "b": 2}))
                    except Exception as exc:
                        outcomes.append(str(exc))
                # observed: ['MCP error -32600: Session not found'] * 3, for ever
                assert "3" in outcomes
    finally:
        process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


# 5 -------------------------------------------------------------------------------------


async def test_parallel_calls_share_one_failed_restart(tmp_path):
    marker = tmp_path / "marker"
    with trio.fail_after(60):
        async with server(
            "once_then_silent.py", env={"MARKER": str(marker)}, restart=True, init_seconds=4
        ) as mcp:
            tools = {t.name: t for t in mcp.tools()}
            with pytest.raises(ToolError, match="status 3"):
                await tools["crash"].execute({})
            took = []

            async def one(i):
                start = time.monotonic()
                with pytest.raises(ToolError, match="could not be restarted"):
                    await tools["add"].execute({"a": i, "b": 1})
                took.append(time.monotonic() - start)

            async with trio.open_nursery() as nursery:
                for i in range(5):
                    nursery.start_soon(one, i)
    assert marker.read_text().count("restart attempt") == 1  # observed: 5
    assert max(took) < 6  # observed: 4, 8, 12, 16, 20 s (one restart after another)


# 6 -------------------------------------------------------------------------------------


async def test_an_entry_error_names_the_server_once_and_says_what_it_printed():
    with trio.fail_after(30), pytest.raises(MCPServerError) as caught:
        async with server("bad_config_server.py"):
            pass
    message = str(caught.value)
    assert message.count("bad_config_server.py") == 1, message  # observed: twice
    assert "DATABASE_URL is not set" in message, message  # observed: absent


# 7 -------------------------------------------------------------------------------------


async def test_a_key_in_the_url_is_not_in_error_results_the_model_sees():
    from mcp_http_server import free_port

    port = free_port()
    process = await _start_http(port)
    with trio.fail_after(60):
        async with MCPServerHTTP(f"http://127.0.0.1:{port}/mcp?api_key=sk-live-0123") as mcp:
            registry = ToolRegistry(mcp.tools())
            process.kill()
            await process.wait()
            result = await call(registry, "add", {"a": 1, "b": 2})
    assert result.is_error
    assert "sk-live-0123" not in str(result.content), result.content


# 8 -------------------------------------------------------------------------------------


async def test_a_listing_of_a_big_server_does_not_stall_the_event_loop():
    gaps: list[float] = []

    async def ticker():
        last = time.perf_counter()
        while True:
            await trio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    with trio.fail_after(60):
        async with server("many_tools_server.py", env={"TOOLS": "100"}) as mcp:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ticker)
                await trio.sleep(0.1)
                await mcp.refresh()
                await trio.sleep(0.05)  # the ticker's next tick records the stall
                nursery.cancel_scope.cancel()
    assert max(gaps) < 0.2, f"the loop stalled {max(gaps) * 1000:.0f} ms"  # observed: ~600 ms


# 9 -------------------------------------------------------------------------------------


async def test_a_dangling_local_ref_leaves_the_arguments_to_the_server():
    with trio.fail_after(30):
        async with server("odd_schema_server.py") as mcp:
            result = await call(ToolRegistry(mcp.tools()), "dangling", {"q": "x"})
    # observed: 'Tool "dangling" raised _WrappedReferencingError: PointerToNowhere: ...'
    assert not result.is_error, result.content


# 10 ------------------------------------------------------------------------------------


async def test_a_response_nested_too_deep_to_parse_is_an_error_result_not_a_hang():
    with trio.fail_after(30):
        async with server("deep_server.py") as mcp:
            tools = {t.name: t for t in mcp.tools()}
            with trio.fail_after(5):  # observed: never returns
                with pytest.raises(ToolError):
                    await tools["tree"].execute({"depth": 220})


# 11 ------------------------------------------------------------------------------------


async def test_a_message_over_the_line_limit_is_named_as_such(monkeypatch):
    from trio_agent.mcp import _stdio as _mcp_stdio

    monkeypatch.setattr(_mcp_stdio, "_MAX_LINE", 1024 * 1024)
    with trio.fail_after(30):
        async with server("big_server.py") as mcp:
            tools = {t.name: t for t in mcp.tools()}
            with pytest.raises(ToolError) as caught:
                await tools["big"].execute({"mb": 2})
    # observed: "... stopped during the call: it closed its stdout" (it did not)
    assert "closed its stdout" not in str(caught.value), str(caught.value)


# 12 ------------------------------------------------------------------------------------


async def test_leaving_the_block_does_not_wait_for_a_restart_under_way(tmp_path):
    marker = tmp_path / "marker"
    mcp = server("once_then_silent.py", env={"MARKER": str(marker)}, restart=True, init_seconds=8)

    async def one(tool):
        try:
            await tool.execute({"a": 1, "b": 2})
        except Exception:
            pass

    with trio.fail_after(60):
        async with trio.open_nursery() as outer:
            async with mcp:
                tools = {t.name: t for t in mcp.tools()}
                with pytest.raises(ToolError):
                    await tools["crash"].execute({})
                outer.start_soon(one, tools["add"])
                await trio.sleep(0.3)
                start = time.monotonic()
            left = time.monotonic() - start
    assert left < 3, f"leaving took {left:.1f} s"  # observed: ~7.7 s (init_seconds)
