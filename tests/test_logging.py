"""Logging (issue 21): standard loggers under ``trio_agent``, silent unless the
application configures logging; INFO for turns, retries and resumes, DEBUG for
requests, steps and tool calls; never a key, never message content, not even what an
MCP server prints; the command line's ``-v``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from helpers import call
from loopback import Reply, fixture
from paths import DEMO_SERVER
from waiting import wait_until

from trio_agent import Agent, RetryPolicy, TransientModelError, tool
from trio_agent.mcp import MCPServerStdio
from trio_agent.providers import OpenAIChatModel
from trio_agent.stores import JsonlStore
from trio_agent.testing import ScriptedModel, scripted_response

KEY = "sk-test-key-1234567890-abcdef"
SECRET_TEXT = "the launch code is 0451"


@tool
async def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def script():
    return [
        scripted_response("r1", [call("lookup", "c1", {"query": SECRET_TEXT})]),
        scripted_response("r2", f"done: {SECRET_TEXT}"),
    ]


def test_the_library_has_a_null_handler_and_no_level_of_its_own():
    root = logging.getLogger("trio_agent")
    assert any(isinstance(h, logging.NullHandler) for h in root.handlers)
    assert root.level == logging.NOTSET


def test_nothing_reaches_the_terminal_unless_logging_is_configured(tmp_path):
    # a warning (a tool name clash) with logging unconfigured: logging's last
    # resort would print it to stderr without our NullHandler
    program = """
import trio
from trio_agent import Agent, tool
from trio_agent.testing import ScriptedModel, scripted_response

@tool
async def lookup() -> str:
    \"\"\"Mine.\"\"\"
    return "mine"

class Source:
    def tools(self):
        return [lookup]

agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]), tools=[lookup],
              tool_sources=[Source()])
trio.run(agent.prompt, "go")
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


async def test_turns_are_logged_at_info_without_content(caplog):
    caplog.set_level(logging.INFO, "trio_agent")
    agent = Agent(model=ScriptedModel(script()), tools=[lookup])
    await agent.prompt(SECRET_TEXT)
    messages = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert ("trio_agent.loop", logging.INFO, "turn 1 started") in messages
    assert ("trio_agent.loop", logging.INFO, "turn 1 ended: completed after 2 steps") in messages
    assert not [m for m in messages if m[1] < logging.INFO]
    assert SECRET_TEXT not in caplog.text


async def test_steps_and_tool_calls_are_logged_at_debug_by_name_and_id(caplog):
    caplog.set_level(logging.DEBUG, "trio_agent")
    agent = Agent(model=ScriptedModel(script()), tools=[lookup])
    await agent.prompt(SECRET_TEXT)
    text = caplog.text
    assert "request-001 attempt 1: 1 messages, 1 tools" in text
    assert "tool lookup call c1 started" in text
    assert "tool lookup call c1 ended: result in" in text
    assert SECRET_TEXT not in text and "found" not in text


async def test_a_retry_is_logged_with_its_delay_and_error_class(caplog, autojump_clock):
    caplog.set_level(logging.INFO, "trio_agent")
    flaky = scripted_response(
        "a1", "x", raise_at=0, error=TransientModelError(f"503 for {SECRET_TEXT}")
    )
    agent = Agent(
        model=ScriptedModel([flaky, scripted_response("ok", "done")]),
        retry=RetryPolicy(jitter=0),
    )
    await agent.prompt("go")
    assert "request-001 attempt 1 failed (TransientModelError); retrying in 0.50 s" in caplog.text
    assert SECRET_TEXT not in caplog.text  # the error's text may quote anything


async def test_a_resume_is_logged_with_its_warnings(caplog, tmp_path):
    store = JsonlStore(tmp_path)
    agent = Agent(model=ScriptedModel([scripted_response("r1", "hi")]), store=store)
    await agent.prompt("hello")
    session = agent.session_id
    await agent.aclose()
    path = tmp_path / f"{session}.jsonl"
    path.write_bytes(path.read_bytes() + b'{"torn')  # a last line the writer did not finish
    caplog.set_level(logging.INFO, "trio_agent")
    resumed = await Agent.resume(store, session, model=ScriptedModel([]))
    await resumed.aclose()
    messages = [r.getMessage() for r in caplog.records if r.name == "trio_agent.session"]
    assert messages[0].startswith(f"session {session} resumed after turn 1 (2 messages")
    warnings = [r.getMessage() for r in caplog.records if r.name == "trio_agent.ledger"]
    assert any("is torn" in m for m in warnings)


async def test_requests_are_logged_at_debug_without_key_or_query(loopback, caplog):
    caplog.set_level(logging.DEBUG, "trio_agent.providers")
    loopback.replies.append(Reply(body=fixture("openai_text.sse")))
    loopback.replies.append(Reply(status=401, body=f'{{"error": "bad key {KEY}"}}'.encode()))
    model = OpenAIChatModel(
        "gpt-4o-mini",
        api_key=KEY,
        base_url=f"http://127.0.0.1:{loopback.port}/v1?api-version=2024&sig=s3cr3t",
    )
    agent = Agent(model=model)  # a 401 is not retried
    await agent.prompt("one")
    failed = await agent.prompt("two")
    await model.aclose()
    assert failed.end.reason == "failed"
    lines = [r.getMessage() for r in caplog.records]
    url = f"http://127.0.0.1:{loopback.port}/v1/chat/completions"
    assert lines[0].startswith(f"OpenAI POST {url}: 200 in ")
    assert lines[1].startswith(f"OpenAI POST {url}: 401, ") and "Error in " in lines[1]
    assert KEY not in caplog.text and "s3cr3t" not in caplog.text


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "trio_agent", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.parametrize(
    ("flags", "info", "debug"), [((), False, False), (("-v",), True, False), (("-vv",), True, True)]
)
def test_the_cli_logs_to_stderr_with_v(flags, info, debug):
    done = run_cli("demo", *flags)
    assert done.returncode == 0, done.stderr
    assert ("trio_agent.loop INFO: turn 1 started" in done.stderr) is info
    assert ("trio_agent.loop DEBUG: tool multiply call" in done.stderr) is debug
    assert "trio_agent" not in done.stdout


SECRET = "the launch code is 0451"
DEMO = str(DEMO_SERVER)


async def test_what_an_mcp_server_prints_about_its_arguments_stays_out_of_the_info_log(caplog):
    """Issue 21 (review of logging): an MCP server's stderr, quoting a tool's arguments, reached the
    INFO log (what ``-v`` turns on)."""
    # what -v turns on is INFO: an MCP server's stderr (here it quotes the tool's arguments)
    # is caught at DEBUG too, so that the test can wait for the line to have arrived
    caplog.set_level(logging.DEBUG, "trio_agent")
    script = [
        scripted_response("r1", [call("echo", "c1", {"text": SECRET})]),
        scripted_response("r2", "done"),
    ]
    async with MCPServerStdio(sys.executable, [DEMO]) as server:
        agent = Agent(model=ScriptedModel(script), tool_sources=[server])
        result = await agent.prompt("go")
        await wait_until(lambda: any(SECRET in r.getMessage() for r in caplog.records))
    assert result.end.reason == "completed"
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not [line for line in info if SECRET in line]


def test_v_before_the_command_is_accepted():
    """Issue 21 (review of logging): ``trio-agent -v demo`` (the flag before the command) was
    refused."""
    from trio_agent.cli import main

    try:
        code = main(["-v", "demo"])
    except SystemExit as exc:
        code = exc.code
    assert code == 0


def test_verbose_twice_adds_one_handler():
    """Issue 21 (review of logging): each ``-v`` setup (``main`` run twice in one process) added
    another handler, so every line was logged twice."""
    from trio_agent.cli import _verbose

    root = logging.getLogger("trio_agent")
    before = list(root.handlers)
    try:
        _verbose(1)
        _verbose(1)
        added = [h for h in root.handlers if h not in before]
        assert len(added) <= 1, added
    finally:
        root.handlers[:] = before
        root.setLevel(logging.NOTSET)
