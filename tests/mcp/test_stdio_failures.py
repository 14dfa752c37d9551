"""MCP stdio servers that fail (issue 20, item 5): a crash or a kill mid-call is an
error result and later calls a clear one; a server that never answers ``initialize``
is bounded; the server's process group ends with the block; its stderr goes to
``logging``, never to the terminal, and an entry error quotes it."""

from __future__ import annotations

import os
import signal
import sys

import pytest
import trio
from edge_servers import edge_server
from helpers import alive, call
from paths import MCP_SERVERS
from waiting import wait_until

from trio_agent import ToolRegistry, execute_tool_call
from trio_agent.mcp import MCPServerError, MCPServerStdio

pytest.importorskip("mcp")


WAIT = 120  # seconds: only a failing test waits this long (a server starts in seconds, loaded)
SERVERS = MCP_SERVERS
DEMO = str(SERVERS / "demo.py")


async def run_call(server: MCPServerStdio, name: str, arguments: dict, id: str = "c1"):
    return await execute_tool_call(ToolRegistry(server.tools()), call(name, id, arguments))


async def test_a_server_that_crashes_mid_call_gives_error_results():
    with trio.fail_after(WAIT):
        async with MCPServerStdio(sys.executable, [DEMO]) as server:
            crashed = await run_call(server, "crash", {})
            later = await run_call(server, "add", {"a": 1, "b": 2}, "c2")
    assert (
        crashed.is_error and "stopped during the call: it exited with status 3" in crashed.content
    )
    assert later.is_error and "is not running: it exited with status 3" in later.content


async def test_a_server_killed_mid_call_gives_error_results(tmp_path):
    record = tmp_path / "record"
    with trio.fail_after(WAIT):
        env = {"MCP_DEMO_RECORD": str(record)}
        async with MCPServerStdio(sys.executable, [DEMO], env=env) as server:
            async with trio.open_nursery() as nursery:
                results = []

                async def slow() -> None:
                    results.append(await run_call(server, "slow", {"seconds": 3600}))

                nursery.start_soon(slow)
                await wait_until(lambda: record.exists() and "slow started" in record.read_text())
                assert server.pid is not None
                os.kill(server.pid, signal.SIGKILL)
            later = await run_call(server, "add", {"a": 1, "b": 2}, "c2")
    [killed] = results
    assert killed.is_error and "killed by signal 9" in killed.content
    assert later.is_error and "is not running" in later.content


async def test_a_server_that_never_answers_initialize_is_bounded():
    silent = MCPServerStdio(sys.executable, [str(SERVERS / "silent.py")], init_seconds=0.5)
    started = trio.current_time()
    with trio.fail_after(WAIT), pytest.raises(MCPServerError, match="did not answer initialize"):
        async with silent:
            pass
    assert trio.current_time() - started < WAIT / 3  # unbounded, it would wait for ever
    with pytest.raises(RuntimeError, match="once"):
        async with silent:
            pass


async def test_a_server_that_exits_at_once_is_a_clear_error():
    quits = MCPServerStdio(sys.executable, ["-c", "raise SystemExit(7)"])
    with trio.fail_after(WAIT), pytest.raises(MCPServerError, match="exited with status 7"):
        async with quits:
            pass


async def test_a_command_that_cannot_start_is_a_clear_error(tmp_path):
    missing = MCPServerStdio(str(tmp_path / "no-such-server"))
    with trio.fail_after(WAIT), pytest.raises(MCPServerError, match="could not start"):
        async with missing:
            pass


async def test_the_servers_process_group_ends_with_the_block():
    with trio.fail_after(WAIT):
        async with MCPServerStdio(sys.executable, [DEMO]) as server:
            spawned = await run_call(server, "spawn", {})
            child = int(spawned.content)
            leader = server.pid
            assert alive(child)
        assert leader is not None and not alive(leader)
        while alive(child):  # noqa: ASYNC110 - killed; init may take a moment to reap it
            await trio.sleep(0.01)


async def test_leaving_the_block_while_cancelled_still_ends_the_server():
    with trio.fail_after(WAIT):
        with trio.CancelScope() as scope:
            async with MCPServerStdio(sys.executable, [DEMO]) as server:
                leader = server.pid
                scope.cancel()
                await trio.sleep(1)
        assert scope.cancelled_caught
        assert leader is not None and not alive(leader)


async def test_stderr_goes_to_logging_not_the_terminal(capfd, caplog):
    caplog.set_level("DEBUG", "trio_agent.mcp")
    with trio.fail_after(WAIT):
        async with MCPServerStdio(sys.executable, [DEMO]) as server:
            await run_call(server, "echo", {"text": "to stderr"})
    assert "echo called" not in capfd.readouterr().err
    assert any("echo called with 'to stderr'" in r.getMessage() for r in caplog.records)


async def test_a_cancelled_entry_ends_the_server_and_stays_a_cancellation():
    server = MCPServerStdio(sys.executable, [str(SERVERS / "silent.py")], init_seconds=3600)
    with trio.fail_after(WAIT):
        with trio.CancelScope() as scope:  # cancelled while waiting for initialize
            async with trio.open_nursery() as nursery:

                async def enter() -> None:
                    async with server:
                        pytest.fail("entered a server that never answers")

                nursery.start_soon(enter)
                await wait_until(lambda: server.pid is not None)  # started: initialize sent
                scope.cancel()
    assert scope.cancelled_caught  # the cancellation came out as itself, not an error
    assert server.pid is not None and not alive(server.pid)
    with pytest.raises(RuntimeError, match="entered once"):
        async with server:
            pass


@pytest.mark.filterwarnings(r"ignore:Async generator 'httpx?(core)?2\.:ResourceWarning")
async def test_an_entry_error_names_the_server_once_and_says_what_it_printed():
    """Issue 20 (review of the MCP servers): an entry error named the server twice and left out what
    it printed on stderr."""
    with trio.fail_after(30), pytest.raises(MCPServerError) as caught:
        async with edge_server("bad_config_server.py"):
            pass
    message = str(caught.value)
    assert message.count("bad_config_server.py") == 1, message  # observed: twice
    assert "DATABASE_URL is not set" in message, message  # observed: absent
