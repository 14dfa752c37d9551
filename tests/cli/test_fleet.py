"""``trio-agent worker``, ``submit`` and ``show --dsn``: real subprocesses, a real
PostgreSQL cluster, a loopback provider server."""

from __future__ import annotations

import signal
import subprocess
import uuid

import pytest
import trio
import trio.testing
from cli_runner import ENV, TRIO_AGENT, call_stream, cli, command, text_stream
from loopback import Reply
from waiting import wait_until

pytest.importorskip("psycopg")


def _worker(loopback, pg_cluster, workspace, schema, *extra):
    options = ("--dsn", pg_cluster.dsn, "--schema", schema, *extra)
    return subprocess.Popen(
        command(loopback, workspace, "worker", *options),
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _agent_worker(options, env, cwd):
    return subprocess.Popen(
        [*TRIO_AGENT, "worker", *options],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def _stopped(process) -> tuple[int, str]:
    with trio.fail_after(120):  # a hang guard: a draining worker process ends in seconds
        while process.poll() is None:  # noqa: ASYNC110 (a subprocess.Popen)
            await trio.sleep(0.05)
    return process.returncode, process.stderr.read().decode()


async def _started(process) -> None:
    line = await trio.to_thread.run_sync(process.stderr.readline)
    assert b"sessions at a time" in line, line


async def test_a_worker_answers_submitted_input_and_drains_on_sigterm(
    loopback, pg_cluster, tmp_path
):
    schema = f"cli_{uuid.uuid4().hex[:12]}"
    loopback.replies += [
        Reply(body=call_stream("call_1", "write_file", {"path": "a.txt", "content": "hi\n"})),
        Reply(body=text_stream("I wrote a.txt.")),
    ]
    worker = _worker(loopback, pg_cluster, tmp_path, schema, "--concurrency", "2")
    try:
        await _started(worker)
        base = [*TRIO_AGENT, "submit", "--dsn", pg_cluster.dsn, "--schema", schema]
        done = await cli([*base, "--create", "--wait", "s1", "write a.txt"])
        assert done.returncode == 0, done.stderr
        number, answer = done.stdout.decode().splitlines()
        assert int(number) >= 1 and answer == "I wrote a.txt."
        assert (tmp_path / "s1" / "a.txt").read_text() == "hi\n"  # the session's own directory
        shown = await cli([*TRIO_AGENT, "show", "--dsn", pg_cluster.dsn, "--schema", schema, "s1"])
        assert shown.returncode == 0, shown.stderr
        text = shown.stdout.decode()
        assert "session s1: 1 turn(s), 2 request(s)" in text
        assert "user: write a.txt" in text and "== turn 1 ended: completed" in text
        assert "closed cleanly by its last writer" in text  # the inbox was empty: let go
        refused = await cli([*base, "ghost", "hello"])
        assert refused.returncode == 2 and b"no session 'ghost'" in refused.stderr
    finally:
        worker.send_signal(signal.SIGTERM)
        code, stderr = await _stopped(worker)
        worker.stdout.close()
        worker.stderr.close()
    assert code == 0, stderr
    assert "draining" in stderr and "stopped after 1 turn(s)" in stderr


async def test_sigterm_lets_the_turn_under_way_finish(loopback, pg_cluster, tmp_path):
    schema = f"cli_{uuid.uuid4().hex[:12]}"
    loopback.replies.append(Reply(body=text_stream("slow ", "answer"), piece=100, pause=0.3))
    worker = _worker(loopback, pg_cluster, tmp_path, schema)
    try:
        await _started(worker)
        base = [*TRIO_AGENT, "submit", "--dsn", pg_cluster.dsn, "--schema", schema]
        done = await cli([*base, "--create", "s1", "hello"])
        assert done.returncode == 0, done.stderr
        await wait_until(lambda: loopback.requests)
        worker.send_signal(signal.SIGTERM)  # mid-answer
        code, stderr = await _stopped(worker)
        worker.stdout.close()
        worker.stderr.close()
    finally:
        if worker.poll() is None:
            worker.kill()
    assert code == 0 and "stopped after 1 turn(s)" in stderr, stderr
    queued = await cli([*base, "s1", "again"])  # queued, for a later worker
    assert queued.returncode == 0
    shown = await cli([*TRIO_AGENT, "show", "--dsn", pg_cluster.dsn, "--schema", schema, "s1"])
    assert "slow answer" in shown.stdout.decode() and "1 turn(s)" in shown.stdout.decode()


async def test_fleet_commands_refuse_bad_usage(tmp_path):
    missing = await cli([*TRIO_AGENT, "worker", "--provider", "openai", "--model", "m"])
    assert missing.returncode == 2 and b"--dsn" in missing.stderr
    bad = await cli(
        [*TRIO_AGENT, "submit", "--dsn", "host=/nonexistent", "s", "m", "--schema", "X"]
    )
    assert bad.returncode == 2 and b"schema must be a lower-case SQL name" in bad.stderr
    drain = await cli(
        [*TRIO_AGENT, "worker", "--dsn", "x", "--drain-seconds", "-1", "--provider", "openai"]
    )
    assert drain.returncode == 2 and b"number of seconds" in drain.stderr


async def test_show_with_a_mistyped_schema_makes_nothing(pg_cluster):
    """Issue 22 (review of the fleet): ``show --dsn --schema`` with a mistyped schema created that
    schema; it says there is none and makes nothing."""
    from cli_runner import TRIO_AGENT, cli

    shown = await cli([*TRIO_AGENT, "show", "--dsn", pg_cluster.dsn, "--schema", "typo_x", "s"])
    assert shown.returncode == 1 and b"no trio-agent schema 'typo_x'" in shown.stderr
    import psycopg

    with psycopg.connect(pg_cluster.dsn) as connection:
        (made,) = connection.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'typo_x'"
        ).fetchone()
    assert made == 0


async def test_a_worker_runs_your_agent_for_each_session_and_records_it(
    loopback, pg_cluster, tmp_path
):
    """Issue 35 (item 4): ``worker`` ran only the workspace tools. With ``--agent
    app:agent`` the Agent is the template of each session it takes (its model and
    tools, no workspace tool, no --workspace needed), and a new session records
    the ``MODULE:NAME``; a flag that would make what the agent has is refused."""
    (tmp_path / "app.py").write_text(
        "import os\n"
        "from trio_agent import Agent, tool\n"
        "from trio_agent.providers.openai import OpenAIChatModel\n\n"
        "@tool\n"
        "async def shout(text: str) -> str:\n"
        '    """Shout the text."""\n'
        "    return text.upper()\n\n"
        "agent = Agent(model=OpenAIChatModel('app-model', api_key='sk-app', "
        "base_url=os.environ['APP_BASE_URL']), tools=[shout], metadata={'app': 'demo'})\n"
    )
    env = {**ENV, "APP_BASE_URL": f"{loopback.url}/v1"}
    schema = f"cli_{uuid.uuid4().hex[:12]}"
    database = ("--dsn", pg_cluster.dsn, "--schema", schema)
    refused = await cli(
        [*TRIO_AGENT, "worker", *database, "--agent", "app:agent", "--workspace", "."],
        env=env,
        cwd=tmp_path,
    )
    assert refused.returncode == 2 and b"--workspace cannot be used beside it" in refused.stderr
    loopback.replies += [
        Reply(body=call_stream("call_1", "shout", {"text": "hi"})),
        Reply(body=text_stream("I shouted HI.")),
    ]
    worker = _agent_worker([*database, "--agent", "app:agent"], env, tmp_path)
    try:
        await _started(worker)
        base = [*TRIO_AGENT, "submit", *database]
        done = await cli([*base, "--create", "--wait", "s1", "shout hi"])
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode().splitlines()[1] == "I shouted HI."
        assert {t["function"]["name"] for t in loopback.requests[0].json()["tools"]} == {"shout"}
        shown = await cli([*TRIO_AGENT, "show", *database, "s1"])
        text = shown.stdout.decode()
        assert "  agent: app:agent\n" in text and 'metadata: {"app":"demo"}' in text
    finally:
        worker.send_signal(signal.SIGTERM)
        code, stderr = await _stopped(worker)
        worker.stdout.close()
        worker.stderr.close()
    assert code == 0, stderr
