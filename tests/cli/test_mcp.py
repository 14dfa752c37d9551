"""``trio-agent run --mcp/--mcp-http`` (issue 20): MCP servers as tool sources on
the command line, each a real server (tests/support/mcp_servers/demo.py) used by a real
CLI subprocess against the loopback provider."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import trio
from cli_runner import ENV, TRIO_AGENT, call_stream, cli, command, text_stream
from loopback import Reply
from mcp_http_server import demo_over_http
from paths import MCP_SERVERS

from trio_agent.ledger import derive
from trio_agent.stores import parse_jsonl
from trio_agent.tools import Tool

pytest.importorskip("mcp")


WAIT = 60
SERVERS = MCP_SERVERS
DEMO = shlex.join([sys.executable, str(SERVERS / "demo.py")])


def tool_messages(request) -> list[dict]:
    return [m for m in request.json()["messages"] if m["role"] == "tool"]


def offered(request) -> set[str]:
    return {t["function"]["name"] for t in request.json().get("tools", [])}


def recorded_config(ledger: Path) -> dict:
    derived = derive(parse_jsonl(ledger.stem, ledger.read_bytes()).records)
    assert derived.metadata is not None
    return derived.metadata["cli"]


async def test_run_calls_a_stdio_server_tool_and_the_model_reads_its_result(loopback, tmp_path):
    loopback.replies += [
        Reply(body=call_stream("call_1", "mcp1_add", {"a": 20, "b": 22})),
        Reply(body=text_stream("the sum is 42")),
    ]
    with trio.fail_after(WAIT):
        done = await cli(command(loopback, tmp_path, "run", "--mcp", DEMO, "--json", "add them"))
    assert done.returncode == 0, done.stderr.decode()
    first, second = loopback.requests
    assert {"mcp1_add", "mcp1_echo", "mcp1_slow", "read_file", "run"} <= offered(first)
    spec = next(t for t in first.json()["tools"] if t["function"]["name"] == "mcp1_add")
    assert spec["function"]["description"] == "Add two integers."
    assert set(spec["function"]["parameters"]["properties"]) == {"a", "b"}
    [result] = tool_messages(second)
    assert result["tool_call_id"] == "call_1" and result["content"] == "42"
    events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
    finished = [e for e in events if e["type"] == "tool.finished"]
    assert finished and finished[0]["result"]["tool_name"] == "mcp1_add"
    assert b"Traceback" not in done.stderr


async def test_a_named_server_gets_the_variables_named_and_resume_starts_it_again(
    loopback, tmp_path
):
    record = tmp_path / "record.txt"
    ledger = tmp_path / "sessions" / "s.jsonl"
    env = {**ENV, "MCP_DEMO_RECORD": str(record), "NOT_PASSED": "secret-value"}
    loopback.replies += [
        Reply(body=call_stream("call_1", "demo_slow", {"seconds": 0})),
        Reply(body=text_stream("slept")),
    ]
    run = command(loopback, tmp_path, "run", "--mcp", f"demo={DEMO}", "--mcp-env")
    run += ["MCP_DEMO_RECORD", "--ledger", str(ledger), "sleep"]
    with trio.fail_after(WAIT):
        done = await cli(run, env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert record.read_text() == "slow started\nslow finished\n"  # the server ran the call
    assert tool_messages(loopback.requests[1])[0]["content"] == "slept"
    config = recorded_config(ledger)
    assert config["mcp"] == [
        {"kind": "stdio", "prefix": "demo", "command": shlex.split(DEMO)}
    ] and config["mcp_env"] == ["MCP_DEMO_RECORD"]
    assert b"secret-value" not in ledger.read_bytes()
    shown = (await cli([*TRIO_AGENT, "show", str(ledger)], env=env)).stdout.decode()
    assert f"  mcp: --mcp {shlex.quote('demo=' + DEMO)}\n" in shown
    assert "  mcp_env: ['MCP_DEMO_RECORD']" in shown

    # resume: the recorded server runs again, under its recorded prefix
    loopback.replies += [
        Reply(body=call_stream("call_2", "demo_echo", {"text": "again"})),
        Reply(body=text_stream("echoed")),
    ]
    with trio.fail_after(WAIT):
        resumed = await cli([*TRIO_AGENT, "resume", str(ledger), "--message", "echo"], env=env)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert "demo_echo" in offered(loopback.requests[2])
    assert tool_messages(loopback.requests[3])[-1]["content"] == "again"

    # resume with --mcp given: it replaces the recorded servers (numbered afresh)
    loopback.replies.append(Reply(body=text_stream("fine")))
    with trio.fail_after(WAIT):
        other = await cli(
            [*TRIO_AGENT, "resume", str(ledger), "--mcp", DEMO, "--message", "x"], env=env
        )
    assert other.returncode == 0, other.stderr.decode()
    names = offered(loopback.requests[4])
    assert "mcp1_echo" in names and not any(n.startswith("demo_") for n in names)


async def test_an_error_result_and_a_server_that_dies_are_results_not_failures(loopback, tmp_path):
    loopback.replies += [
        Reply(body=call_stream("call_1", "mcp1_fail", {"reason": "testing"})),
        Reply(body=call_stream("call_2", "mcp1_crash", {})),
        Reply(body=call_stream("call_3", "mcp1_add", {"a": 1, "b": 2})),
        Reply(body=text_stream("gave up")),
    ]
    with trio.fail_after(WAIT):
        done = await cli(command(loopback, tmp_path, "run", "--mcp", DEMO, "try"))
    assert done.returncode == 0, done.stderr.decode()
    failed, crashed, after = (tool_messages(r)[-1]["content"] for r in loopback.requests[1:])
    assert "failed on purpose: testing" in failed
    assert "exited with status 3" in crashed
    assert "is not running" in after and "exited with status 3" in after


@pytest.fixture
async def http_url():
    async with demo_over_http() as served:
        yield served


async def test_http_and_stdio_servers_are_numbered_in_the_order_given(loopback, tmp_path, http_url):
    loopback.replies += [
        Reply(body=call_stream("call_1", "mcp1_weather", {"city": "Oslo"})),
        Reply(body=call_stream("call_2", "mcp2_add", {"a": 1, "b": 1})),
        Reply(body=text_stream("done")),
    ]
    run = command(loopback, tmp_path, "run", "--mcp-http", http_url, "--mcp", DEMO, "go")
    with trio.fail_after(WAIT):
        done = await cli(run)
    assert done.returncode == 0, done.stderr.decode()
    names = offered(loopback.requests[0])
    assert {"mcp1_weather", "mcp2_weather", "mcp1_add", "mcp2_add"} <= names
    weather = tool_messages(loopback.requests[1])[-1]["content"]
    assert json.loads(weather) == {"city": "Oslo", "celsius": 21.5}
    assert tool_messages(loopback.requests[2])[-1]["content"] == "2"
    assert b"Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--mcp", "/no/such/server --flag"], "could not start"),
        (["--mcp", f"{shlex.quote(sys.executable)} -c pass"], "failed to initialize"),
        (["--mcp-http", "http://127.0.0.1:9/mcp"], "could not be used"),
        (["--mcp", DEMO, "--mcp-env", "SURELY_NOT_SET_ANYWHERE"], "SURELY_NOT_SET_ANYWHERE"),
    ],
)
async def test_a_server_that_cannot_be_used_is_a_usage_error(loopback, tmp_path, flags, says):
    ledger = tmp_path / "s.jsonl"
    with trio.fail_after(WAIT):
        done = await cli(command(loopback, tmp_path, "run", *flags, "--ledger", str(ledger), "x"))
    assert done.returncode == 2, done.stderr.decode()
    stderr = done.stderr.decode()
    assert "error:" in stderr and says in stderr and "Traceback" not in stderr
    assert loopback.requests == [] and not ledger.exists()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--mcp", ""], "a command is needed"),
        (["--mcp", "python 'unclosed"], "cannot split"),
        (["--mcp-http", "ftp://example.com/mcp"], "http:// or https://"),
        (["--mcp-env", "NOT-A-NAME"], "not an environment variable name"),
        (["--mcp", f"a={DEMO}", "--mcp", f"a={DEMO}"], "both use the tool prefix 'a'"),
        (["--mcp", DEMO, "--mcp", f"mcp1={DEMO}"], "both use the tool prefix 'mcp1'"),
    ],
)
async def test_bad_mcp_flags_are_usage_errors(loopback, tmp_path, flags, says):
    done = await cli(command(loopback, tmp_path, "run", *flags, "x"))
    assert done.returncode == 2 and says in done.stderr.decode(), done.stderr.decode()
    assert loopback.requests == []


def test_a_tool_name_taken_by_the_workspace_is_a_usage_error():
    from trio_agent.cli._errors import UsageError
    from trio_agent.cli._mcp import all_tools

    async def execute(arguments: dict) -> str:
        return ""

    def tool(name: str) -> Tool:
        return Tool(name=name, description="", parameters={"type": "object"}, execute=execute)

    class Server:
        label = "MCP server 'fake'"

        def tools(self):
            return (tool("ok"), tool("read_file"))

    assert [t.name for t in all_tools([tool("write_file")], [Server()])] == [
        "write_file",
        "ok",
        "read_file",
    ]
    with pytest.raises(UsageError, match="'read_file', which is taken: give the server"):
        all_tools([tool("read_file")], [Server()])


async def test_tool_choice_may_name_a_server_tool(loopback, tmp_path):
    loopback.replies.append(Reply(body=text_stream("ok")))
    run = command(loopback, tmp_path, "run", "--mcp", DEMO, "--tool-choice", "mcp1_add", "x")
    with trio.fail_after(WAIT):
        done = await cli(run)
    assert done.returncode == 0, done.stderr.decode()
    assert loopback.requests[0].json()["tool_choice"]["function"]["name"] == "mcp1_add"


async def test_tool_choice_naming_no_tool_is_a_usage_error_with_servers_too(loopback, tmp_path):
    refused = await cli(command(loopback, tmp_path, "run", "--tool-choice", "mcp1_add", "x"))
    assert refused.returncode == 2 and b"--tool-choice" in refused.stderr
    run = command(loopback, tmp_path, "run", "--mcp", DEMO, "--tool-choice", "mcp1_nope", "x")
    with trio.fail_after(WAIT):
        also = await cli(run)
    assert also.returncode == 2 and b"--tool-choice" in also.stderr and b"mcp1_add" in also.stderr
    assert loopback.requests == []


def test_a_shell_style_variable_before_the_command_is_refused_without_its_value():
    import argparse

    from trio_agent.cli._mcp import stdio_server

    with pytest.raises(argparse.ArgumentTypeError, match="--mcp-env GITHUB_TOKEN") as caught:
        stdio_server("GITHUB_TOKEN=ghp_secret123 npx -y @modelcontextprotocol/server-github")
    assert "ghp_secret123" not in str(caught.value)
    assert stdio_server("gh=npx -y server-github").prefix == "gh"


async def test_a_stdio_server_runs_in_the_workspace_not_the_current_directory(loopback, tmp_path):
    """Issue 35 (item 4): ``--mcp`` servers were started in the current directory, so a
    server given a relative path (a filesystem server's ``.``) worked on the wrong
    tree. They run in ``--workspace``: the demo server, told to mark its start in
    ``started.flag`` (a relative path), marks it there, on run and on resume."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**ENV, "MCP_DEMO_ONCE": "started.flag"}
    ledger = tmp_path / "m.jsonl"
    loopback.replies += [Reply(body=text_stream("ok")), Reply(body=text_stream("again"))]
    run = command(loopback, workspace, "run", "--mcp", DEMO, "--mcp-env", "MCP_DEMO_ONCE")
    with trio.fail_after(WAIT):
        done = await cli([*run, "--ledger", str(ledger), "hi"], env=env, cwd=elsewhere)
    assert done.returncode == 0, done.stderr.decode()
    assert (workspace / "started.flag").exists() and not (elsewhere / "started.flag").exists()
    (workspace / "started.flag").unlink()
    with trio.fail_after(WAIT):
        resumed = await cli(
            [*TRIO_AGENT, "resume", str(ledger), "--message", "more"], env=env, cwd=elsewhere
        )
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert (workspace / "started.flag").exists() and not (elsewhere / "started.flag").exists()
