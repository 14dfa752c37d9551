"""Our transcript as Anthropic Messages API turns (the request side of
``AnthropicModel``): text, images and documents from the user or a tool,
and the assistant's own thinking sent back exactly as it came."""

from __future__ import annotations

from typing import Any

from ..messages import (
    AssistantMessage,
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
from ..model import ModelRequest
from ._media import base64_of, document_text, is_reasoning_item, not_attached

__all__ = ["messages"]

_PROVIDER = "Anthropic"


def _image(block: ImageBlock) -> dict[str, Any]:
    if block.url is not None:
        source = {"type": "url", "url": block.url}
    else:
        source = {"type": "base64", "media_type": block.media_type, "data": base64_of(block)}
    return {"type": "image", "source": source}


def _document(block: DocumentBlock) -> dict[str, Any]:
    if block.media_type == "text/plain":
        if block.url is not None:  # the API's URL source is for PDFs only
            why = "Anthropic takes a text/plain document's text, not its URL"
            return {"type": "text", "text": not_attached(block, why)}
        source = {
            "type": "text",
            "media_type": "text/plain",
            "data": document_text(block),
        }
    elif block.url is not None:
        source = {"type": "url", "url": block.url}
    else:
        source = {"type": "base64", "media_type": block.media_type, "data": base64_of(block)}
    out: dict[str, Any] = {"type": "document"}
    if block.title:
        out["title"] = block.title
    out["source"] = source
    return out


def _input_blocks(content: tuple[InputBlock, ...]) -> list[dict[str, Any]]:
    """User or tool-result blocks in the API's form; empty text is left out (the
    API refuses an empty text block)."""
    out: list[dict[str, Any]] = []
    for block in content:
        if type(block) is TextBlock:
            if block.text:
                out.append({"type": "text", "text": block.text})
        elif type(block) is ImageBlock:
            out.append(_image(block))
        elif type(block) is DocumentBlock:
            out.append(_document(block))
    return out


def _assistant_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    """The assistant's blocks in their order. Thinking goes back unmodified, as the
    API requires (with tools it answers 400 without it); only Anthropic's own: a
    thinking block with a signature, redacted data that is not a Responses item."""
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        if type(block) is TextBlock:
            if block.text:
                blocks.append({"type": "text", "text": block.text})
        elif type(block) is ToolCall:
            blocks.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.arguments}
            )
        elif type(block) is ThinkingBlock:
            if block.signature:  # none: another provider's reasoning
                blocks.append(
                    {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
                )
        elif type(block) is RedactedThinkingBlock:
            if not is_reasoning_item(block.data):  # a Responses item is OpenAI's
                blocks.append({"type": "redacted_thinking", "data": block.data})
    return blocks


def _tool_result(message: ToolResultMessage) -> dict[str, Any]:
    content: str | list[dict[str, Any]]
    if isinstance(message.content, str):
        content = message.content
    else:
        content = _input_blocks(message.content) or ""  # no blocks: as an empty str
    return {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id,
        "content": content,
        "is_error": message.is_error,
    }


def messages(request: ModelRequest) -> list[dict[str, Any]]:
    """Our transcript as Anthropic turns: tool results go in a user turn, and
    consecutive turns of one role are merged (the API wants them alternating)."""
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for message in request.messages:
        if type(message) is UserMessage:
            if isinstance(message.content, str):
                if message.content:  # the API refuses empty text blocks
                    add("user", [{"type": "text", "text": message.content}])
            else:
                add("user", _input_blocks(message.content))
        elif type(message) is AssistantMessage:
            add("assistant", _assistant_blocks(message))
        elif type(message) is ToolResultMessage:
            add("user", [_tool_result(message)])
    return out
