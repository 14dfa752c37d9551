"""The ``trio-agent`` command line as a real subprocess, and the provider streams
the loopback server answers it with: what every command-line test uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Literal

import msgspec
import trio
from make_fixtures import USAGE, openai_chunk

from trio_agent import SessionEvent
from trio_agent.ledger import Record


class EventLine(msgspec.Struct, forbid_unknown_fields=True):
    """A line of demo/run/resume --json, as a consumer would declare it (schema 1)."""

    schema: Literal[1]
    event: SessionEvent


class RecordLine(msgspec.Struct, forbid_unknown_fields=True):
    """A line of show --json (schema 1)."""

    schema: Literal[1]
    record: Record


def event_lines(stdout: bytes) -> list[SessionEvent]:
    return [msgspec.json.decode(line, type=EventLine).event for line in stdout.splitlines()]


def call_stream(call_id: str, name: str, arguments: dict) -> bytes:
    start = {
        "tool_calls": [
            {
                "index": 0,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
        ]
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


def text_stream(*pieces: str) -> bytes:
    return (
        "".join(openai_chunk({"content": p}) for p in pieces)
        + openai_chunk({}, "stop")
        + "data: [DONE]\n\n"
    ).encode()


# Nothing from the caller's environment that would change what the CLI does.
BASE_ENV = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(("OPENAI_", "ANTHROPIC_")) and k != "TERM"
}


ENV = {**BASE_ENV, "OPENAI_API_KEY": "sk-test-cli"}


TRIO_AGENT = [sys.executable, "-m", "trio_agent"]


def command(loopback, workspace, *extra) -> list[str]:
    return [
        sys.executable,
        "-m",
        "trio_agent",
        *extra[:1],
        "--provider",
        "openai",
        "--model",
        "gpt-4o-mini",
        "--workspace",
        str(workspace),
        "--base-url",
        f"{loopback.url}/v1",
        *extra[1:],
    ]


async def cli(args: list[str], env=None, cwd=None) -> subprocess.CompletedProcess:
    return await trio.run_process(
        args,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=ENV if env is None else env,
        cwd=cwd,
    )
