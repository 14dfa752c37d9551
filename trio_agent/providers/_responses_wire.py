"""The request side of the Responses API adapter: our transcript as Responses
``input`` items, our tools as flat function tools (FORMATS.md section c)."""

from __future__ import annotations

from typing import Any

import msgspec

from .._settings import ModelSettings
from ..messages._ir import (
    AssistantMessage,
    DocumentBlock,
    ImageBlock,
    InputBlock,
    RedactedThinkingBlock,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from ..model import ModelRequest, ModelRequestError, OutputFormat
from ._base import named_tool
from ._media import data_url, document_text, is_reasoning_item

__all__ = ["PROVIDER", "input_items", "settings_fields", "text_format", "tools"]

PROVIDER = "OpenAI"


def _part(block: InputBlock) -> dict[str, Any]:
    """One text, image or document block as an input content part."""
    if type(block) is TextBlock:
        return {"type": "input_text", "text": block.text}
    if type(block) is ImageBlock:
        # ``detail`` is required by ResponseInputImageParam: always sent
        return {"type": "input_image", "image_url": data_url(block), "detail": "auto"}
    assert type(block) is DocumentBlock
    if block.media_type == "text/plain" and block.data is not None:
        text = document_text(block)
        return {"type": "input_text", "text": f"{block.title}\n{text}" if block.title else text}
    if block.url is not None:
        return {"type": "input_file", "file_url": block.url}
    return {
        "type": "input_file",
        "filename": block.title or "document.pdf",
        "file_data": data_url(block),
    }


def _content(content: str | tuple[InputBlock, ...]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [_part(block) for block in content]


def _reasoning_item(block: RedactedThinkingBlock) -> Any:
    """A kept reasoning item, as it was received (its JSON decoded)."""
    try:
        return msgspec.json.decode(block.data)
    except msgspec.DecodeError:
        raise ModelRequestError(
            f"{PROVIDER}: a kept reasoning item is not JSON; it cannot be sent back"
        ) from None


def _assistant_items(message: AssistantMessage) -> list[Any]:
    """An assistant message as output items, in its own order: reasoning items sent
    back as received, text as an assistant message, calls as function_call items.
    Thinking blocks are not sent (a summary travels inside its reasoning item), nor
    is another provider's redacted thinking."""
    items: list[Any] = []
    for block in message.content:
        if type(block) is TextBlock:
            if block.text:
                items.append({"role": "assistant", "content": block.text})
        elif type(block) is ToolCall:
            items.append(
                {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": msgspec.json.encode(block.arguments).decode(),
                }
            )
        elif type(block) is RedactedThinkingBlock and is_reasoning_item(block.data):
            items.append(_reasoning_item(block))
    return items


def input_items(request: ModelRequest) -> list[Any]:
    """The request's transcript as Responses ``input`` items."""
    out: list[Any] = []
    for message in request.messages:
        if type(message) is UserMessage:
            out.append({"role": "user", "content": _content(message.content)})
        elif type(message) is AssistantMessage:
            out.extend(_assistant_items(message))
        elif type(message) is ToolResultMessage:
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": _content(message.content),
                }
            )
    return out


def tools(request: ModelRequest) -> list[dict[str, Any]]:
    """The request's tools as flat function tools (not strict: our schemas are not
    written for strict mode)."""
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": t.parameters,
            "strict": False,
        }
        for t in request.tools
    ]


def settings_fields(settings: ModelSettings, request: ModelRequest) -> dict[str, Any]:
    """The Responses body fields for ``settings`` but ``reasoning_effort`` (the
    adapter merges it into ``reasoning``): each only when it is set;
    ``tool_choice`` and ``parallel_tool_calls`` only with tools. No ``stop``,
    ``seed`` or ``thinking_budget`` (the API has none of them)."""
    out: dict[str, Any] = {}
    if settings.max_tokens is not None:
        out["max_output_tokens"] = settings.max_tokens
    if settings.temperature is not None:
        out["temperature"] = settings.temperature
    if settings.top_p is not None:
        out["top_p"] = settings.top_p
    if request.tools:
        name = named_tool(settings, request)
        if name is not None:
            out["tool_choice"] = {"type": "function", "name": name}
        elif settings.tool_choice is not None:
            out["tool_choice"] = settings.tool_choice
        if settings.parallel_tool_calls is not None:
            out["parallel_tool_calls"] = settings.parallel_tool_calls
    return out


def text_format(output: OutputFormat) -> dict[str, Any]:
    """The Responses ``text`` field asking for ``output`` natively: a flat
    ``json_schema`` format (``ResponseFormatTextJSONSchemaConfig``), its schema
    passed as it is, not rewritten."""
    return {
        "format": {
            "type": "json_schema",
            "name": output.name,
            "schema": output.schema,
            "strict": output.strict,
        }
    }
