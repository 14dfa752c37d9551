"""The transcript's rules, checked once and incrementally: one table of block
checks (``BLOCK_CHECKS``), the id and call/result ``Linker``, whole-transcript
checks (``validate_transcript``) and repair (``repair_transcript``).

A block type's checks live in ``BLOCK_CHECKS``, which every caller uses:
``validate_transcript`` (and ``checked_message``), the step's response check
and its chunk check; each turns a ``BlockError`` into its own error. The
engine's ``Conversation`` grows a transcript through the same ``Linker``, so a
live run, a resumed session and a checked transcript obey one set of rules.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Container, Iterable, Sequence
from typing import TYPE_CHECKING, Any, final

from ..limits import (
    DOCUMENT_MEDIA_TYPES,
    IMAGE_MEDIA_TYPES,
    MAX_CONTENT_BLOCKS,
    MAX_MEDIA_BYTES,
    MAX_MEDIA_URL_CHARS,
    MAX_MESSAGE_MEDIA_BYTES,
    OUTPUT_TOOL_NAME,
    ArgumentsError,
    check_arguments,
    is_valid_unicode,
)
from ._ir import (
    INTERRUPTED_RESULT_TEXT,
    AssistantMessage,
    Block,
    DocumentBlock,
    ImageBlock,
    InputBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    TranscriptError,
    UserMessage,
    tool_result,
)

if TYPE_CHECKING:
    pass

__all__ = [
    "ASSISTANT_BLOCKS",
    "BLOCK_CHECKS",
    "INPUT_BLOCKS",
    "BlockError",
    "Linker",
    "check_block",
    "check_content",
    "check_text_field",
    "checked_message",
    "repair_transcript",
    "snapshot",
    "validate_transcript",
]


class BlockError(Exception):
    """A field of a block that is not what it must be. ``code`` is the
    ``TranscriptError`` code; ``problem`` starts with its own separator
    (``" must be a str, got int"``, ``": more than 256 ..."``)."""

    def __init__(self, code: str, field: str, problem: str) -> None:
        super().__init__(f"{field}{problem}")
        self.code = code
        self.field = field
        self.problem = problem


def check_text_field(value: object, field: str) -> None:
    """``BlockError`` unless ``value`` is a str of valid Unicode."""
    if type(value) is not str:
        raise BlockError("INVALID_FIELD", field, f" must be a str, got {type(value).__name__}")
    if not is_valid_unicode(value):
        raise BlockError("INVALID_UNICODE", field, " is not valid Unicode (lone surrogate)")


# Each check first tests the common case inline (an ASCII str: one test, no call);
# only anything else goes through check_text_field. These run for every block,
# message and result of every step.


def _text_block(block: TextBlock) -> TextBlock:
    text = block.text
    if type(text) is not str or not text.isascii():
        check_text_field(text, "text")
    return block


def _tool_call(block: ToolCall) -> ToolCall:
    call_id, name = block.id, block.name
    if type(call_id) is not str or not call_id.isascii():
        check_text_field(call_id, "id")
    if type(name) is not str or not name.isascii():
        check_text_field(name, "name")
    try:
        arguments = check_arguments(block.arguments, output=name == OUTPUT_TOOL_NAME)
    except ArgumentsError as exc:
        raise BlockError("INVALID_ARGUMENTS", "arguments", f": {exc}") from None
    return ToolCall(block.id, block.name, arguments)  # a private copy of the arguments


def _str_field(value: object, field: str) -> None:
    if type(value) is not str or not value.isascii():
        check_text_field(value, field)


def _media(block: ImageBlock | DocumentBlock, allowed: frozenset[str]) -> None:
    kind = "image" if type(block) is ImageBlock else "document"
    _str_field(block.media_type, "media_type")
    if block.media_type not in allowed:
        raise BlockError(
            "INVALID_MEDIA",
            "media_type",
            f" {block.media_type!r} is not an allowed {kind} type ({', '.join(sorted(allowed))})",
        )
    data, url = block.data, block.url
    if (data is None) == (url is None):
        raise BlockError("INVALID_MEDIA", "data", " and url: exactly one must be set")
    if data is not None:
        if type(data) is not bytes:
            raise BlockError("INVALID_FIELD", "data", f" must be bytes, got {type(data).__name__}")
        if not data:
            raise BlockError("INVALID_MEDIA", "data", " is empty")
        if len(data) > MAX_MEDIA_BYTES:
            raise BlockError(
                "MEDIA_TOO_LARGE", "data", f": {len(data)} bytes, more than {MAX_MEDIA_BYTES}"
            )
    else:
        _str_field(url, "url")
        assert type(url) is str
        if len(url) > MAX_MEDIA_URL_CHARS:
            raise BlockError(
                "INVALID_MEDIA", "url", f": {len(url)} characters, more than {MAX_MEDIA_URL_CHARS}"
            )
        if (
            not url.lower().startswith(("https://", "http://"))
            or not url.isprintable()
            or " " in url
            or not urllib.parse.urlsplit(url).hostname
        ):
            raise BlockError(
                "INVALID_MEDIA",
                "url",
                f" {url[:64]!r} is not an http(s) URL with a host (no spaces, no controls)",
            )


def _image_block(block: ImageBlock) -> ImageBlock:
    _media(block, IMAGE_MEDIA_TYPES)
    return block


def _document_block(block: DocumentBlock) -> DocumentBlock:
    _media(block, DOCUMENT_MEDIA_TYPES)
    _str_field(block.title, "title")
    return block


def _thinking_block(block: ThinkingBlock) -> ThinkingBlock:
    _str_field(block.thinking, "thinking")
    _str_field(block.signature, "signature")
    return block


def _redacted_block(block: RedactedThinkingBlock) -> RedactedThinkingBlock:
    _str_field(block.data, "data")
    return block


BLOCK_CHECKS: dict[type, Callable[[Any], Any]] = {
    TextBlock: _text_block,
    ToolCall: _tool_call,
    ThinkingBlock: _thinking_block,
    RedactedThinkingBlock: _redacted_block,
    ImageBlock: _image_block,
    DocumentBlock: _document_block,
}
"""Block type -> its check, returning the block as a run keeps it. One edit here
(and in the step's merging rule) adds a block type."""

ASSISTANT_BLOCKS: frozenset[type] = frozenset(
    {TextBlock, ToolCall, ThinkingBlock, RedactedThinkingBlock}
)
"""The block types an assistant message (and a model response) may hold."""
INPUT_BLOCKS: frozenset[type] = frozenset({TextBlock, ImageBlock, DocumentBlock})
"""The block types user and tool-result content may hold."""


def check_block(block: object) -> Block | None:
    """The checked assistant block, ``BlockError`` for a bad field, None for a type
    that is not an assistant block."""
    kind = type(block)
    return BLOCK_CHECKS[kind](block) if kind in ASSISTANT_BLOCKS else None


def check_content(content: object) -> str | tuple[InputBlock, ...]:
    """User or tool-result content checked: a str of valid Unicode, or a tuple
    (or list) of at most ``MAX_CONTENT_BLOCKS`` input blocks whose media fit
    ``MAX_MESSAGE_MEDIA_BYTES`` together. ``BlockError`` names the field."""
    if type(content) is str:
        if not content.isascii():
            check_text_field(content, "content")
        return content
    if type(content) not in (tuple, list):
        raise BlockError(
            "INVALID_FIELD",
            "content",
            f" must be a str or a tuple of blocks, got {type(content).__name__}",
        )
    assert isinstance(content, tuple | list)
    if not content:
        raise BlockError(
            "INVALID_FIELD", "content", ' holds no block (a message without content is "")'
        )
    if len(content) > MAX_CONTENT_BLOCKS:
        raise BlockError(
            "INVALID_FIELD", "content", f": {len(content)} blocks, more than {MAX_CONTENT_BLOCKS}"
        )
    media = 0
    for position, block in enumerate(content):
        kind = type(block)
        if kind not in INPUT_BLOCKS:
            raise BlockError(
                "INVALID_FIELD",
                f"content[{position}]",
                f" is a {kind.__name__}, not a TextBlock, ImageBlock or DocumentBlock",
            )
        try:
            BLOCK_CHECKS[kind](block)
        except BlockError as exc:
            raise BlockError(exc.code, f"content[{position}].{exc.field}", exc.problem) from None
        if kind is not TextBlock and block.data is not None:
            media += len(block.data)
    if media > MAX_MESSAGE_MEDIA_BYTES:
        raise BlockError(
            "MEDIA_TOO_LARGE",
            "content",
            f": {media} bytes of media, more than {MAX_MESSAGE_MEDIA_BYTES} in one message",
        )
    return content if type(content) is tuple else tuple(content)


def _where(index: int, message: Any) -> str:
    ident = getattr(message, "id", None)
    return f"message {index} (id {ident!r})" if type(ident) is str else f"message {index}"


def _check_str(value: object, field: str, index: int, message: Any) -> None:
    if type(value) is str and value.isascii():
        return
    try:
        check_text_field(value, field)
    except BlockError as exc:
        raise TranscriptError(exc.code, f"{_where(index, message)}: {exc}") from None


def _checked_blocks(a: AssistantMessage, index: int) -> tuple[Block, ...]:
    if type(a.content) not in (tuple, list):
        raise TranscriptError(
            "INVALID_FIELD", f"{_where(index, a)}: content must be a tuple of blocks"
        )
    blocks: list[Block] = []
    for position, block in enumerate(a.content):
        try:
            checked = check_block(block)
        except BlockError as exc:
            raise TranscriptError(
                exc.code, f"{_where(index, a)}: content[{position}].{exc}"
            ) from None
        if checked is None:
            raise TranscriptError(
                "INVALID_FIELD",
                f"{_where(index, a)}: content[{position}] is a "
                f"{type(block).__name__}, not a TextBlock, ThinkingBlock, "
                "RedactedThinkingBlock or ToolCall",
            )
        blocks.append(checked)
    return tuple(blocks)


def _checked_content(
    message: UserMessage | ToolResultMessage, index: int
) -> tuple[InputBlock, ...]:
    try:
        content = check_content(message.content)
    except BlockError as exc:
        raise TranscriptError(exc.code, f"{_where(index, message)}: {exc}") from None
    assert type(content) is tuple
    return content


def checked_message(message: object, index: int) -> Message:
    """Check one message's own fields; return it rebuilt with private copies of mutable parts."""
    kind = type(message)
    if kind is UserMessage:
        u: UserMessage = message  # type: ignore[assignment]
        _check_str(u.id, "id", index, u)
        if type(u.content) is str:
            _check_str(u.content, "content", index, u)
            return u  # frozen and all-str: nothing to copy
        return UserMessage(u.id, _checked_content(u, index))
    if kind is ToolResultMessage:
        m: ToolResultMessage = message  # type: ignore[assignment]
        for field in ("id", "tool_call_id", "tool_name"):
            _check_str(getattr(m, field), field, index, m)
        if type(m.is_error) is not bool:
            raise TranscriptError("INVALID_FIELD", f"{_where(index, m)}: is_error must be a bool")
        if type(m.content) is str:
            _check_str(m.content, "content", index, m)
            return m
        return ToolResultMessage(
            m.id, m.tool_call_id, m.tool_name, _checked_content(m, index), m.is_error
        )
    if kind is AssistantMessage:
        a: AssistantMessage = message  # type: ignore[assignment]
        _check_str(a.id, "id", index, a)
        return AssistantMessage(a.id, _checked_blocks(a, index))
    raise TranscriptError(
        "NOT_A_MESSAGE",
        f"message {index} is a {kind.__name__}, not a UserMessage, "
        "AssistantMessage or ToolResultMessage",
    )


@final
class Linker:
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
            if self.open_calls:
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


def snapshot(
    messages: Sequence[object], *, answered: bool = True, blocks: bool = True
) -> tuple[tuple[Message, ...], Linker]:
    """Check a whole transcript; return it rebuilt and the linker that checked it.
    ``answered=False``: the last assistant message's calls may still be open.
    ``blocks=False``: messages whose blocks were checked before (a snapshot that
    matches its checksum): only their ids and links are, and they are kept as
    they are."""
    linker = Linker()
    add = linker.add
    if not blocks:
        for message in messages:
            add(message)  # type: ignore[arg-type]  # checked before: messages
        out: Sequence[Any] = messages
    else:
        out = []
        for index, message in enumerate(messages):
            checked = checked_message(message, index)
            add(checked)
            out.append(checked)
    if answered:
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
    snapshot(_as_sequence(messages))


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
    linker = Linker()
    out: list[Message] = []

    def close_open_calls() -> None:
        for call in list(linker.open_calls.values()):
            result = _interrupted_result(call, linker.message_ids)
            linker.add(result)
            out.append(result)

    for index, message in enumerate(_as_sequence(messages)):
        checked = checked_message(message, index)
        if type(checked) is not ToolResultMessage:
            close_open_calls()
        linker.add(checked)
        out.append(checked)
    close_open_calls()
    return tuple(out)
