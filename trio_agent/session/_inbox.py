"""Input queued for a session (``Inbox``: steering, follow-ups, reserved ids) and
what a session reads off its transcript between turns (``owes_reply``, the
results of calls a cut turn left open)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import final

from ..engine._transcript import Conversation
from ..messages._ir import (
    INTERRUPTED_RESULT_TEXT,
    AssistantMessage,
    Message,
    ToolResultMessage,
    TranscriptError,
    UserMessage,
    tool_result,
)

__all__ = [
    "RESERVED_PREFIXES",
    "Inbox",
    "interrupted_results",
    "new_id",
    "owes_reply",
]

RESERVED_PREFIXES = ("message-", "tool-result-", "output-retry-")
"""Id prefixes of the messages the loop makes; input messages may not use them."""


def _added(queue: list[Message] | tuple[()], message: Message) -> list[Message]:
    """``queue`` with ``message`` at its end: a list of its own from the first one
    (the empty queue is the shared empty tuple)."""
    if queue:
        queue.append(message)
        return queue
    return [message]


def owes_reply(conversation: Conversation) -> bool:
    """Whether the model owes an answer: the transcript ends on a user message or a
    tool result, or on an assistant message whose calls are not all answered."""
    messages = conversation.messages
    if not messages:
        return False
    return type(messages[-1]) is not AssistantMessage or bool(conversation.linker.open_calls)


def interrupted_results(conversation: Conversation) -> tuple[ToolResultMessage, ...]:
    """Results for the calls a cut turn left open: interrupted, as errors."""
    return tuple(
        tool_result(call, INTERRUPTED_RESULT_TEXT, True) for call in conversation.unanswered_calls()
    )


def new_id(prefix: str) -> str:
    """A fresh id such as ``user-0123456789ab``."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@final
class Inbox:
    """Input queued for the session: steering (delivered before the next request
    of the current turn), follow-ups (when it would end), and the ids of those
    and of pending prompts, reserved so nothing can clash with them later."""

    # a queue is the shared empty tuple until something is queued, then a list of its
    # own, and the empty tuple again once taken whole (an empty list is 56 B a
    # session, an empty deque 600 B). ``reserved`` is a dict: an empty set is 216 B.
    __slots__ = ("follow_ups", "reserved", "steering")

    def __init__(self) -> None:
        self.steering: list[Message] | tuple[()] = ()
        self.follow_ups: list[Message] | tuple[()] = ()
        self.reserved: dict[str, None] = {}

    def admit(self, message: str | UserMessage, conversation: Conversation) -> UserMessage:
        """Check an input message (``TypeError``/``TranscriptError`` at once) and
        reserve its id, so nothing can clash with it later."""
        if type(message) is str:
            user = UserMessage(new_id("user"), message)
        elif type(message) is UserMessage:
            user = message
        else:
            raise TypeError(f"expected a str or UserMessage, got {type(message).__name__}")
        conversation.check_new(user)
        if user.id.startswith(RESERVED_PREFIXES):
            raise TranscriptError(
                "RESERVED_ID",
                f"message id {user.id!r} uses a prefix the loop keeps for its own messages "
                f"({', '.join(RESERVED_PREFIXES)})",
            )
        if user.id in self.reserved:
            raise TranscriptError("DUPLICATE_MESSAGE_ID", f"message id {user.id!r} is queued")
        self.reserved[user.id] = None
        return user

    def steer(self, message: str | UserMessage, conversation: Conversation) -> None:
        """Queue ``message`` (checked, ``admit``) for the next request."""
        self.steering = _added(self.steering, self.admit(message, conversation))

    def follow_up(self, message: str | UserMessage, conversation: Conversation) -> None:
        """Queue ``message`` (checked, ``admit``) for when the turn would end."""
        self.follow_ups = _added(self.follow_ups, self.admit(message, conversation))

    def clear(self) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
        """Take both queues: (steering, follow-ups)."""
        return self.take_steering(), self.take_follow_ups()

    def take_steering(self) -> tuple[Message, ...]:
        taken, self.steering = tuple(self.steering), ()
        return self._released(taken)

    def take_follow_ups(self) -> tuple[Message, ...]:
        taken, self.follow_ups = tuple(self.follow_ups), ()
        return self._released(taken)

    def _released(self, taken: tuple[Message, ...]) -> tuple[Message, ...]:
        """``taken``, a whole queue, whose ids are no longer reserved (once in the
        transcript, it refuses them)."""
        for message in taken:
            self.reserved.pop(message.id, None)
        return taken

    def release(self, prompt: Message | None) -> None:
        """Let ``prompt``'s id go: its turn did not start, so it took nothing."""
        if prompt is not None:
            self.reserved.pop(prompt.id, None)

    def take_input(self, stop_reason: str) -> tuple[Message, ...]:
        """What continues the turn after a step: steering first, then (when the model
        stopped) the follow-ups."""
        if self.steering:
            return self.take_steering()
        if stop_reason != "tool_call":
            return self.take_follow_ups()
        return ()

    def requeue(self, taken: Sequence[Message]) -> None:
        """Put a turn's input back, first in line (its turn could not take it)."""
        self.follow_ups = [*taken, *self.follow_ups] or ()
        self.reserved.update(dict.fromkeys(message.id for message in taken))

    def take_for_turn(self, prompt: Message | None) -> tuple[Message, ...]:
        """A new turn's input: its prompt with the queued steering, or else the
        follow-ups."""
        taken = self.take_steering()
        if prompt is not None:
            self.reserved.pop(prompt.id, None)
            taken = (prompt, *taken)
        if not taken:
            taken = self.take_follow_ups()
        return taken
