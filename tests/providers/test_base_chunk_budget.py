"""A long answer streamed one small delta per read stays within
``MAX_STEP_CHUNKS`` (issue 15): past three quarters of the budget an adapter
merges the next deltas of one kind before handing them out, so a long
thinking or text stream never fails the step for its chunk count."""

from __future__ import annotations

import json

from loopback import Reply
from make_fixtures import openai_chunk
from paths import WIRE

from trio_agent import (
    MAX_STEP_CHUNKS,
    Completed,
    ModelChunk,
    ModelRequest,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolRegistry,
    UserMessage,
    run_agent_loop,
)
from trio_agent.providers import AnthropicModel, OpenAIChatModel

DELTAS = 1300  # more than MAX_STEP_CHUNKS: one per read, they would fail the step


def one_by_one(events: list[str], piece: int | None = None) -> Reply:
    """The events as the server sends them: each delta in its own write (``piece``
    bytes, by default the second event's size), a pause apart, so the client
    reads them one at a time."""
    body = "".join(events).encode()
    return Reply(body=body, piece=piece or len(events[1].encode()), pause=0.0008)


async def run(model) -> tuple[list, Completed]:
    events = []
    async with run_agent_loop(
        messages=[UserMessage("u1", "Write a long essay.")],
        model=model,
        tools=ToolRegistry([]),
        max_steps=1,
    ) as agent_run:
        async for event in agent_run:
            events.append(event)
    result = agent_run.result
    assert isinstance(result, Completed), result
    return [e.chunk for e in events if isinstance(e, ModelChunk)], result


async def test_a_long_text_one_delta_per_read_stays_within_the_chunk_budget(loopback):
    pieces = [f"w{i:05d} " for i in range(DELTAS)]
    events = [openai_chunk({"role": "assistant", "content": ""})]
    events += [openai_chunk({"content": piece}) for piece in pieces]
    events += [openai_chunk({}, "stop"), "data: [DONE]\n\n"]
    loopback.replies.append(one_by_one(events))
    model = OpenAIChatModel("gpt-4o-mini", api_key="k", base_url=f"{loopback.url}/v1")
    chunks, result = await run(model)
    assert result.final_text == "".join(pieces)
    assert len(chunks) <= MAX_STEP_CHUNKS
    assert len(chunks) >= MAX_STEP_CHUNKS * 3 // 4  # they did come one per read
    assert all(type(c) is TextDelta for c in chunks)


def anthropic_event(body: dict) -> str:
    return f"event: {body['type']}\ndata: {json.dumps(body, separators=(',', ':'))}\n\n"


async def test_long_thinking_one_delta_per_read_stays_within_the_chunk_budget(loopback):
    pieces = [f"t{i:05d} " for i in range(DELTAS)]
    start = {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 9}}}
    events = [
        anthropic_event(start),
        anthropic_event(
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}}
        ),
    ]
    events += [
        anthropic_event(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": piece},
            }
        )
        for piece in pieces
    ]
    events += [
        anthropic_event(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM"},
            }
        ),
        anthropic_event({"type": "content_block_stop", "index": 0}),
        anthropic_event(
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": "Done."},
            }
        ),
        anthropic_event({"type": "content_block_stop", "index": 1}),
        anthropic_event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 5},
            }
        ),
        anthropic_event({"type": "message_stop"}),
    ]
    loopback.replies.append(one_by_one(events))
    model = AnthropicModel("claude-sonnet-4-5", api_key="k", base_url=loopback.url)
    chunks, result = await run(model)
    assert result.final_text == "Done."
    assert result.messages[-1].content[0] == ThinkingBlock("".join(pieces), "EqQBCgIYAhIM")
    assert MAX_STEP_CHUNKS * 3 // 4 <= len(chunks) <= MAX_STEP_CHUNKS
    assert sum(type(c) is ThinkingDelta for c in chunks) == len(chunks) - 1


async def test_a_long_responses_answer_one_delta_per_read_stays_within_the_budget(loopback):

    from trio_agent.providers import OpenAIResponsesModel

    # the recorded answer, with its seven text deltas replaced by DELTAS of our own
    recorded = (WIRE / "responses_text.sse").read_text()
    events = [e + "\n\n" for e in recorded.strip().split("\n\n")]
    first = next(i for i, e in enumerate(events) if "response.output_text.delta" in e)
    template = events[first]
    pieces = [f"w{i:05d} " for i in range(DELTAS)]
    deltas = [template.replace('"delta":"The"', f'"delta":"{piece}"') for piece in pieces]
    rest = [e for e in events[first:] if "response.output_text.delta" not in e]
    text = "".join(pieces)
    rest = [e.replace("The capital of France is Paris.", text) for e in rest]
    loopback.replies.append(one_by_one(events[:first] + deltas + rest, len(deltas[0].encode())))
    model = OpenAIResponsesModel("gpt-4o", api_key="k", base_url=f"{loopback.url}/v1")
    chunks, result = await run(model)
    assert result.final_text == text
    assert MAX_STEP_CHUNKS * 3 // 4 <= len(chunks) <= MAX_STEP_CHUNKS


async def test_past_the_soft_limit_text_still_streams_in_small_pieces(loopback):
    # The second review found a held delta waiting for 16 KiB: the last quarter
    # of an answer arrived as one chunk at the end. Text now waits for 512
    # characters at most, so it keeps streaming.
    pieces = [f"w{i:05d} " for i in range(DELTAS)]
    events = [openai_chunk({"role": "assistant", "content": ""})]
    events += [openai_chunk({"content": piece}) for piece in pieces]
    events += [openai_chunk({}, "stop"), "data: [DONE]\n\n"]
    loopback.replies.append(one_by_one(events))
    model = OpenAIChatModel("gpt-4o-mini", api_key="k", base_url=f"{loopback.url}/v1")
    chunks, result = await run(model)
    late = chunks[MAX_STEP_CHUNKS * 3 // 4 :]
    assert "".join(c.text for c in chunks) == "".join(pieces)
    assert max(len(c.text) for c in late) <= 512 + len(pieces[0])
    assert len(late) >= sum(map(len, pieces[MAX_STEP_CHUNKS * 3 // 4 :])) // 520


async def test_cancelling_a_read_while_deltas_are_held_loses_nothing(loopback, monkeypatch):
    # The second review found merged pieces dropped when a consumer's timeout
    # cancelled the read they were waiting on.
    import trio

    from trio_agent.providers import _base

    monkeypatch.setattr(_base, "_SOFT_CHUNKS", 0)  # merge from the first chunk
    pieces = ["ab", "cd", "ef"]
    events = [openai_chunk({"content": piece}) for piece in pieces]
    events += [openai_chunk({}, "stop"), "data: [DONE]\n\n"]
    body = "".join(events).encode()
    loopback.replies.append(Reply(body=body, piece=len(events[0].encode()), pause=0.05))
    model = OpenAIChatModel("gpt-4o-mini", api_key="k", base_url=f"{loopback.url}/v1")
    request = ModelRequest("request-001", (UserMessage("u1", "go"),), ())
    got: list[str] = []
    async with model.stream(request) as stream:
        iterator = stream.__aiter__()
        while True:
            with trio.move_on_after(0.02):  # shorter than the server's pause
                try:
                    chunk = await iterator.__anext__()
                except StopAsyncIteration:
                    break
                got.append(chunk.text)
        response = await stream.response()
    assert "".join(got) == "abcdef" == response.content[0].text
