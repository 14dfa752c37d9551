"""A streamed tool call's arguments: taken as they are, or refused with a reason
the model reads.

A model that sends arguments an adapter cannot take (more raw bytes than its
``max_argument_bytes``, text that is not JSON, JSON that is not an object, an
object past a limit of ``trio_agent.limits``) has not broken the stream: the
call goes on with its arguments replaced by ``{REJECTED_ARGUMENTS: reason}``,
and ``execute_tool_call`` answers it with an error result instead of running
the tool, so the model learns why and can try again (in smaller pieces, say).
"""

from __future__ import annotations

from typing import Any, Final, final

import msgspec

from ..limits import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    MAX_ARGUMENT_ENTRIES,
    MAX_STEP_TEXT,
    OUTPUT_TOOL_NAME,
    REJECTED_ARGUMENTS,
    ArgumentsError,
    check_arguments,
    cut_text,
)
from ..messages._ir import ToolCall
from .http._errors import without_lone_escapes

__all__ = [
    "MAX_ARGUMENT_BYTES",
    "MAX_OUTPUT_BYTES",
    "REJECTED_ARGUMENTS",
    "CallParts",
    "output_bytes",
    "take_output",
    "take_arguments",
    "tool_call",
]

MAX_ARGUMENT_BYTES: Final = 64 * 1024
"""The default of an adapter's ``max_argument_bytes``: raw bytes of one tool
call's streamed arguments. More are refused without being decoded."""
MAX_OUTPUT_BYTES: Final = 16 * MAX_STEP_TEXT
"""The least byte cap of an ``OUTPUT_TOOL_NAME`` call's arguments (1 MiB), 16 bytes
a code point of ``MAX_STEP_TEXT``: room for each even at its widest (4 bytes of
UTF-8, 12 as an escaped ``\\uXXXX\\uXXXX`` pair), and 4 more each for the quotes,
commas, numbers and spaces around them. (JSON padded with spaces or long
numbers can pass any cap; such an answer is refused for its size.)"""
MAX_REASON_CHARS: Final = 400
"""The longest reason a refused call carries (well under ``MAX_ARGUMENT_CHARS``)."""

_MIN_INT: Final = -(2**63)  # the range ``check_arguments`` takes
_MAX_INT: Final = 2**64 - 1
_DIGITS: Final = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
"""Every ASCII digit to ``0``, any other byte to a space (for ``bytes.translate``)."""
_LONG_NUMBER: Final = b"0" * 19  # the fewest digits of an int outside the 64-bit range
_KINDS: Final = {list: "an array", str: "a string", int: "a number", float: "a number"}
_decode = msgspec.json.decode
_TOO_DEEP: Final = (
    f"the arguments nest too deeply to read (at most {MAX_ARGUMENT_DEPTH} containers)"
)


def output_bytes(max_bytes: int) -> int:
    """The byte cap of an ``OUTPUT_TOOL_NAME`` call's arguments, for an adapter
    whose ``max_argument_bytes`` is ``max_bytes``: the larger of it and
    ``MAX_OUTPUT_BYTES``."""
    return max(max_bytes, MAX_OUTPUT_BYTES)


def tool_call(call_id: str, name: str, raw: bytes, max_bytes: int) -> ToolCall:
    """The complete call ``call_id``, its arguments taken from ``raw`` (see
    ``take_arguments``; the output's limits for ``OUTPUT_TOOL_NAME``)."""
    if name == OUTPUT_TOOL_NAME:
        return ToolCall(call_id, name, take_output(raw, max_bytes))
    return ToolCall(call_id, name, take_arguments(raw, max_bytes))


@final
class CallParts:
    """A tool call as it streams: its id and name as they come, and the pieces of
    its arguments. Once they pass its cap in characters (so as many bytes at
    least), later pieces are counted in bytes, not kept: the call is refused for
    its size, and a runaway stream is not held in memory. The cap is
    ``max_bytes``; for ``OUTPUT_TOOL_NAME`` (its name as it is when the pieces
    pass ``max_bytes``), ``output_bytes(max_bytes)``."""

    __slots__ = ("id", "max_bytes", "name", "over", "parts", "size")

    def __init__(self, max_bytes: int, call_id: str = "", name: str = "") -> None:
        self.id = call_id
        self.name = name
        self.max_bytes = max_bytes
        self.parts: list[str] = []
        self.size = 0  # characters so far; bytes once ``over``
        self.over = False

    def add(self, piece: str) -> None:
        """One more piece of the arguments' text."""
        if self.over:
            self.size += len(piece.encode())
            return
        self.parts.append(piece)
        self.size += len(piece)
        if self.size > self.max_bytes and self.size > self.cap():
            self.size = len("".join(self.parts).encode())
            self.parts.clear()
            self.over = True

    def replace(self, text: str) -> None:
        """The arguments' whole text, instead of the pieces so far."""
        self.parts.clear()
        self.size = 0
        self.over = False
        self.add(text)

    def cap(self) -> int:
        """The most bytes this call's arguments may have, by its name now."""
        if self.name == OUTPUT_TOOL_NAME:
            return output_bytes(self.max_bytes)
        return self.max_bytes

    def call(self) -> ToolCall:
        """The complete call, its arguments taken as ``tool_call`` takes them."""
        if self.over:
            reason = _too_long(self.size, self.cap(), self.name == OUTPUT_TOOL_NAME)
            return ToolCall(self.id, self.name, _refused(reason))
        return tool_call(self.id, self.name, "".join(self.parts).encode(), self.max_bytes)


def take_arguments(raw: bytes, max_bytes: int = MAX_ARGUMENT_BYTES) -> dict[str, Any]:
    """A complete call's arguments, parsed strictly; or, if they cannot be taken as
    they are, ``{REJECTED_ARGUMENTS: reason}`` (never an exception: a model's bad
    arguments are the model's to fix). Empty arguments are ``{}``.

    Cost, for arguments that fit: the size test and the decode, then (for at
    most ``MAX_ARGUMENT_CHARS`` bytes) a look at the top-level values, and for
    a nested object a few byte counts (``_surely_within_limits``). Only
    arguments those cannot clear (longer, or with many containers or long
    numbers) are walked here by ``check_arguments``, which the step check
    runs on every call anyway.
    """
    size = len(raw)
    if size > max_bytes:
        return _refused(_too_long(size, max_bytes))
    try:  # as ``_object`` does, inline: this is the path of every call
        arguments = _decode(raw)
    except msgspec.DecodeError as exc:
        if not raw.strip():
            return {}  # a call with no parameters, streamed as no text at all
        repaired = without_lone_escapes(raw)  # U+FFFD for a lone surrogate, as in events
        if repaired != raw:
            return take_arguments(repaired, max_bytes)  # as long: once, never again
        return _refused(_not_json(exc))
    except RecursionError:
        return _refused(_TOO_DEEP)
    if type(arguments) is not dict:
        return _refused(_not_object(arguments))
    if size > MAX_ARGUMENT_CHARS or not _surely_within_limits(arguments, raw):
        try:
            check_arguments(arguments)
        except ArgumentsError as exc:
            return _refused(str(exc))
    return arguments


def take_output(raw: bytes, max_bytes: int = MAX_ARGUMENT_BYTES) -> dict[str, Any]:
    """The arguments of an ``OUTPUT_TOOL_NAME`` call (a typed final answer), as
    ``take_arguments`` takes a tool's, but held to the output's limits: at most
    ``output_bytes(max_bytes)`` bytes, then ``check_arguments(..., output=True)``
    (``MAX_STEP_TEXT`` code points and entries), always walked (once a run)."""
    cap = output_bytes(max_bytes)
    size = len(raw)
    if size > cap:
        return _refused(_too_long(size, cap, output=True))
    arguments = _object(raw)
    if isinstance(arguments, str):
        return _refused(arguments)
    try:
        check_arguments(arguments, output=True)
    except ArgumentsError as exc:
        return _refused(str(exc))
    return arguments


def _object(raw: bytes) -> dict[str, Any] | str:
    """``raw`` decoded strictly as a JSON object (``{}`` for no text at all: a
    call with no parameters), or the reason it cannot be taken."""
    try:
        arguments = _decode(raw)
    except msgspec.DecodeError as exc:
        repaired = without_lone_escapes(raw)  # as take_arguments
        if repaired != raw:
            return _object(repaired)
        return {} if not raw.strip() else _not_json(exc)
    except RecursionError:
        return _TOO_DEEP
    if type(arguments) is not dict:
        return _not_object(arguments)
    return arguments


def _not_json(exc: msgspec.DecodeError) -> str:
    return f"the arguments are not JSON: {exc}"


def _not_object(value: object) -> str:
    kind = _KINDS.get(type(value), "true, false or null")
    return f"the arguments are JSON but not an object: {kind}"


def _surely_within_limits(arguments: dict[str, Any], raw: bytes) -> bool:
    """True when ``arguments``, decoded by msgspec from ``raw`` (at most
    ``MAX_ARGUMENT_CHARS`` bytes), certainly pass ``check_arguments``; False says
    only "walk them": ``check_arguments`` decides. Cheap, and never a walk.

    msgspec already refused what is not plain JSON: lone surrogates, numbers out
    of the float range; its types are exact. Code points: at most one per byte
    (plus two quotes per string), so at most ``MAX_ARGUMENT_CHARS``. What is left:

    - a flat object (no nested container, most calls): depth 1; its fields are
      its entries, its ints are looked at one by one;
    - a nested one, bounded by its bytes: depth, by the containers (``{`` and
      ``[``, strings' ones too: more, never fewer); entries, by the containers
      and commas (a container of k entries holds k - 1 commas); an int outside
      the 64-bit range has at least 19 digits in a row (2**63 has 19).
    """
    if len(arguments) > MAX_ARGUMENT_ENTRIES:
        return False
    for value in arguments.values():
        kind = type(value)
        if kind is dict or kind is list:
            break
        if kind is int and not _MIN_INT <= value <= _MAX_INT:
            return False
    else:
        return True  # flat
    containers = raw.count(b"{") + raw.count(b"[")
    return (
        containers <= MAX_ARGUMENT_DEPTH
        and containers + raw.count(b",") <= MAX_ARGUMENT_ENTRIES
        and _LONG_NUMBER not in raw.translate(_DIGITS)
    )


def _too_long(size: int, max_bytes: int, output: bool = False) -> str:
    if output:
        return (
            f"the final answer's arguments were {size:,} bytes, more than the "
            f"{max_bytes:,} an answer may have"
        )
    return (
        f"the arguments were {size:,} bytes, more than the {max_bytes:,} this model "
        "accepts (max_argument_bytes)"
    )


def _refused(reason: str) -> dict[str, Any]:
    return {REJECTED_ARGUMENTS: cut_text(reason, MAX_REASON_CHARS)}
