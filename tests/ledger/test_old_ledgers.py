"""Ledgers written before richer content (issue 15) load unchanged, derive the
same transcript, and resume into sessions that take images and thinking."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from paths import LEDGERS

from trio_agent import (
    Agent,
    AssistantMessage,
    ImageBlock,
    JsonlStore,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    TurnCompleted,
    TurnLength,
    UserMessage,
    validate_transcript,
)
from trio_agent.ledger import TurnEndRecord, derive
from trio_agent.stores import SqliteStore
from trio_agent.testing import ScriptedModel, scripted_response

OLD = LEDGERS
EXPECTED = [
    UserMessage("user-1", "What is 20 + 22?"),
    AssistantMessage("message-r1", (ToolCall("call-1", "add", {"left": 20, "right": 22}),)),
    ToolResultMessage("tool-result-call-1", "call-1", "add", "42"),
    AssistantMessage("message-r2", (TextBlock("The sum is 42."),)),
    UserMessage("user-2", "And in words?"),
    AssistantMessage("message-r3", (TextBlock("It is cut"),)),
]


def store_of(kind: str, tmp_path: Path):
    if kind == "jsonl":
        shutil.copy(OLD / "pre15.jsonl", tmp_path / "pre15.jsonl")
        return JsonlStore(tmp_path)
    shutil.copy(OLD / "pre15.db", tmp_path / "pre15.db")
    return SqliteStore(tmp_path / "pre15.db")


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_an_old_ledger_loads_and_goes_on_with_an_image_and_thinking(tmp_path, kind):
    store = store_of(kind, tmp_path)
    loaded = await store.load("pre15")
    assert loaded.warnings == ()
    derived = derive(loaded.records)
    assert derived.messages == EXPECTED
    assert derived.turns == 2
    ends = [r.end for r in loaded.records if type(r) is TurnEndRecord]
    assert ends == [TurnCompleted(), TurnLength()]
    png = ImageBlock("image/png", data=b"\x89PNG\r\n\x1a\n" + bytes(8))
    model = ScriptedModel(
        [scripted_response("r4", [ThinkingBlock("a chart", "sig"), TextBlock("A chart.")])]
    )
    agent = await Agent.resume(store, "pre15", model=model)
    async with agent:
        result = await agent.prompt(UserMessage("user-3", (TextBlock("And this?"), png)))
    assert result.final_text == "A chart."
    assert model.requests[0].messages[: len(EXPECTED)] == tuple(EXPECTED)
    again = derive((await store.load("pre15")).records)
    assert again.messages[: len(EXPECTED)] == EXPECTED
    assert again.messages[-2].content[1] == png
    assert again.messages[-1].content[0] == ThinkingBlock("a chart", "sig")
    validate_transcript(again.messages)
