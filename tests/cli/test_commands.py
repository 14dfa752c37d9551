"""The trio-agent command line, run as a real subprocess against a loopback
provider server (issue 8); the runner is tests/support/cli_runner.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import msgspec
import trio
from cli_runner import ENV, RecordLine, call_stream, cli, command, event_lines, text_stream
from loopback import Reply

from trio_agent.ledger import derive
from trio_agent.stores import parse_jsonl


async def test_run_then_show_a_real_session(loopback, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ledger = tmp_path / "sessions" / "s1.jsonl"
    loopback.replies += [
        Reply(
            body=call_stream(
                "call_1", "write_file", {"path": "hello.txt", "content": "hi there\n"}
            ),
            piece=40,
        ),
        Reply(body=text_stream("I wrote ", "hello.txt."), piece=40),
    ]
    done = await cli(
        command(
            loopback,
            workspace,
            "run",
            "--approve",
            "auto",
            "--ledger",
            str(ledger),
            "write a greeting file",
        )
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert '-> write_file({"path":"hello.txt","content":"hi there\\n"})' in out
    assert "[ok] wrote 9 bytes to hello.txt" in out
    assert "I wrote hello.txt." in out and "[turn 1 completed; 2 step(s)" in out
    assert (workspace / "hello.txt").read_text() == "hi there\n"

    shown = await cli([sys.executable, "-m", "trio_agent", "show", str(ledger)])
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    assert "session s1: 1 turn(s), 2 request(s)" in text
    assert "user: write a greeting file" in text
    assert "call write_file(" in text and "result [ok] wrote 9 bytes" in text
    assert "== turn 1 ended: completed" in text and "usage: 82 input / 17 output" in text
    assert "closed cleanly by its last writer" in text

    records = await cli([sys.executable, "-m", "trio_agent", "show", "--json", str(ledger)])
    lines = records.stdout.splitlines()
    kinds = [msgspec.json.decode(line, type=RecordLine).record.kind for line in lines]
    assert kinds[0] == "session/start" and kinds[-2:] == ["turn/end", "session/closed"]
    assert all(json.loads(line)["schema"] == 1 for line in lines)


async def test_json_events_decode(loopback, tmp_path):
    loopback.replies.append(Reply(body=text_stream("hello")))
    done = await cli(command(loopback, tmp_path, "run", "--json", "say hello"))
    assert done.returncode == 0, done.stderr
    events = event_lines(done.stdout)
    assert events[0].type == "turn.started" and events[-1].type == "turn.finished"
    assert [e.sequence for e in events] == list(range(len(events)))


async def test_ctrl_c_cancels_cleanly_leaves_a_valid_ledger_and_exits_130(loopback, tmp_path):
    ledger = tmp_path / "s2.jsonl"
    body = text_stream("thinking", " very", " hard", " and more")
    loopback.replies.append(Reply(body=body, hang_after=body.index(b" very")))
    process = await trio.lowlevel.open_process(
        command(loopback, tmp_path, "run", "--ledger", str(ledger), "think"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    seen = b""
    with trio.fail_after(120):  # a hang guard: a CLI process takes seconds on a loaded machine
        while b"thinking" not in seen:
            seen += await process.stdout.receive_some()
        process.send_signal(signal.SIGINT)
        while chunk := await process.stdout.receive_some():
            seen += chunk
        code = await process.wait()
    await process.stdout.aclose()
    await process.stderr.aclose()
    assert code == 130
    assert b"interrupted: the turn was cancelled" in seen
    loaded = parse_jsonl("s2", ledger.read_bytes())
    assert loaded.warnings == ()
    assert derive(loaded.records).closed  # Ctrl-C still closes the session cleanly
    assert loaded.records[-2].kind == "turn/end"
    assert loaded.records[-2].end.reason == "cancelled"

    # and the session resumes
    loopback.replies.append(Reply(body=text_stream("done now")))
    resumed = await cli(
        [
            sys.executable,
            "-m",
            "trio_agent",
            "resume",
            str(ledger),
            "--provider",
            "openai",
            "--model",
            "gpt-4o-mini",
            "--workspace",
            str(tmp_path),
            "--base-url",
            f"{loopback.url}/v1",
            "--message",
            "go on",
        ]
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "done now" in resumed.stdout.decode()


async def test_bad_usage_is_a_clear_error(tmp_path):
    done = await cli([sys.executable, "-m", "trio_agent", "show", str(tmp_path / "nope.txt")])
    assert done.returncode != 0
    missing = await cli(
        [
            sys.executable,
            "-m",
            "trio_agent",
            "run",
            "--provider",
            "openai",
            "--model",
            "m",
            "--workspace",
            str(tmp_path / "missing"),
            "task",
        ]
    )
    assert missing.returncode == 2 and b"not a directory" in missing.stderr


async def test_show_tells_a_crashed_session_and_one_being_written_from_a_closed_one(tmp_path):
    import shutil

    from trio_agent import Agent, JsonlStore, UserMessage
    from trio_agent.testing import ScriptedModel, scripted_response

    store = JsonlStore(tmp_path)
    agent = Agent(
        model=ScriptedModel([scripted_response("r1", "hi", hang_at=0)]),
        store=store,
        session_id="live",
    )
    shown = {}
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            if event.type == "message.accepted":  # the stream hangs: a crash image now
                shutil.copy(store.path("live"), tmp_path / "crashed.jsonl")
                for name in ("live", "crashed"):
                    done = await cli(
                        [
                            sys.executable,
                            "-m",
                            "trio_agent",
                            "show",
                            str(tmp_path / f"{name}.jsonl"),
                        ]
                    )
                    shown[name] = done.stdout.decode()
                run.cancel()
    await agent.aclose()
    assert f"open: process {os.getpid()} on " in shown["live"]
    assert "not closed: its last writer crashed or was killed (in a turn)" in shown["crashed"]
