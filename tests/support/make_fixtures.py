"""Writes the provider SSE fixtures (run once; the files are committed).

The streams follow the public API documentation of OpenAI Chat Completions
streaming (``data: {chat.completion.chunk}`` lines, ``data: [DONE]``) and of
Anthropic Messages streaming (``event:``/``data:`` pairs: message_start,
content_block_start/delta/stop, message_delta, message_stop, ping, error).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent / "fixtures" / "providers"


def openai_chunk(delta=None, finish=None, usage=None, choices=True):
    body = {
        "id": "chatcmpl-9f2a",
        "object": "chat.completion.chunk",
        "created": 1764400000,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_0ba0d124f1",
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}]
        if choices
        else [],
    }
    if usage is not None:
        body["usage"] = usage
    return "data: " + json.dumps(body, separators=(",", ":")) + "\n\n"


USAGE = {
    "prompt_tokens": 82,
    "completion_tokens": 17,
    "total_tokens": 99,
    "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0},
}


def openai_text():
    out = [openai_chunk({"role": "assistant", "content": "", "refusal": None})]
    for piece in ["The", " sum", " is", " 42", "."]:
        out.append(openai_chunk({"content": piece}))
    out.append(openai_chunk({}, "stop"))
    out.append(openai_chunk(usage=USAGE, choices=False))
    out.append("data: [DONE]\n\n")
    return "".join(out)


def openai_tools(interleaved=False, finish="tool_calls", cut=False):
    out = [openai_chunk({"role": "assistant", "content": None, "refusal": None})]
    calls = [
        ("call_Ab12", "add", '{"left": 20, "right": 22}'),
        ("call_Cd34", "get_weather", '{"city": "Hanoi", "units": "metric"}'),
    ]
    starts = [
        openai_chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": cid,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            }
        )
        for i, (cid, name, _) in enumerate(calls)
    ]
    pieces = [[args[j : j + 4] for j in range(0, len(args), 4)] for _, _, args in calls]
    if interleaved:
        out += starts
        for j in range(max(map(len, pieces))):
            for i, p in enumerate(pieces):
                if j < len(p):
                    out.append(
                        openai_chunk(
                            {"tool_calls": [{"index": i, "function": {"arguments": p[j]}}]}
                        )
                    )
    else:
        for i, p in enumerate(pieces):
            out.append(starts[i])
            for piece in p:
                out.append(
                    openai_chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                )
    if cut:
        out = out[:-3]
    out.append(openai_chunk({}, finish))
    out.append(openai_chunk(usage=USAGE, choices=False))
    out.append("data: [DONE]\n\n")
    return "".join(out)


def anthropic_event(name, body):
    return f"event: {name}\ndata: {json.dumps(body, separators=(',', ':'))}\n\n"


def anthropic_stream(blocks, stop_reason, cut_last_block=False):
    out = [
        anthropic_event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-sonnet-4-5",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": 472,
                        "output_tokens": 2,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 128,
                    },
                },
            },
        )
    ]
    out.append(anthropic_event("ping", {"type": "ping"}))
    for index, block in enumerate(blocks):
        if block[0] == "text":
            out.append(
                anthropic_event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            for piece in block[1]:
                out.append(
                    anthropic_event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                )
        else:
            _, call_id, name, args = block
            out.append(
                anthropic_event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {
                            "type": "tool_use",
                            "id": call_id,
                            "name": name,
                            "input": {},
                        },
                    },
                )
            )
            out.append(
                anthropic_event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": ""},
                    },
                )
            )
            for j in range(0, len(args), 5):
                out.append(
                    anthropic_event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": args[j : j + 5]},
                        },
                    )
                )
        if not (cut_last_block and index == len(blocks) - 1):
            out.append(
                anthropic_event(
                    "content_block_stop", {"type": "content_block_stop", "index": index}
                )
            )
    out.append(
        anthropic_event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 89},
            },
        )
    )
    out.append(anthropic_event("message_stop", {"type": "message_stop"}))
    return "".join(out)


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    files = {
        "openai_text.sse": openai_text(),
        "openai_tools.sse": openai_tools(),
        "openai_tools_interleaved.sse": openai_tools(interleaved=True),
        "openai_length_cut_call.sse": openai_tools(finish="length", cut=True),
        "openai_no_finish.sse": openai_text()
        .split('"finish_reason":"stop"')[0]
        .rsplit("data: ", 1)[0],
        "anthropic_text.sse": anthropic_stream(
            [("text", ["The", " sum", " is", " 42."])], "end_turn"
        ),
        "anthropic_tools.sse": anthropic_stream(
            [
                ("text", ["Let me", " check."]),
                ("tool_use", "toolu_01A09q90qw90lq917835lq9", "add", '{"left": 20, "right": 22}'),
                ("tool_use", "toolu_01B1", "get_weather", '{"city": "Hanoi", "units": "metric"}'),
            ],
            "tool_use",
        ),
        "anthropic_max_tokens_cut_call.sse": anthropic_stream(
            [
                ("text", ["Let me", " check."]),
                ("tool_use", "toolu_cut", "add", '{"left": 20, "ri'),
            ],
            "max_tokens",
            cut_last_block=True,
        ),
        "anthropic_overloaded.sse": anthropic_stream([("text", ["Hi"])], "end_turn").split(
            "event: content_block_delta"
        )[0]
        + anthropic_event(
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    }
    for name, text in files.items():
        (HERE / name).write_bytes(text.encode())


if __name__ == "__main__":
    main()
