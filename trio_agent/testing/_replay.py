"""``ReplayModel``: replay the model responses recorded in a session ledger."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, final

import attrs
import trio

from ..engine import Conversation
from ..ledger import (
    AttemptFailedRecord,
    CompactedRecord,
    MessageRecord,
    Record,
    StepEndRecord,
    StepStartRecord,
    ToolResultRecord,
)
from ..messages import AssistantMessage, Message, TextBlock, _Linker
from ..model import ModelError, ModelRequest, ModelResponse, TextDelta, TransientModelError

__all__ = ["ReplayDivergenceError", "ReplayModel"]


class ReplayDivergenceError(ModelError):
    """The agent asked for something other than what was recorded."""


@final
@attrs.frozen
class _Step:
    request_id: str
    messages: tuple[Message, ...]
    failures: tuple[str, ...]
    response: ModelResponse | None


def _steps(records: Iterable[Record]) -> list[_Step]:
    conversation = Conversation([], _Linker())
    steps: list[_Step] = []
    current: dict[str, Any] | None = None
    for record in records:
        kind = type(record)
        if kind is StepStartRecord:
            current = {
                "request_id": record.request_id,  # type: ignore[union-attr]
                "messages": conversation.snapshot(),
                "failures": [],
                "response": None,
            }
            steps.append(current)  # type: ignore[arg-type]
        elif kind is AttemptFailedRecord and current is not None:
            current["failures"].append(record.error)  # type: ignore[union-attr]
        elif kind is MessageRecord:
            message = record.message  # type: ignore[union-attr]
            if type(message) is AssistantMessage and current is not None:
                current["message"] = message
            conversation.append(message)
        elif kind is ToolResultRecord:
            conversation.append(record.result)  # type: ignore[union-attr]
        elif kind is StepEndRecord and current is not None:
            message = current.pop("message", None)
            if message is not None:
                current["response"] = ModelResponse(
                    id=message.id.removeprefix("message-"),
                    request_id=current["request_id"],
                    content=message.content,
                    stop_reason=record.stop_reason,  # type: ignore[union-attr]
                )
            current = None
        elif kind is CompactedRecord:
            conversation.replace(record.messages)  # type: ignore[union-attr]
    return [
        _Step(s["request_id"], s["messages"], tuple(s["failures"]), s.get("response"))
        for s in steps  # type: ignore[union-attr]
    ]


@final
class ReplayModel:
    """A ``Model`` that answers with the responses a session ledger recorded.

    Request ``n`` is checked against the recording: its id, and its messages
    against the transcript recorded before that step (so an agent that uses
    ``transform_context`` must replay with the same one). A difference raises
    ``ReplayDivergenceError`` naming the request and the first message that
    differs. Recorded failed attempts are replayed as ``TransientModelError``
    before the recorded response, so retries happen as they did.
    """

    def __init__(self, records: Iterable[Record]) -> None:
        self._steps = _steps(records)
        self._index = 0
        self._failed = 0
        self.requests: list[ModelRequest] = []

    @classmethod
    async def from_store(cls, store: Any, session_id: str) -> ReplayModel:
        """Load the recording of ``session_id`` from a ``SessionStore``."""
        return cls((await store.load(session_id)).records)

    @property
    def remaining(self) -> int:
        """Recorded steps not replayed yet."""
        return len(self._steps) - self._index

    def _diverged(self, request: ModelRequest, step: _Step) -> str | None:
        if request.id != step.request_id:
            return f"request id is {request.id!r}, the recording has {step.request_id!r}"
        sent, recorded = request.messages, step.messages
        for index, (a, b) in enumerate(zip(sent, recorded, strict=False)):
            if a != b:
                return f"message {index} differs: sent {a!r:.200}, recorded {b!r:.200}"
        if len(sent) != len(recorded):
            return f"{len(sent)} messages sent, {len(recorded)} recorded"
        return None

    def stream(self, request: ModelRequest) -> _ReplayStream:
        self.requests.append(request)
        if self._index >= len(self._steps):
            raise ReplayDivergenceError(
                f"{request.id}: the recording has only {len(self._steps)} requests"
            )
        step = self._steps[self._index]
        problem = self._diverged(request, step)
        if problem is not None:
            raise ReplayDivergenceError(f"{request.id} diverges from the recording: {problem}")
        if self._failed < len(step.failures):
            self._failed += 1
            raise TransientModelError(f"replayed failure: {step.failures[self._failed - 1]}")
        self._index += 1
        self._failed = 0
        if step.response is None:
            raise ModelError(f"{request.id}: the recorded step got no response")
        return _ReplayStream(step.response)


@final
class _ReplayStream:
    def __init__(self, response: ModelResponse) -> None:
        self._response = response
        self._chunks = [
            TextDelta(block.text) if type(block) is TextBlock else block
            for block in response.content
        ]

    async def __aenter__(self) -> _ReplayStream:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        return None

    def __aiter__(self) -> _ReplayStream:
        return self

    async def __anext__(self) -> Any:
        await trio.lowlevel.checkpoint()
        if not self._chunks:
            raise StopAsyncIteration
        return self._chunks.pop(0)

    async def response(self) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        return self._response
