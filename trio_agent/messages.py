"""The message IR, and transcript validation and repair.

Messages are frozen msgspec Structs tagged by ``role``. A transcript is a
sequence of them that a provider would accept: unique ids, and every tool
call of an assistant message answered by exactly one result placed right
after it. ``validate_transcript`` checks that; ``repair_transcript`` answers
calls that a cancellation left dangling, explicitly and never silently.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from typing import Any

from msgspec import Struct

from .limits import ArgumentsError, check_arguments, is_valid_unicode, without_lone_surrogates

__all__ = [
    "AssistantMessage",
    "Block",
    "Message",
    "TextBlock",
    "ToolCall",
    "ToolResultMessage",
    "TranscriptError",
    "UserMessage",
    "repair_transcript",
    "text_from_assistant",
    "validate_transcript",
]


# Every wire struct (messages, blocks, chunks, requests, events, results) is
# frozen plain data that cannot take part in a reference cycle, so it is
# ``gc=False``: 16 B less per object, and the cyclic collector never walks a
# transcript. (A struct a caller builds around a cycle of its own would leak
# that cycle, never crash.)
class TextBlock(Struct, frozen=True, gc=False, tag_field="type", tag="text"):
    """Text the assistant wrote."""

    text: str


class ToolCall(Struct, frozen=True, gc=False, tag_field="type", tag="tool_call"):
    """A tool the assistant asked for, with plain-JSON ``arguments``.

    As a stream chunk it is the whole call: provider adapters assemble the
    argument fragments before they hand it over.
    """

    id: str
    name: str
    arguments: dict[str, Any]


Block = TextBlock | ToolCall


class UserMessage(Struct, frozen=True, gc=False, tag_field="role", tag="user"):
    """Input from the user."""

    id: str
    content: str


class AssistantMessage(Struct, frozen=True, gc=False, tag_field="role", tag="assistant"):
    """A complete model response: text and tool-call blocks as the model gave them."""

    id: str
    content: tuple[Block, ...]


class ToolResultMessage(Struct, frozen=True, gc=False, tag_field="role", tag="tool_result"):
    """The answer to one tool call; ``is_error`` marks an error the model should see."""

    id: str
    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False


Message = UserMessage | AssistantMessage | ToolResultMessage

INTERRUPTED_RESULT_TEXT = "interrupted: no result was recorded"


class TranscriptError(ValueError):
    """A transcript a provider would reject, or a message that is not a message.

    ``code`` is a stable string a program can match:
    ``NOT_A_MESSAGE``, ``INVALID_FIELD``, ``INVALID_UNICODE``,
    ``INVALID_ARGUMENTS``, ``DUPLICATE_MESSAGE_ID``, ``DUPLICATE_CALL_ID``,
    ``UNEXPECTED_RESULT``, ``WRONG_TOOL_NAME``, ``MISSING_RESULT``,
    ``TOO_MANY_MESSAGES``.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def text_from_assistant(message: AssistantMessage) -> str:
    """The text blocks of ``message`` concatenated with no separator."""
    return "".join(block.text for block in message.content if type(block) is TextBlock)


def _where(index: int, message: Any) -> str:
    ident = getattr(message, "id", None)
    return f"message {index} (id {ident!r})" if type(ident) is str else f"message {index}"


def _check_str(value: object, field: str, index: int, message: Any) -> None:
    if type(value) is not str:
        raise TranscriptError(
            "INVALID_FIELD",
            f"{_where(index, message)}: {field} must be a str, got {type(value).__name__}",
        )
    if not is_valid_unicode(value):
        raise TranscriptError(
            "INVALID_UNICODE",
            f"{_where(index, message)}: {field} is not valid Unicode (lone surrogate)",
        )


def _checked_message(message: object, index: int) -> Message:
    """Check one message's own fields; return it rebuilt with private copies of mutable parts."""
    kind = type(message)
    if kind is UserMessage:
        _check_str(message.id, "id", index, message)  # type: ignore[union-attr]
        _check_str(message.content, "content", index, message)  # type: ignore[union-attr]
        return message  # type: ignore[return-value]  # frozen and all-str: nothing to copy
    if kind is ToolResultMessage:
        m: ToolResultMessage = message  # type: ignore[assignment]
        for field in ("id", "tool_call_id", "tool_name", "content"):
            _check_str(getattr(m, field), field, index, m)
        if type(m.is_error) is not bool:
            raise TranscriptError("INVALID_FIELD", f"{_where(index, m)}: is_error must be a bool")
        return m
    if kind is AssistantMessage:
        a: AssistantMessage = message  # type: ignore[assignment]
        _check_str(a.id, "id", index, a)
        if type(a.content) not in (tuple, list):
            raise TranscriptError(
                "INVALID_FIELD", f"{_where(index, a)}: content must be a tuple of blocks"
            )
        blocks: list[Block] = []
        for position, block in enumerate(a.content):
            if type(block) is TextBlock:
                _check_str(block.text, f"content[{position}].text", index, a)
                blocks.append(block)
            elif type(block) is ToolCall:
                _check_str(block.id, f"content[{position}].id", index, a)
                _check_str(block.name, f"content[{position}].name", index, a)
                try:
                    arguments = check_arguments(block.arguments)
                except ArgumentsError as exc:
                    raise TranscriptError(
                        "INVALID_ARGUMENTS",
                        f"{_where(index, a)}: content[{position}].arguments: {exc}",
                    ) from None
                blocks.append(ToolCall(block.id, block.name, arguments))
            else:
                raise TranscriptError(
                    "INVALID_FIELD",
                    f"{_where(index, a)}: content[{position}] is a "
                    f"{type(block).__name__}, not a TextBlock or ToolCall",
                )
        return AssistantMessage(a.id, tuple(blocks))
    raise TranscriptError(
        "NOT_A_MESSAGE",
        f"message {index} is a {kind.__name__}, not a UserMessage, "
        "AssistantMessage or ToolResultMessage",
    )


class _Linker:
    """Incremental check of ids and call/result linkage.

    The loop feeds it each message it appends, so the transcript is checked
    once, step by step, never re-validated whole.
    """

    __slots__ = ("call_ids", "count", "message_ids", "open_calls")

    def __init__(self) -> None:
        # dicts as ordered sets: a dict of a few keys is half the size of a set
        self.message_ids: dict[str, None] = {}
        self.call_ids: dict[str, None] = {}
        # Calls of the last assistant message still waiting for a result, in call order.
        self.open_calls: dict[str, ToolCall] = {}
        self.count = 0

    def add(self, message: Message) -> None:
        index = self.count
        if message.id in self.message_ids:
            raise TranscriptError(
                "DUPLICATE_MESSAGE_ID", f"{_where(index, message)}: id is used twice"
            )
        if type(message) is ToolResultMessage:
            call = self.open_calls.pop(message.tool_call_id, None)
            if call is None:
                raise TranscriptError(
                    "UNEXPECTED_RESULT",
                    f"{_where(index, message)}: tool result for call "
                    f"{message.tool_call_id!r} does not answer an unanswered call of the "
                    "assistant message it follows",
                )
            if call.name != message.tool_name:
                raise TranscriptError(
                    "WRONG_TOOL_NAME",
                    f"{_where(index, message)}: tool result names tool "
                    f"{message.tool_name!r} but call {call.id!r} is to {call.name!r}",
                )
        else:
            self.require_answered(index)
            if type(message) is AssistantMessage:
                for block in message.content:
                    if type(block) is ToolCall:
                        if block.id in self.call_ids:
                            raise TranscriptError(
                                "DUPLICATE_CALL_ID",
                                f"{_where(index, message)}: tool call id {block.id!r} is "
                                "used twice",
                            )
                        self.call_ids[block.id] = None
                        self.open_calls[block.id] = block
        self.message_ids[message.id] = None
        self.count += 1

    def require_answered(self, index: int | None = None) -> None:
        """Raise ``MISSING_RESULT`` if the last assistant message has an unanswered call."""
        if self.open_calls:
            missing = ", ".join(repr(call_id) for call_id in self.open_calls)
            where = "end of transcript" if index is None else f"before message {index}"
            raise TranscriptError(
                "MISSING_RESULT", f"{where}: tool call(s) {missing} have no result"
            )


def _as_sequence(messages: Iterable[object]) -> Sequence[object]:
    if type(messages) in (list, tuple):
        return messages  # type: ignore[return-value]
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable):
        raise TypeError(f"messages must be a list or tuple, got {type(messages).__name__}")
    return tuple(messages)


def _snapshot(messages: Sequence[object]) -> tuple[tuple[Message, ...], _Linker]:
    """Check a whole transcript; return it rebuilt and the linker that checked it."""
    linker = _Linker()
    out = []
    for index, message in enumerate(messages):
        checked = _checked_message(message, index)
        linker.add(checked)
        out.append(checked)
    linker.require_answered()
    return tuple(out), linker


def validate_transcript(messages: Iterable[Message]) -> None:
    """Raise ``TranscriptError`` unless ``messages`` is a transcript a provider accepts.

    Checks: every item is a message with fields of the right types; strings
    are valid Unicode; tool arguments are plain JSON within the limits;
    message ids and tool call ids are unique; every tool result answers an
    unanswered call of the assistant message it follows, with the same tool
    name; every call has exactly one result, placed after its assistant
    message and before any other user or assistant message.
    """
    _snapshot(_as_sequence(messages))


def tool_result(call: ToolCall, content: str, is_error: bool) -> ToolResultMessage:
    """The result message answering ``call`` (lone surrogates replaced: it must encode)."""
    return ToolResultMessage(
        id=f"tool-result-{call.id}",
        tool_call_id=call.id,
        tool_name=call.name,
        content=without_lone_surrogates(content),
        is_error=is_error,
    )


def _interrupted_result(call: ToolCall, taken: Container[str]) -> ToolResultMessage:
    result = tool_result(call, INTERRUPTED_RESULT_TEXT, True)
    if result.id in taken:
        raise TranscriptError(
            "DUPLICATE_MESSAGE_ID",
            f"cannot answer call {call.id!r}: id {result.id!r} is already used",
        )
    return result


def repair_transcript(messages: Iterable[Message]) -> tuple[Message, ...]:
    """Answer every unanswered tool call with an explicit error result.

    For a transcript cut by cancellation: each call left without a result
    gets ``ToolResultMessage(id=f"tool-result-{call.id}", ...,
    content="interrupted: no result was recorded", is_error=True)``, placed
    right after that assistant message's existing results. Nothing else is
    changed; any other defect still raises ``TranscriptError``. The result
    passes ``validate_transcript``.
    """
    linker = _Linker()
    out: list[Message] = []

    def close_open_calls() -> None:
        for call in list(linker.open_calls.values()):
            result = _interrupted_result(call, linker.message_ids)
            linker.add(result)
            out.append(result)

    for index, message in enumerate(_as_sequence(messages)):
        checked = _checked_message(message, index)
        if type(checked) is not ToolResultMessage:
            close_open_calls()
        linker.add(checked)
        out.append(checked)
    close_open_calls()
    return tuple(out)
