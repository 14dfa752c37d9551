"""The message IR, and transcript validation and repair.

Messages are frozen msgspec Structs tagged by ``role``; their content is
blocks tagged by ``type``: text, images and documents from the user or a
tool; text, thinking and tool calls from the assistant. A transcript is a
sequence of them that a provider would accept: unique ids, and every tool
call of an assistant message answered by exactly one result placed right
after it. ``validate_transcript`` checks that; ``repair_transcript`` answers
calls that a cancellation left dangling, explicitly and never silently.
"""

from __future__ import annotations

from .._public import publish as _publish
from ._ir import AssistantMessage as AssistantMessage
from ._ir import Block as Block
from ._ir import DocumentBlock as DocumentBlock
from ._ir import ImageBlock as ImageBlock
from ._ir import InputBlock as InputBlock
from ._ir import Message as Message
from ._ir import RedactedThinkingBlock as RedactedThinkingBlock
from ._ir import TextBlock as TextBlock
from ._ir import ThinkingBlock as ThinkingBlock
from ._ir import ToolCall as ToolCall
from ._ir import ToolResultMessage as ToolResultMessage
from ._ir import TranscriptError as TranscriptError
from ._ir import UserMessage as UserMessage
from ._ir import content_text as content_text
from ._ir import text_from_assistant as text_from_assistant
from ._rules import repair_transcript as repair_transcript
from ._rules import validate_transcript as validate_transcript
from ._view import Transcript as Transcript

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
    "Transcript",
    "TranscriptError",
    "UserMessage",
    "repair_transcript",
    "text_from_assistant",
    "validate_transcript",
]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
