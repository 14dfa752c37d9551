"""Streamed responses of the three wires (OpenAI chat completions, the Responses
API, Anthropic messages) for the loopback server, and readers of what a request
sent back. Shared by the provider tests: ``from wire_builders import ChatWire``.

Each wire is a class of static methods with the same names:

- ``model(loopback, **options)``: the adapter, pointed at the loopback server;
- ``call(call_id, name, arguments)``: a response that is one tool call, its JSON
  ``arguments`` streamed in pieces;
- ``text(text)``: a response that is text, one delta per piece (a ``str`` is one
  piece, a list of strings is those pieces);
- ``sent(body)``: the one tool call and its result a request carried back;
- ``results(body)``: every tool result a request carried, as ``(text, is_error)``
  (``is_error`` None where the wire has no flag);
- ``texts(body, role)``: the text of every message of ``role`` ("user",
  "assistant") a request carried, in order (messages with no text left out);
- ``field`` / ``expected(output)``: where and how a request asks for a native
  typed answer (``ModelRequest.output``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from trio_agent.model import OutputFormat
from trio_agent.providers import AnthropicModel, OpenAIChatModel, OpenAIResponsesModel

KEY = "sk-test-SECRET-0123456789"


def sse(events: list[dict[str, Any]], named: bool = False) -> bytes:
    """Server-sent events, one ``data:`` line each (and an ``event:`` line, named)."""
    out = []
    for event in events:
        head = b"event: %s\n" % event["type"].encode() if named else b""
        out.append(head + b"data: " + json.dumps(event).encode() + b"\n\n")
    return b"".join(out)


def pieces(text: str, count: int = 8) -> list[str]:
    """``text`` cut in at most ``count`` pieces of about the same size ([""] if empty)."""
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _pieces_of(text: str | Sequence[str]) -> list[str]:
    return [text] if type(text) is str else list(text)


def _joined(content: Any, key: str = "text") -> str:
    """A content that is a string, or a list of text parts, as one string."""
    if type(content) is list:
        return "".join(part.get(key, "") for part in content)
    return content


def _choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class _Wire:
    """What the three wires share: the adapter, pointed at the loopback server."""

    adapter: Any
    path = "/v1"  # the base URL's path after the server's address

    @classmethod
    def model(cls, loopback: Any, **options: Any) -> Any:
        return cls.adapter("m", api_key=KEY, base_url=f"{loopback.url}{cls.path}", **options)


class ChatWire(_Wire):
    """OpenAI chat completions (``OpenAIChatModel``)."""

    name = "openai"
    field = "response_format"
    adapter = OpenAIChatModel

    @staticmethod
    def call(call_id: str, name: str, arguments: str) -> bytes:
        first, *rest = pieces(arguments)
        start = {"index": 0, "id": call_id, "type": "function"}
        start["function"] = {"name": name, "arguments": first}
        events = [_choice({"role": "assistant", "tool_calls": [start]})]
        events += [
            _choice({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in rest
        ]
        return sse([*events, _choice({}, "tool_calls")]) + b"data: [DONE]\n\n"

    @staticmethod
    def text(text: str | Sequence[str]) -> bytes:
        events = [_choice({"role": "assistant", "content": ""})]
        events += [_choice({"content": piece}) for piece in _pieces_of(text)]
        return sse([*events, _choice({}, "stop")]) + b"data: [DONE]\n\n"

    @staticmethod
    def sent(body: dict[str, Any]) -> tuple[dict[str, Any], str, bool | None]:
        """The call's arguments, and the result's text and error flag (None: the
        wire has none), that a request sent back."""
        (assistant,) = [m for m in body["messages"] if m.get("tool_calls")]
        (result,) = [m for m in body["messages"] if m["role"] == "tool"]
        arguments = json.loads(assistant["tool_calls"][0]["function"]["arguments"])
        return arguments, _joined(result["content"]), None  # chat has no error flag

    @staticmethod
    def results(body: dict[str, Any]) -> list[tuple[str, bool | None]]:
        return [(_joined(m["content"]), None) for m in body["messages"] if m["role"] == "tool"]

    @staticmethod
    def texts(body: dict[str, Any], role: str) -> list[str]:
        return [
            _joined(m["content"]) for m in body["messages"] if m["role"] == role and m["content"]
        ]

    @staticmethod
    def expected(output: OutputFormat) -> Any:
        schema = {"name": output.name, "schema": output.schema, "strict": output.strict}
        return {"type": "json_schema", "json_schema": schema}


class ResponsesWire(_Wire):
    """The OpenAI Responses API (``OpenAIResponsesModel``)."""

    name = "responses"
    field = "text"
    adapter = OpenAIResponsesModel

    @staticmethod
    def call(call_id: str, name: str, arguments: str) -> bytes:
        item = {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": name}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "arguments": ""},
            },
        ]
        events += [
            {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": p}
            for p in pieces(arguments)
        ]
        events += [
            {
                "type": "response.function_call_arguments.done",
                "output_index": 0,
                "arguments": arguments,
            },
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": {**item, "arguments": arguments},
            },
            {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
        ]
        return sse(events, named=True)

    @staticmethod
    def text(text: str | Sequence[str]) -> bytes:
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {"id": "resp_2", "status": "in_progress"}}
        ]
        events += [
            {"type": "response.output_text.delta", "output_index": 0, "delta": piece}
            for piece in _pieces_of(text)
        ]
        events.append(
            {"type": "response.completed", "response": {"id": "resp_2", "status": "completed"}}
        )
        return sse(events, named=True)

    @staticmethod
    def sent(body: dict[str, Any]) -> tuple[dict[str, Any], str, bool | None]:
        (call,) = [i for i in body["input"] if i.get("type") == "function_call"]
        (result,) = [i for i in body["input"] if i.get("type") == "function_call_output"]
        return json.loads(call["arguments"]), _joined(result["output"]), None  # no flag either

    @staticmethod
    def results(body: dict[str, Any]) -> list[tuple[str, bool | None]]:
        return [
            (_joined(item["output"]), None)
            for item in body["input"]
            if item.get("type") == "function_call_output"
        ]

    @staticmethod
    def texts(body: dict[str, Any], role: str) -> list[str]:
        return [_joined(item["content"]) for item in body["input"] if item.get("role") == role]

    @staticmethod
    def expected(output: OutputFormat) -> Any:
        return {
            "format": {
                "type": "json_schema",
                "name": output.name,
                "schema": output.schema,
                "strict": output.strict,
            }
        }


class AnthropicWire(_Wire):
    """Anthropic messages (``AnthropicModel``)."""

    name = "anthropic"
    field = "output_config"
    adapter = AnthropicModel
    path = ""

    @staticmethod
    def call(call_id: str, name: str, arguments: str) -> bytes:
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": {"id": "msg", "usage": {"input_tokens": 9}}},
            {"type": "content_block_start", "index": 0, "content_block": block},
        ]
        events += [
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in pieces(arguments)
        ]
        events += [
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
            {"type": "message_stop"},
        ]
        return sse(events, named=True)

    @staticmethod
    def text(text: str | Sequence[str]) -> bytes:
        start = {"type": "text", "text": ""}
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": {"id": "msg2", "usage": {"input_tokens": 9}}},
            {"type": "content_block_start", "index": 0, "content_block": start},
        ]
        events += [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
            for p in _pieces_of(text)
        ]
        events += [
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
            {"type": "message_stop"},
        ]
        return sse(events, named=True)

    @staticmethod
    def _blocks(body: dict[str, Any], role: str) -> list[dict[str, Any]]:
        return [
            block
            for m in body["messages"]
            if m["role"] == role and type(m["content"]) is list
            for block in m["content"]
        ]

    @staticmethod
    def sent(body: dict[str, Any]) -> tuple[dict[str, Any], str, bool | None]:
        (use,) = [b for b in AnthropicWire._blocks(body, "assistant") if b["type"] == "tool_use"]
        ((content, is_error),) = AnthropicWire.results(body)
        return use["input"], content, is_error

    @staticmethod
    def results(body: dict[str, Any]) -> list[tuple[str, bool | None]]:
        return [
            (_joined(b["content"]), b.get("is_error", False))
            for b in AnthropicWire._blocks(body, "user")
            if b["type"] == "tool_result"
        ]

    @staticmethod
    def texts(body: dict[str, Any], role: str) -> list[str]:
        texts = []
        for m in body["messages"]:
            content = m["content"]
            if m["role"] != role:
                continue
            if type(content) is list:
                parts = [b["text"] for b in content if b["type"] == "text"]
                if not parts:
                    continue  # only tool calls or tool results
                content = "".join(parts)
            texts.append(content)
        return texts

    @staticmethod
    def expected(output: OutputFormat) -> Any:
        return {"format": {"type": "json_schema", "schema": output.schema}}


ALL_WIRES = (ChatWire, AnthropicWire, ResponsesWire)


def wires(*chosen: type) -> Any:
    """``@pytest.mark.parametrize("wire", ...)`` over ``chosen`` (all three if none),
    each test id the wire's ``name``."""
    return pytest.mark.parametrize("wire", chosen or ALL_WIRES, ids=lambda w: w.name)
