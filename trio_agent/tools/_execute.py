"""``execute_tool_call``: one model's call run with a registry's tools, every
recoverable failure turned into an error result the model can read and act on,
and what a tool returns turned into its result message."""

from __future__ import annotations

from enum import Enum
from typing import Any, Final

import msgspec
import trio

from ..errors import describe, first_leaf, message_of
from ..limits import REJECTED_ARGUMENTS, cut_text
from ..messages._ir import ToolCall, ToolResultMessage, tool_result
from ..messages._rules import INPUT_BLOCKS, BlockError, check_content
from ._tool import (
    FatalToolError,
    ToolArgumentsError,
    ToolError,
    ToolRegistry,
    ToolResult,
    copy_json,
)
from ._types import json_bytes

__all__ = ["execute_tool_call"]

_REJECTED_REASON_CHARS: Final = 512


async def execute_tool_call(tools: ToolRegistry, call: ToolCall) -> ToolResultMessage:
    """Run one call and return its result message (id ``tool-result-{call.id}``).

    A ``str`` return (a subclass's too) is the content; a ``ToolResult``, one ``TextBlock``,
    ``ImageBlock`` or ``DocumentBlock``, or a list of them is content blocks
    (checked like a message's: media type, size; a list that mixes blocks and
    other values is an error result saying so); any other return is
    JSON-encoded compactly. An unknown tool, arguments that fail validation, a
    ``ToolError`` or any other ``Exception``, or a return value that cannot be
    encoded (a reference cycle, a deep nest, an unsupported type) gives
    ``is_error=True`` with a message that names the tool and says why.
    ``FatalToolError`` (also inside an ``ExceptionGroup`` from the tool's own
    nursery) propagates: the run fails.
    A call whose arguments the adapter refused (they hold the
    ``REJECTED_ARGUMENTS`` key) gets ``is_error=True`` saying the tool was not
    run, why, and to call it again with arguments that fit; the tool is not
    looked up or run.
    Cancellation: ``trio.Cancelled`` and other ``BaseException``s propagate
    untouched, and so does cancellation the tool turned into an exception:
    no result is made for an interrupted call. A tool that swallows
    ``Cancelled`` and returns has finished: its return value is its result.
    Lone surrogates in the content are replaced by U+FFFD so the result can
    be encoded for any provider.
    """
    arguments = call.arguments
    if type(arguments) is dict and REJECTED_ARGUMENTS in arguments:
        return _rejected(call, arguments[REJECTED_ARGUMENTS])
    found = tools.get(call.name)
    if found is None:
        available = ", ".join(tools.names()) or "none"
        return tool_result(call, f'Unknown tool "{call.name}". Available tools: {available}.', True)
    try:
        value = await found.execute(copy_json(call.arguments))
    except Exception as exc:
        # A tool that turned our cancellation into its own error (fatal or not)
        # was still interrupted: no result is made for it.
        await trio.lowlevel.checkpoint_if_cancelled()
        if isinstance(exc, FatalToolError):
            raise
        if isinstance(exc, ExceptionGroup):
            fatal, _ = exc.split(FatalToolError)
            if fatal is not None:  # raised inside the tool's own nursery
                raise first_leaf(fatal) from exc
        if isinstance(exc, ToolArgumentsError):
            return tool_result(
                call, f'Invalid arguments for tool "{call.name}": {message_of(exc)}', True
            )
        if isinstance(exc, ToolError):
            return tool_result(call, f'Tool "{call.name}" failed: {message_of(exc)}', True)
        return tool_result(call, f'Tool "{call.name}" raised {describe(exc)}', True)
    if type(value) is str:
        return tool_result(call, value, False)
    if type(value) in _MAYBE_CONTENT and _is_content(value):  # one test for a dict
        return _content_result(call, value)
    if isinstance(value, str) and not isinstance(value, Enum):  # numpy.str_, Markup: a str
        return tool_result(call, str.__str__(value), False)
    # Only the encoding is guarded (the tool has returned), so nothing the tool
    # raised is taken for an encoding failure; inline: one call less per result.
    try:
        encoded = json_bytes(value)
    except Exception as exc:
        return _unencodable(call, value, exc)
    return tool_result(call, encoded.decode(), False)


def _rejected(call: ToolCall, reason: object) -> ToolResultMessage:
    """The error result of a call whose arguments the adapter could not take: the
    tool was not run (whether or not it exists), and the model may try again."""
    text = reason if type(reason) is str else msgspec.json.encode(reason).decode()
    text = cut_text(text.strip().rstrip("."), _REJECTED_REASON_CHARS)
    return tool_result(
        call,
        f'Tool "{call.name}" was not run: {text}. Call it again with arguments that fit: '
        "one JSON object within the limits (a long text can go in smaller pieces, over "
        "several calls).",
        True,
    )


_MAYBE_CONTENT = frozenset({ToolResult, list, tuple, *INPUT_BLOCKS})


def _is_content(value: object) -> bool:
    kind = type(value)
    if kind is ToolResult or kind in INPUT_BLOCKS:
        return True
    # a list holding any block is content (and a clear error if not all are blocks),
    # never JSON text that would carry an image past the media limits
    return (kind is list or kind is tuple) and any(type(v) in INPUT_BLOCKS for v in value)  # type: ignore[attr-defined]


def _content_result(call: ToolCall, value: Any) -> ToolResultMessage:
    """The result for content a tool returned as blocks, or an error result
    saying which block cannot be sent and why."""
    if type(value) is ToolResult:
        content, is_error = value.content, value.is_error
        if type(is_error) is not bool:
            return tool_result(
                call,
                f'Tool "{call.name}" returned a ToolResult whose is_error is a '
                f"{type(is_error).__name__}, not a bool",
                True,
            )
    else:
        content, is_error = ((value,) if type(value) in INPUT_BLOCKS else value), False
    try:
        checked = check_content(content)
    except BlockError as exc:
        return tool_result(
            call, f'Tool "{call.name}" returned content that cannot be sent: {exc}', True
        )
    return tool_result(call, checked, is_error)


def _unencodable(call: ToolCall, value: object, exc: Exception) -> ToolResultMessage:
    """The error result for a return value that cannot be encoded, saying why.

    Encoding fails with ``RecursionError`` on a reference cycle or a deep
    nest, ``TypeError`` or ``ValueError`` on unsupported types, keys or lone
    surrogates, and with whatever code it runs raises (a ``tzinfo.utcoffset``,
    say).
    """
    if isinstance(exc, RecursionError):
        reason = "it contains a reference cycle or is nested too deeply"
    elif isinstance(exc, TypeError | ValueError | OverflowError):  # msgspec's own, readable
        reason = message_of(exc)
    else:  # raised by code the encoding ran
        reason = describe(exc)
    return tool_result(
        call,
        f'Tool "{call.name}" returned a {type(value).__name__} that cannot be '
        f"encoded as JSON: {reason}",
        True,
    )
