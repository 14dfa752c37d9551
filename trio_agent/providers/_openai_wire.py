"""The request side of ``OpenAIChatModel``: the transcript as Chat Completions
``messages``, with images, documents and reasoning in the documented forms.

User content becomes content parts (``text``, ``image_url``, ``file``). Tool
messages may hold text only, and must directly follow the assistant message
that called them; so a tool result's images and documents go in one user
message placed right after the last tool message of its batch, each result's
media introduced by a text part naming its call id, and the tool message
says where they went.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .._settings import ModelSettings
from ..messages._ir import (
    AssistantMessage,
    Block,
    DocumentBlock,
    ImageBlock,
    InputBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from ..model import ModelRequest, OutputFormat
from ._base import named_tool
from ._media import data_url, document_text, is_reasoning_item, not_attached

__all__ = [
    "SEND_REASONING",
    "SendReasoning",
    "chat_messages",
    "response_format",
    "settings_fields",
]

SendReasoning = Literal["tool_calls", "always", "never"]
SEND_REASONING: tuple[SendReasoning, ...] = ("tool_calls", "always", "never")

_PROVIDER = "OpenAI"


def _part(block: InputBlock) -> dict[str, Any]:
    """One block of user content as a Chat Completions content part."""
    if type(block) is TextBlock:
        return {"type": "text", "text": block.text}
    if type(block) is ImageBlock:
        return {"type": "image_url", "image_url": {"url": data_url(block)}}
    assert type(block) is DocumentBlock
    if block.data is None:
        why = "OpenAI Chat Completions takes a document's bytes, not its URL"
        return {"type": "text", "text": not_attached(block, why)}
    if block.media_type == "text/plain":
        text = document_text(block)
        return {"type": "text", "text": f"{block.title}\n{text}" if block.title else text}
    filename = block.title or "document.pdf"
    return {"type": "file", "file": {"filename": filename, "file_data": data_url(block)}}


def _user_content(content: str | tuple[InputBlock, ...]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [_part(block) for block in content]


def _assistant(message: AssistantMessage, send_reasoning: SendReasoning) -> dict[str, Any]:
    text = "".join(b.text for b in message.content if type(b) is TextBlock)
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {
                "name": b.name,
                "arguments": msgspec.json.encode(b.arguments).decode(),
            },
        }
        for b in message.content
        if type(b) is ToolCall
    ]
    entry: dict[str, Any] = {"role": "assistant", "content": text or ("" if not calls else None)}
    if send_reasoning == "always" or (send_reasoning == "tool_calls" and calls):
        reasoning = _own_reasoning(message.content)
        if reasoning:
            entry["reasoning_content"] = reasoning
    if calls:
        entry["tool_calls"] = calls
    return entry


def _own_reasoning(blocks: tuple[Block, ...]) -> str:
    """The thinking a compatible server gave (its ``reasoning_content``): unsigned
    thinking blocks that are not a Responses reasoning summary (those come right
    before their reasoning item). Anthropic's signed thinking and OpenAI's
    reasoning are never sent here: a server may refuse what it does not know."""
    parts = []
    for position, block in enumerate(blocks):
        if type(block) is not ThinkingBlock or block.signature:
            continue
        after = blocks[position + 1] if position + 1 < len(blocks) else None
        if type(after) is RedactedThinkingBlock and is_reasoning_item(after.data):
            continue
        parts.append(block.thinking)
    return "".join(parts)


def _tool(message: ToolResultMessage, media: list[dict[str, Any]]) -> dict[str, Any]:
    """The tool message of ``message`` (text only): its blocks one per line, in
    their order (the other wires send each block apart: never run together),
    empty text left out, each image or document a note that it follows; those,
    as parts introduced by a text part naming the call, are added to ``media``."""
    content = message.content
    if isinstance(content, str):
        text = content
    else:
        lines: list[str] = []
        parts: list[dict[str, Any]] = []
        for block in content:
            if type(block) is TextBlock:
                if block.text:
                    lines.append(block.text)
                continue
            kind = "image" if type(block) is ImageBlock else "document"
            lines.append(
                f"[{kind} {len(parts) + 1} of this result follows in the next user message]"
            )
            parts.append(_part(block))
        text = "\n".join(lines)
        if parts:
            intro = f"Images and documents returned by tool call {message.tool_call_id}:"
            media.append({"type": "text", "text": intro})
            media.extend(parts)
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": text}


def chat_messages(request: ModelRequest, send_reasoning: SendReasoning) -> list[dict[str, Any]]:
    """The request's system prompt and transcript as Chat Completions ``messages``;
    ``ModelRequestError`` for content this API cannot take (before anything is sent)."""
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    media: list[dict[str, Any]] = []  # of the current batch of tool results
    for message in request.messages:
        if type(message) is ToolResultMessage:
            out.append(_tool(message, media))
            continue
        if media:  # the batch is over: its media follow its last tool message
            out.append({"role": "user", "content": media})
            media = []
        if type(message) is UserMessage:
            out.append({"role": "user", "content": _user_content(message.content)})
        elif type(message) is AssistantMessage:
            out.append(_assistant(message, send_reasoning))
    if media:
        out.append({"role": "user", "content": media})
    return out


def settings_fields(settings: ModelSettings, request: ModelRequest) -> dict[str, Any]:
    """The Chat Completions body fields for ``settings``: each only when it is set;
    ``tool_choice`` and ``parallel_tool_calls`` only with tools; no
    ``thinking_budget`` (the API has none)."""
    out: dict[str, Any] = {}
    if settings.max_tokens is not None:
        out["max_completion_tokens"] = settings.max_tokens
    for field in ("temperature", "top_p", "seed"):
        value = getattr(settings, field)
        if value is not None:
            out[field] = value
    if settings.stop:
        out["stop"] = list(settings.stop)
    if request.tools:
        name = named_tool(settings, request)
        if name is not None:
            out["tool_choice"] = {"type": "function", "function": {"name": name}}
        elif settings.tool_choice is not None:
            out["tool_choice"] = settings.tool_choice
        if settings.parallel_tool_calls is not None:
            out["parallel_tool_calls"] = settings.parallel_tool_calls
    if settings.reasoning_effort is not None:
        out["reasoning_effort"] = settings.reasoning_effort
    return out


def response_format(output: OutputFormat) -> dict[str, Any]:
    """The Chat Completions ``response_format`` asking for ``output`` natively
    (Structured Outputs): its schema passed as it is, not rewritten."""
    return {
        "type": "json_schema",
        "json_schema": {"name": output.name, "schema": output.schema, "strict": output.strict},
    }
