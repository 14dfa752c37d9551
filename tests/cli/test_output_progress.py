"""The command line shows a running command's output as it comes (issue 14, item
16): ``trio-agent run`` as a real subprocess, against a loopback OpenAI-compatible
server whose model calls the workspace's ``run`` tool."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import trio
from loopback import Reply
from make_fixtures import USAGE, openai_chunk

WAIT = 120  # seconds: only a failing test waits this long (each CLI process takes seconds, loaded)

ENV = {**os.environ, "OPENAI_API_KEY": "sk-test-cli-progress"}


def call_stream(call_id: str, name: str, arguments: dict) -> bytes:
    """An OpenAI chat stream whose assistant message is one tool call."""
    start = {
        "tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": {"name": name}}]
    }
    args = {"tool_calls": [{"index": 0, "function": {"arguments": json.dumps(arguments)}}]}
    return (
        openai_chunk({"role": "assistant", "content": None})
        + openai_chunk(start)
        + openai_chunk(args)
        + openai_chunk({}, "tool_calls")
        + openai_chunk(usage=USAGE, choices=False)
        + "data: [DONE]\n\n"
    ).encode()


def text_stream(text: str) -> bytes:
    return (
        openai_chunk({"content": text}) + openai_chunk({}, "stop") + "data: [DONE]\n\n"
    ).encode()


async def test_run_prints_a_commands_output_lines_before_the_command_ends(loopback, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    go = workspace / "go"
    # The shell computes the marker, so the echoed call arguments never contain it;
    # then the command waits until the test has seen the marker's line.
    command = "echo started-$((6 * 7)); while [ ! -e go ]; do sleep 0.01; done; echo finished"
    loopback.replies += [
        Reply(body=call_stream("call_1", "run", {"command": command})),
        Reply(body=text_stream("It ran.")),
    ]
    process = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "trio_agent",
            "run",
            "--approve",
            "auto",
            "--provider",
            "openai",
            "--base-url",
            f"{loopback.url}/v1",
            "--model",
            "m",
            "--workspace",
            str(workspace),
            "run the command",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    assert process.stdout is not None and process.stderr is not None
    out = b""
    errors = b""
    try:
        with trio.fail_after(WAIT):
            while b"... started-42\n" not in out:
                data = await process.stdout.receive_some()
                assert data, f"the CLI ended first: {out!r} {await process.stderr.receive_some()!r}"
                out += data
            # The line is printed while the command still waits for ``go``.
            assert not go.exists() and b"finished" not in out and process.poll() is None
            go.touch()
            while data := await process.stdout.receive_some():
                out += data
            while data := await process.stderr.receive_some():
                errors += data
            code = await process.wait()
    finally:
        go.touch()  # a failed test leaves no command waiting for it
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
        await process.stdout.aclose()
        await process.stderr.aclose()
    text = out.decode()
    assert code == 0, (text, errors.decode())
    lines = text.splitlines()
    started = next(n for n, line in enumerate(lines) if line.startswith("-> run("))
    shown = lines.index("   ... started-42")
    finished = next(n for n, line in enumerate(lines) if line.startswith("   [ok] "))
    assert started < shown < finished
    assert lines[finished] == "   [ok] [exit code 0] started-42 finished"
    assert "It ran." in text and len(loopback.requests) == 2
