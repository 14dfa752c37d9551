"""Message content on spans, only when asked: ``capture_content`` (set with
``trio_agent.telemetry.configure``, else the conventional environment variable
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).

Recorded as span events in the GenAI conventions' shapes (``gen_ai.input.messages``
and ``gen_ai.output.messages`` as JSON, parts by type). What the ledger keeps
of a message is what is recorded, with the bytes of images and documents
replaced by what they were (a type and a size): never a key or a header,
which the ledger never holds either.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Final

import msgspec

from ..messages._ir import (
    AssistantMessage,
    DocumentBlock,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from ..model import ModelRequest

__all__ = [
    "CAPTURE_CONTENT_VARIABLE",
    "ENVIRONMENT",
    "configure",
    "capturing",
    "record_answer",
    "record_request",
    "record_tool",
    "set_capture",
]

ENVIRONMENT: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ON: Final = frozenset({"true", "1", "yes", "on"})
_capture: bool | None = None  # None: the environment decides
_encode = msgspec.json.Encoder().encode


def set_capture(enabled: bool | None) -> None:
    global _capture
    _capture = enabled


def capturing() -> bool:
    """Whether content is recorded: the setting, else the environment variable."""
    if _capture is not None:
        return _capture
    return os.environ.get(ENVIRONMENT, "").strip().lower() in _ON


def _part(block: object) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "content": block.text}
    if isinstance(block, ToolCall):
        return {
            "type": "tool_call",
            "id": block.id,
            "name": block.name,
            "arguments": block.arguments,
        }
    if isinstance(block, ThinkingBlock):
        return {"type": "reasoning", "content": block.thinking}
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "reasoning", "content": "[redacted thinking]"}
    if isinstance(block, ImageBlock | DocumentBlock):
        kind = "image" if isinstance(block, ImageBlock) else "document"
        if block.data is not None:
            return {
                "type": kind,
                "mime_type": block.media_type,
                "content": f"[{len(block.data)} bytes]",
            }
        return {"type": kind, "mime_type": block.media_type, "uri": block.url}
    return {"type": type(block).__name__}


def _parts(content: str | Iterable[object]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    return [_part(block) for block in content]


def _message(message: Message) -> dict[str, Any]:
    if isinstance(message, ToolResultMessage):
        response = message.content if isinstance(message.content, str) else _parts(message.content)
        part = {"type": "tool_call_response", "id": message.tool_call_id, "response": response}
        return {"role": "tool", "parts": [part]}
    role = "user" if isinstance(message, UserMessage) else "assistant"
    return {"role": role, "parts": _parts(message.content)}


def record_request(span: Any, request: ModelRequest) -> None:
    attributes = {
        "gen_ai.input.messages": _encode([_message(m) for m in request.messages]).decode()
    }
    if request.system:
        attributes["gen_ai.system_instructions"] = _encode(_parts(request.system)).decode()
    span.add_event("gen_ai.client.inference.operation.details", attributes)


def record_answer(span: Any, message: AssistantMessage) -> None:
    output = _encode([_message(message)]).decode()
    span.add_event("gen_ai.client.inference.operation.details", {"gen_ai.output.messages": output})


def record_tool(span: Any, call: ToolCall, result: ToolResultMessage) -> None:
    response = result.content if isinstance(result.content, str) else _parts(result.content)
    span.add_event(
        "gen_ai.tool.call",
        {
            "gen_ai.tool.call.arguments": _encode(call.arguments).decode(),
            "gen_ai.tool.call.result": response
            if isinstance(response, str)
            else _encode(response).decode(),
        },
    )


CAPTURE_CONTENT_VARIABLE: Final = ENVIRONMENT
"""The environment variable that turns content capture on (``true``)."""


def configure(*, capture_content: bool | None = None) -> None:
    """Whether spans record message content, for the whole process: True or
    False; None (the default) leaves it to ``CAPTURE_CONTENT_VARIABLE``."""
    if capture_content is not None and type(capture_content) is not bool:
        raise TypeError(f"capture_content must be a bool or None, got {capture_content!r}")
    set_capture(capture_content)
