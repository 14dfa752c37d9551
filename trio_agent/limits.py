"""Resource limits of a run, and the plain-JSON check for tool arguments.

The limits are contract constants: a model that goes past one commits a
protocol error, found before any tool runs. ``check_arguments`` is the one
place that decides what tool arguments may look like; it returns a private
copy, so objects the model (or a caller) built and still holds cannot change
the run's transcript afterwards. (What the run hands out, in requests and
events, it shares: those argument dicts are to be read, not changed.)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any, Final

__all__ = [
    "MAX_AGENT_STEPS",
    "MAX_ARGUMENT_CHARS",
    "MAX_ARGUMENT_DEPTH",
    "MAX_ARGUMENT_ENTRIES",
    "MAX_ARGUMENT_VALUES",
    "MAX_ASSISTANT_BLOCKS",
    "MAX_CONTENT_BLOCKS",
    "MAX_INITIAL_MESSAGES",
    "MAX_MEDIA_BYTES",
    "MAX_MEDIA_URL_CHARS",
    "MAX_MESSAGE_MEDIA_BYTES",
    "MAX_STEP_CHUNKS",
    "MAX_STEP_TEXT",
    "MAX_STEP_THINKING",
    "OUTPUT_TOOL_NAME",
    "DOCUMENT_MEDIA_TYPES",
    "IMAGE_MEDIA_TYPES",
    "ArgumentsError",
    "check_arguments",
    "is_valid_unicode",
    "json_depth",
]

MAX_AGENT_STEPS: Final = 64
"""Ceiling of ``max_steps`` and of the request-number range of one run."""
MAX_INITIAL_MESSAGES: Final = 4096
"""Messages one run accepts as its initial transcript."""
MAX_STEP_CHUNKS: Final = 1024
"""Chunks in one step's stream."""
MAX_STEP_TEXT: Final = 65536
"""Unicode code points of text in one step (the stream, and the final message)."""
OUTPUT_TOOL_NAME: Final = "final_result"
"""The tool a model calls to give a typed final answer (``output_type=``). Its
arguments are the answer: they are held to the output's limits (plain JSON,
``MAX_STEP_TEXT`` code points and entries, ``MAX_ARGUMENT_DEPTH``), not to the
tool-argument limits. No registered tool may take this name."""
MAX_ASSISTANT_BLOCKS: Final = 1024
"""Blocks in one assistant message, counted as the model gave them."""
MAX_STEP_THINKING: Final = 1_048_576
"""Code points of thinking in one step: thinking text, signatures and redacted
data together (the stream, and the final message)."""
MAX_CONTENT_BLOCKS: Final = 256
"""Blocks in the content of one user message or tool result."""
MAX_MEDIA_BYTES: Final = 20 * 1024 * 1024
"""Bytes of one image or document block's data."""
MAX_MESSAGE_MEDIA_BYTES: Final = 32 * 1024 * 1024
"""Bytes of image and document data in one message, all blocks together."""
MAX_MEDIA_URL_CHARS: Final = 8192
"""Characters of an image or document block's URL."""
IMAGE_MEDIA_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The media types an ``ImageBlock`` may have: those every supported provider takes."""
DOCUMENT_MEDIA_TYPES: Final = frozenset({"application/pdf", "text/plain"})
"""The media types a ``DocumentBlock`` may have."""
MAX_ARGUMENT_DEPTH: Final = 32
"""Nesting of containers in tool arguments; the root object is depth 1."""
MAX_ARGUMENT_VALUES: Final = 257
"""JSON values in tool arguments, the root included."""
MAX_ARGUMENT_ENTRIES: Final = 256
"""Object fields plus array elements in tool arguments, all levels together."""
MAX_ARGUMENT_CHARS: Final = 4096
"""Code points of all keys and string values in tool arguments together."""
REJECTED_ARGUMENTS: Final = "trio_agent.rejected_arguments"
"""The one key of a tool call's arguments when the adapter could not take the
arguments the model sent (over ``max_argument_bytes``, not JSON, not an object,
or past a limit of this module); its value says why, in a short text.
``execute_tool_call`` answers such a call with an error result and never runs
the tool. No ``@tool`` parameter can have this name (it holds a dot). Defined
here, with the limits (the adapters import it without the tools machinery);
``trio_agent.tools`` and the package export it."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1


def is_valid_unicode(text: str) -> bool:
    """True when ``text`` holds no lone surrogate (it can be encoded as UTF-8)."""
    return text.isascii() or _SURROGATE.search(text) is None


def without_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, so it encodes as UTF-8."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


class ArgumentsError(ValueError):
    """Tool arguments that are not plain JSON or go past a limit.

    ``path`` is a JSON path in msgspec's style (``$.items[3].name``), so the
    message can tell a model exactly which value to fix.
    """

    def __init__(self, reason: str, path: str = "$") -> None:
        super().__init__(f"{reason} - at `{path}`")
        self.reason = reason
        self.path = path


class _Fail(Exception):
    """Raised inside the walk; each frame prepends its key on the way out."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.keys: list[str | int] = []


class _Budget:
    __slots__ = ("chars", "entries", "max_chars", "max_entries")

    def __init__(self, max_chars: int, max_entries: int) -> None:
        self.entries = 0
        self.chars = 0
        self.max_chars = max_chars
        self.max_entries = max_entries


def _walk(value: Any, depth: int, budget: _Budget) -> Any:
    kind = type(value)
    if kind is str:
        budget.chars += len(value)
        if budget.chars > budget.max_chars:
            raise _Fail(f"more than {budget.max_chars} characters in keys and strings")
        if not is_valid_unicode(value):
            raise _Fail("string is not valid Unicode (lone surrogate)")
        return value
    if kind is int:
        if not _MIN_INT <= value <= _MAX_INT:
            raise _Fail("integer is outside the 64-bit range JSON peers can read")
        return value
    if kind is bool or value is None:
        return value
    if kind is float:
        if not math.isfinite(value):
            raise _Fail(f"number {value!r} is not finite")
        return value
    if kind is dict or kind is list:
        if depth > MAX_ARGUMENT_DEPTH:
            raise _Fail(f"nesting deeper than {MAX_ARGUMENT_DEPTH} containers")
        budget.entries += len(value)
        if budget.entries > budget.max_entries:
            raise _Fail(
                f"more than {budget.max_entries} object fields and array elements "
                f"({budget.max_entries + 1} values)"
            )
        if kind is list:
            out_list = []
            for index, item in enumerate(value):
                try:
                    out_list.append(_walk(item, depth + 1, budget))
                except _Fail as fail:
                    fail.keys.append(index)
                    raise
            return out_list
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _Fail(f"object key {key!r} is not a string")
            try:
                _walk(key, depth, budget)
                out[key] = _walk(item, depth + 1, budget)
            except _Fail as fail:
                fail.keys.append(key)
                raise
        return out
    raise _Fail(f"value of type {kind.__name__} is not plain JSON")


def _flat_copy(
    arguments: dict[Any, Any], max_chars: int, max_entries: int
) -> dict[str, Any] | None:
    """A copy of a flat object (ASCII keys; ASCII strings, in-range integers, finite
    floats, booleans and nulls; within the limits), or None for anything else,
    which ``_walk`` then checks and names by path. Most tool calls' arguments are
    flat: this checks them without a call per value (the same rules as the walk:
    a value it accepts, the walk accepts, and the copy is equal)."""
    if len(arguments) > max_entries:
        return None
    chars = 0
    for key, value in arguments.items():
        if type(key) is not str or not key.isascii():
            return None
        chars += len(key)
        kind = type(value)
        if kind is str:
            if not value.isascii():
                return None
            chars += len(value)
        elif kind is int:
            if not _MIN_INT <= value <= _MAX_INT:
                return None
        elif kind is float:
            if not math.isfinite(value):
                return None
        elif kind is not bool and value is not None:
            return None
    if chars > max_chars:
        return None
    return dict(arguments)


def json_path(loc: Sequence[str | int]) -> str:
    """``$.a[0]["odd key"]``: a location as a JSON path, written as msgspec writes
    its own (an odd key quoted as JSON). The one writer of the paths the model
    reads, for the limits here and for the validation errors of tool arguments.
    A key longer than ``_KEY_SHOWN`` shows its head and its length."""
    parts = ["$"]
    for key in loc:
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif len(key) > _KEY_SHOWN:  # a model's key may run to megabytes: its head
            head = f"{key[:_KEY_SHOWN]}... ({len(key)} characters)"
            parts.append(f"[{json.dumps(head, ensure_ascii=False)}]")
        elif key.isidentifier():
            parts.append(f".{key}")
        else:
            parts.append(f"[{json.dumps(key, ensure_ascii=False)}]")
    return "".join(parts)


_KEY_SHOWN: Final = 64
"""Characters of a key a path shows; a longer one shows its head and its length."""


def check_arguments(arguments: object, *, output: bool = False) -> dict[str, Any]:
    """Return a private copy of ``arguments`` after checking it is plain JSON within the limits
    (the output's limits when ``output``: the arguments of ``OUTPUT_TOOL_NAME``).

    Plain JSON: the root is a ``dict``; values are ``dict`` with ``str`` keys,
    ``list``, ``str``, ``int`` (from ``-2**63`` to ``2**64 - 1``), finite ``float``,
    ``bool`` or ``None``, of
    exactly those types (no tuples, subclasses or other objects). Raises
    ``ArgumentsError`` naming the first offending value by its JSON path.
    """
    if type(arguments) is not dict:
        raise ArgumentsError(
            f"arguments must be a JSON object (dict), got {type(arguments).__name__}"
        )
    most = MAX_STEP_TEXT if output else MAX_ARGUMENT_CHARS
    flat = _flat_copy(arguments, most, MAX_STEP_TEXT if output else MAX_ARGUMENT_ENTRIES)
    if flat is not None:
        return flat
    budget = (
        _Budget(MAX_STEP_TEXT, MAX_STEP_TEXT)
        if output
        else _Budget(MAX_ARGUMENT_CHARS, MAX_ARGUMENT_ENTRIES)
    )
    try:
        checked: dict[str, Any] = _walk(arguments, 1, budget)
    except _Fail as fail:
        raise ArgumentsError(fail.reason, json_path(fail.keys[::-1])) from None
    return checked


# fixed, linear patterns (one way to match each character: nothing to backtrack)
_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"?', re.DOTALL)
_NOT_BRACKET: Final = re.compile(r"[^\[\]{}]+")


def json_depth(text: str, limit: int = MAX_ARGUMENT_DEPTH) -> int:
    """The nesting of containers in the JSON ``text``, strings skipped, the root
    container at depth 1, as ``MAX_ARGUMENT_DEPTH`` counts it; for text whose
    brackets could not nest past ``limit`` however they were placed, their count
    instead (an upper bound, found without a scan). Linear in the text."""
    opened = text.count("[") + text.count("{")
    if opened <= limit:
        return opened
    depth = deepest = 0
    for char in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        if char == "[" or char == "{":
            depth += 1
            deepest = max(depth, deepest)
        else:
            depth -= 1
    return deepest


def cut_text(text: str, limit: int, why: str = "") -> str:
    """``text`` if it fits ``limit`` characters, else its head and tail around a
    marker that says how much was cut (and ``why``, when given)."""
    if len(text) <= limit:
        return text
    reason = f": {why}" if why else ""
    marker = f"\n[... {len(text) - limit} characters cut{reason} ...]\n"
    keep = max(limit - len(marker), 0)
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head) :]
