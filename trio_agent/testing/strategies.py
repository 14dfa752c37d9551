"""Hypothesis strategies for property-testing agents, tools and hooks.

Needs ``hypothesis`` (the ``test`` extra). Arguments come inside the limits
(``arguments()``) or just outside one of them (``arguments_outside_limits()``),
so a tool's validation and the loop's step checks can both be exercised.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from ..limits import (
    DOCUMENT_MEDIA_TYPES,
    IMAGE_MEDIA_TYPES,
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    MAX_ARGUMENT_ENTRIES,
)
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
from ..model import ToolSpec
from ..tools._tool import Tool, ToolRegistry
from ._schema_runs import schema_arguments
from ._scripted import ScriptedResponse, scripted_response

__all__ = [
    "arguments",
    "arguments_at_limits",
    "arguments_outside_limits",
    "contents",
    "input_blocks",
    "json_values",
    "scripted_runs",
    "texts",
    "thinking_blocks",
    "tool_calls",
    "transcripts",
    "user_messages",
]

texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
"""Valid Unicode text (no lone surrogates)."""

_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
)


def json_values(max_leaves: int = 20) -> st.SearchStrategy[Any]:
    """Plain JSON values (well inside the argument limits)."""
    keys = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
    return st.recursive(
        _leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=max_leaves,
    )


def arguments(max_leaves: int = 20) -> st.SearchStrategy[dict[str, Any]]:
    """Tool arguments within every limit: a JSON object of plain JSON values."""
    keys = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
    return st.dictionaries(keys, json_values(max_leaves), max_size=5)


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"d": value}
    return value


def arguments_at_limits() -> st.SearchStrategy[dict[str, Any]]:
    """Arguments exactly at one limit (accepted): depth 32, 256 entries, 4096 characters,
    or the ends of the integer range."""
    return st.sampled_from(
        [
            _nested(MAX_ARGUMENT_DEPTH),
            {"items": [0] * (MAX_ARGUMENT_ENTRIES - 1)},
            {"k": "x" * (MAX_ARGUMENT_CHARS - 1)},
            {"k": "é" * (MAX_ARGUMENT_CHARS - 1)},
            {"n": 2**64 - 1, "m": -(2**63)},
        ]
    )


def arguments_outside_limits() -> st.SearchStrategy[Any]:
    """Arguments that break exactly one rule: one past a limit, or not plain JSON."""
    return st.sampled_from(
        [
            _nested(MAX_ARGUMENT_DEPTH + 1),
            {"items": [0] * MAX_ARGUMENT_ENTRIES},
            {"k": "x" * MAX_ARGUMENT_CHARS},
            {"n": math.nan},
            {"n": math.inf},
            {"t": (1, 2)},
            {"b": b"bytes"},
            {1: "int key"},
            {"s": "\ud800"},
            {"n": 2**64},
            {"n": -(2**63) - 1},
            ["not", "an", "object"],
        ]
    )


def tool_calls(
    names: list[str] | None = None, ids: st.SearchStrategy[str] | None = None
) -> st.SearchStrategy[ToolCall]:
    """Tool calls to ``names`` (any name if None) with arguments inside the limits."""
    name = st.sampled_from(names) if names else st.from_regex(r"[a-z_]{1,12}", fullmatch=True)
    call_id = ids if ids is not None else st.uuids().map(lambda u: f"call-{u.hex[:12]}")
    return st.builds(ToolCall, call_id, name, arguments())


_urls = st.from_regex(r"https://example\.com/[a-z0-9]{1,12}\.(png|pdf)", fullmatch=True)


def _media(kind: type[Any], types: frozenset[str]) -> st.SearchStrategy[Any]:
    media_type = st.sampled_from(sorted(types))
    return st.builds(kind, media_type, data=st.binary(min_size=1, max_size=64)) | st.builds(
        kind, media_type, url=_urls
    )


def input_blocks() -> st.SearchStrategy[InputBlock]:
    """Valid blocks of user or tool-result content: text, small images and
    documents (bytes or a URL), of every allowed media type."""
    documents = _media(DocumentBlock, DOCUMENT_MEDIA_TYPES).flatmap(
        lambda d: st.builds(lambda title: DocumentBlock(d.media_type, d.data, d.url, title), texts)
    )
    return st.builds(TextBlock, texts) | _media(ImageBlock, IMAGE_MEDIA_TYPES) | documents


def contents() -> st.SearchStrategy[str | tuple[InputBlock, ...]]:
    """User or tool-result content: text, or a tuple of input blocks."""
    return texts | st.lists(input_blocks(), min_size=1, max_size=3).map(tuple)


def thinking_blocks() -> st.SearchStrategy[ThinkingBlock | RedactedThinkingBlock]:
    """Thinking an assistant message may carry: signed or not, or redacted."""
    return st.builds(ThinkingBlock, texts, texts) | st.builds(RedactedThinkingBlock, texts)


def user_messages() -> st.SearchStrategy[UserMessage]:
    return st.builds(UserMessage, st.uuids().map(lambda u: f"user-{u.hex[:12]}"), texts)


@st.composite
def transcripts(draw: Any, max_turns: int = 3) -> list[Any]:
    """Valid transcripts: user turns, assistant steps, a result for every call."""
    out: list[Any] = []
    counter = iter(range(10**9))
    for _ in range(draw(st.integers(0, max_turns))):
        out.append(UserMessage(f"user-{next(counter)}", draw(texts)))
        for _ in range(draw(st.integers(0, 2))):
            calls = [
                ToolCall(
                    f"call-{next(counter)}", draw(st.sampled_from(["a", "b"])), draw(arguments())
                )
                for _ in range(draw(st.integers(0, 3)))
            ]
            blocks = [TextBlock(draw(texts))] if draw(st.booleans()) else []
            out.append(AssistantMessage(f"message-{next(counter)}", (*blocks, *calls)))
            for call in calls:
                out.append(
                    ToolResultMessage(
                        f"tool-result-{call.id}",
                        call.id,
                        call.name,
                        draw(texts),
                        draw(st.booleans()),
                    )
                )
    return out


def scripted_runs(
    tool_names: Sequence[str] | None = None,
    max_steps: int = 4,
    *,
    tools: ToolRegistry | Sequence[Tool[..., Any] | ToolSpec] | None = None,
) -> st.SearchStrategy[list[ScriptedResponse]]:
    """A script for ``ScriptedModel``: steps of text and calls, then a final text;
    chunking varies.

    Give ``tool_names`` for calls to those names with arguments of any shape
    (so most fail the tools' validation: for the loop's error paths), or
    ``tools`` (a ``ToolRegistry``, or ``Tool``s and ``ToolSpec``s) for calls
    whose arguments come from ``schema_arguments`` (valid for each tool, so the
    tools' bodies run).
    """
    if (tool_names is None) == (tools is None):
        raise TypeError("scripted_runs() takes tool_names or tools=, not both or neither")
    if isinstance(tool_names, str):
        raise TypeError("tool_names must be a collection of tool names, not one str")
    if tools is None:
        assert tool_names is not None
        return _scripted_runs([(name, arguments(6)) for name in tool_names], max_steps)
    return _scripted_runs([(t.name, schema_arguments(t)) for t in tools], max_steps)


@st.composite
def _scripted_runs(
    draw: Any, calls: list[tuple[str, st.SearchStrategy[dict[str, Any]]]], max_steps: int
) -> list[ScriptedResponse]:
    """A script whose calls are to ``calls``' names, with arguments from their strategies."""
    script = []
    counter = iter(range(10**9))
    for step in range(draw(st.integers(0, max_steps - 1))):
        chosen = [draw(st.sampled_from(calls)) for _ in range(draw(st.integers(1, 3)))]
        step_calls = [
            ToolCall(f"call-{step}-{next(counter)}", name, draw(strategy))
            for name, strategy in chosen
        ]
        blocks = [TextBlock(draw(texts))] if draw(st.booleans()) else []
        script.append(
            scripted_response(
                f"r{step}", [*blocks, *step_calls], text_chunks=draw(st.integers(1, 4))
            )
        )
    script.append(scripted_response("final", draw(texts), text_chunks=draw(st.integers(1, 4))))
    return script
