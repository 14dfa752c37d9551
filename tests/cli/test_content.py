"""The CLI with richer content (issue 15): an image a tool read reaches the
provider, a refusal ends the turn saying so (exit 1), and ``show`` prints
media, thinking and the turn's end."""

from __future__ import annotations

import base64
import sys

from cli_runner import call_stream, cli, command
from loopback import Reply
from make_fixtures import openai_chunk

from trio_agent import (
    Agent,
    ImageBlock,
    JsonlStore,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    UserMessage,
)
from trio_agent.testing import ScriptedModel, scripted_response

PNG = b"\x89PNG\r\n\x1a\n" + b"\x01" * 40


def refusal_stream(*pieces: str) -> bytes:
    return (
        "".join(openai_chunk({"content": None, "refusal": p}) for p in pieces)
        + openai_chunk({}, "stop")
        + "data: [DONE]\n\n"
    ).encode()


async def test_a_tool_image_reaches_the_model_and_a_refusal_exits_1(loopback, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "chart.png").write_bytes(PNG)
    ledger = tmp_path / "s1.jsonl"
    loopback.replies += [
        Reply(body=call_stream("call_1", "read_image", {"path": "chart.png"}), piece=40),
        Reply(body=refusal_stream("I can't ", "describe that."), piece=40),
    ]
    done = await cli(command(loopback, workspace, "run", "--ledger", str(ledger), "describe it"))
    assert done.returncode == 1, done.stderr
    out = done.stdout.decode()
    assert f"[ok] chart.png: image/png, {len(PNG)} bytes [image image/png {len(PNG)} bytes]" in out
    assert "[turn 1 refusal: the model declined to answer; 2 step(s)" in out
    messages = loopback.requests[1].json()["messages"]
    image_parts = [
        part
        for message in messages
        if message["role"] == "user" and isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]
    assert image_parts == [
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
        }
    ]

    shown = await cli([sys.executable, "-m", "trio_agent", "show", str(ledger)])
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    assert f"result [ok] chart.png: image/png, {len(PNG)} bytes [image image/png" in text
    assert "== turn 1 ended: refusal: the model declined to answer" in text


async def test_show_prints_user_media_and_thinking(tmp_path):
    store = JsonlStore(tmp_path)
    script = [
        scripted_response(
            "r1",
            [
                ThinkingBlock("Is it a cat?", "c2lnbmF0dXJl"),
                RedactedThinkingBlock("x" * 12),
                TextBlock("A cat."),
            ],
        )
    ]
    async with Agent(model=ScriptedModel(script), store=store, session_id="s1") as agent:
        url = "https://example.com/cat.jpg"
        await agent.prompt(
            UserMessage("u1", (TextBlock("what is it?"), ImageBlock("image/jpeg", url=url)))
        )
    shown = await cli([sys.executable, "-m", "trio_agent", "show", str(tmp_path / "s1.jsonl")])
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    assert "user: what is it? [image image/jpeg https://example.com/cat.jpg]" in text
    assert "thinking, signed: Is it a cat?" in text
    assert "thinking (redacted, 12 characters)" in text
    assert "assistant: A cat." in text
