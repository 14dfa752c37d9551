"""Our transcript as Anthropic Messages API turns (the request side of
``AnthropicModel``): text, images and documents from the user or a tool,
and the assistant's own thinking sent back exactly as it came."""

from __future__ import annotations

from typing import Any

from .._settings import ModelSettings
from ..messages._ir import (
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
from ..model import ModelRequest, ModelRequestError, OutputFormat
from ._base import named_tool
from ._media import base64_of, document_text, is_reasoning_item, not_attached

__all__ = ["messages", "output_config", "settings_fields"]

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


def _tool_choice(settings: ModelSettings, request: ModelRequest) -> dict[str, Any] | None:
    name = named_tool(settings, request)
    if name is not None:
        choice: dict[str, Any] = {"type": "tool", "name": name}
    elif settings.tool_choice == "required":
        choice = {"type": "any"}
    elif settings.tool_choice is not None:
        choice = {"type": settings.tool_choice}  # "auto", "none"
    elif settings.parallel_tool_calls is False:
        choice = {"type": "auto"}
    else:
        return None
    if settings.parallel_tool_calls is False and choice["type"] != "none":
        choice["disable_parallel_tool_use"] = True
    return choice


def settings_fields(
    settings: ModelSettings, request: ModelRequest, max_tokens: int
) -> dict[str, Any]:
    """The Messages body fields for ``settings`` but ``max_tokens`` (always sent):
    each only when it is set; ``tool_choice`` only with tools; ``thinking`` from
    ``thinking_budget``, ``ModelRequestError`` (before anything is sent) unless
    ``max_tokens`` is above it, as the API requires. No ``seed`` and no
    ``reasoning_effort`` (the API has neither)."""
    out: dict[str, Any] = {}
    budget = settings.thinking_budget
    if budget is not None:
        if not max_tokens > budget:
            raise ModelRequestError(
                f"{_PROVIDER} requires max_tokens > the thinking budget (budget_tokens): "
                f"max_tokens is {max_tokens}, settings.thinking_budget {budget}; "
                "raise max_tokens or lower thinking_budget"
            )
        out["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if settings.temperature is not None:
        out["temperature"] = settings.temperature
    if settings.top_p is not None:
        out["top_p"] = settings.top_p
    if settings.stop:
        out["stop_sequences"] = list(settings.stop)
    if request.tools:
        choice = _tool_choice(settings, request)
        if choice is not None:
            out["tool_choice"] = choice
    return out


def output_config(output: OutputFormat) -> dict[str, Any]:
    """The Messages ``output_config`` asking for ``output`` natively (structured
    outputs, the GA form: no beta header). The API's format has no ``name`` and
    no ``strict`` (it always holds the answer to the schema); the schema goes as
    it is, not rewritten."""
    return {"format": {"type": "json_schema", "schema": output.schema}}
