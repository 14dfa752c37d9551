"""The message IR: blocks, messages, ``TranscriptError``, and the helpers that build
them (``tool_result``, ``text_from_assistant``, ``content_text``). The rules that
check a whole transcript are ``_rules``'s; the package page says what a transcript is."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from msgspec import Meta, Struct

from ..limits import without_lone_surrogates

__all__ = [
    "AssistantMessage",
    "Block",
    "DocumentBlock",
    "ImageBlock",
    "InputBlock",
    "Message",
    "RedactedThinkingBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "content_text",
    "ToolResultMessage",
    "TranscriptError",
    "UserMessage",
    "text_from_assistant",
]


# Every wire struct (messages, blocks, chunks, requests, events, results) is
# frozen plain data that cannot take part in a reference cycle, so it is
# ``gc=False``: 16 B less per object, and the cyclic collector never walks a
# transcript. (A struct a caller builds around a cycle of its own would leak
# that cycle, never crash.)
class TextBlock(Struct, frozen=True, gc=False, tag_field="type", tag="text"):
    """Text: the assistant's, or a part of user or tool-result content."""

    type: ClassVar[Literal["text"]] = "text"

    text: Annotated[str, Meta(description="The text.")]


_MEDIA_DATA = Meta(
    description="The bytes themselves (base64 in JSON); exactly one of data and url is set."
)
_MEDIA_URL = Meta(
    description="An http(s) URL the provider fetches; exactly one of data and url is set."
)


# Image and document blocks are weakly referable (which msgspec allows only with
# gc on): an adapter keeps an image's base64 form while the block lives, and no
# longer. They are few, so the collector's cost is nothing to speak of.
class ImageBlock(Struct, frozen=True, weakref=True, tag_field="type", tag="image"):
    """An image in user or tool-result content: its bytes, or a URL.

    ``media_type`` is one of ``limits.IMAGE_MEDIA_TYPES``; the bytes are at
    most ``limits.MAX_MEDIA_BYTES``.
    """

    type: ClassVar[Literal["image"]] = "image"

    media_type: Annotated[str, Meta(description="image/png, image/jpeg, image/gif or image/webp.")]
    data: Annotated[bytes | None, _MEDIA_DATA] = None
    url: Annotated[str | None, _MEDIA_URL] = None


class DocumentBlock(Struct, frozen=True, weakref=True, tag_field="type", tag="document"):
    """A document (a PDF, plain text) in user or tool-result content.

    ``media_type`` is one of ``limits.DOCUMENT_MEDIA_TYPES``.
    """

    type: ClassVar[Literal["document"]] = "document"

    media_type: Annotated[str, Meta(description="application/pdf or text/plain.")]
    data: Annotated[bytes | None, _MEDIA_DATA] = None
    url: Annotated[str | None, _MEDIA_URL] = None
    title: Annotated[str, Meta(description='A title the model may cite; "" for none.')] = ""


class ThinkingBlock(Struct, frozen=True, gc=False, tag_field="type", tag="thinking"):
    """The model's visible reasoning, kept to be sent back as it came.

    ``signature`` is the provider's proof that the text is unchanged
    (Anthropic); "" where the provider gives none (OpenAI-compatible
    ``reasoning_content``, a Responses reasoning summary).
    """

    type: ClassVar[Literal["thinking"]] = "thinking"

    thinking: Annotated[str, Meta(description="The reasoning text.")]
    signature: Annotated[
        str, Meta(description='The provider\'s signature of it, exactly as received; "" if none.')
    ] = ""


class RedactedThinkingBlock(
    Struct, frozen=True, gc=False, tag_field="type", tag="redacted_thinking"
):
    """Reasoning the provider keeps encrypted: opaque ``data`` to send back unchanged.

    Anthropic's ``redacted_thinking`` data, or a Responses API reasoning item
    (its JSON, with ``encrypted_content``). As a stream chunk it arrives whole.
    """

    type: ClassVar[Literal["redacted_thinking"]] = "redacted_thinking"

    data: Annotated[
        str, Meta(description="The provider's opaque reasoning data, exactly as received.")
    ]


class ToolCall(Struct, frozen=True, gc=False, tag_field="type", tag="tool_call"):
    """A tool the assistant asked for, with plain-JSON ``arguments``.

    As a stream chunk it is the whole call: provider adapters assemble the
    argument fragments before they hand it over.
    """

    type: ClassVar[Literal["tool_call"]] = "tool_call"

    id: Annotated[
        str,
        Meta(
            description="The call's id (the provider's), unique in the transcript; the result "
            "answering it carries it as tool_call_id."
        ),
    ]
    name: Annotated[str, Meta(description="The name of the tool to call.")]
    arguments: Annotated[
        dict[str, Any],
        Meta(
            description="The call's arguments: a JSON object of plain JSON values, within the "
            "sizes trio_agent.limits allows."
        ),
    ]


Block = TextBlock | ToolCall | ThinkingBlock | RedactedThinkingBlock
"""A block of an assistant message."""

InputBlock = TextBlock | ImageBlock | DocumentBlock
"""A block of user or tool-result content."""


class UserMessage(Struct, frozen=True, gc=False, tag_field="role", tag="user"):
    """Input from the user."""

    role: ClassVar[Literal["user"]] = "user"

    id: Annotated[
        str,
        Meta(
            description='The message\'s id, unique in the transcript ("user-" and 12 hex '
            "digits when a session made it from a str)."
        ),
    ]
    content: Annotated[
        str | tuple[InputBlock, ...],
        Meta(description="The user's text, or text, image and document blocks."),
    ]


class AssistantMessage(Struct, frozen=True, gc=False, tag_field="role", tag="assistant"):
    """A complete model response: its blocks as the model gave them."""

    role: ClassVar[Literal["assistant"]] = "assistant"

    id: Annotated[
        str,
        Meta(
            description='The message\'s id, unique in the transcript ("message-" + the model '
            "response's id when the loop made it)."
        ),
    ]
    content: Annotated[
        tuple[Block, ...],
        Meta(
            description="The response's text, thinking and tool-call blocks, in the model's order."
        ),
    ]


class ToolResultMessage(Struct, frozen=True, gc=False, tag_field="role", tag="tool_result"):
    """The answer to one tool call; ``is_error`` marks an error the model should see."""

    role: ClassVar[Literal["tool_result"]] = "tool_result"

    id: Annotated[
        str,
        Meta(
            description='The message\'s id, unique in the transcript ("tool-result-" + the '
            "call's id when the loop made it)."
        ),
    ]
    tool_call_id: Annotated[str, Meta(description="The id of the tool call it answers.")]
    tool_name: Annotated[str, Meta(description="The name of the tool that call asked for.")]
    content: Annotated[
        str | tuple[InputBlock, ...],
        Meta(
            description="What the model sees: text (in a session, cut to "
            "max_tool_result_chars), or text, image and document blocks."
        ),
    ]
    is_error: Annotated[
        bool,
        Meta(
            description="True when the result reports a failure to the model (the tool raised, "
            "was unknown, blocked or interrupted, or its arguments were invalid)."
        ),
    ] = False


Message = UserMessage | AssistantMessage | ToolResultMessage

INTERRUPTED_RESULT_TEXT = "interrupted: no result was recorded"


class TranscriptError(ValueError):
    """A transcript a provider would reject, or a message that is not a message.

    ``code`` is a stable string a program can match:
    ``NOT_A_MESSAGE``, ``INVALID_FIELD``, ``INVALID_UNICODE``,
    ``INVALID_ARGUMENTS``, ``DUPLICATE_MESSAGE_ID``, ``DUPLICATE_CALL_ID``,
    ``UNEXPECTED_RESULT``, ``WRONG_TOOL_NAME``, ``MISSING_RESULT``,
    ``TOO_MANY_MESSAGES``, ``INVALID_MEDIA`` (a media type off the
    allow-list, not exactly one of data and url, a URL that is not http(s)),
    ``MEDIA_TOO_LARGE`` (past ``MAX_MEDIA_BYTES`` or
    ``MAX_MESSAGE_MEDIA_BYTES``).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def text_from_assistant(message: AssistantMessage) -> str:
    """The text blocks of ``message`` concatenated with no separator (thinking is not text)."""
    return "".join(block.text for block in message.content if type(block) is TextBlock)


def content_text(content: str | tuple[InputBlock, ...]) -> str:
    """User or tool-result content as text: the str itself, or its text blocks
    joined with no separator (images and documents are not text)."""
    if type(content) is str:
        return content
    return "".join(block.text for block in content if type(block) is TextBlock)


def tool_result(
    call: ToolCall, content: str | tuple[InputBlock, ...], is_error: bool
) -> ToolResultMessage:
    """The result message answering ``call`` (lone surrogates replaced: it must encode)."""
    if isinstance(content, str):  # the hot path: one test
        content = without_lone_surrogates(content)
    else:
        content = tuple(
            TextBlock(without_lone_surrogates(b.text)) if isinstance(b, TextBlock) else b
            for b in content
        )
    return ToolResultMessage(
        id=f"tool-result-{call.id}",
        tool_call_id=call.id,
        tool_name=call.name,
        content=content,
        is_error=is_error,
    )
