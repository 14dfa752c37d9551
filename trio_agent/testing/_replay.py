"""``ReplayModel``: replay the model responses recorded in a session ledger."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, cast, final

import attrs
import msgspec
import trio

from ..engine._transcript import Conversation
from ..ledger._records import (
    AttemptFailedRecord,
    CompactedRecord,
    MessageRecord,
    Record,
    SessionStartRecord,
    StepEndRecord,
    StepStartRecord,
    ToolResultRecord,
)
from ..messages._ir import AssistantMessage, Message, ToolCall, UserMessage
from ..model import (
    ContextOverflowError,
    ModelError,
    ModelRequest,
    ModelResponse,
    TransientModelError,
)
from ._scripted import chunks_of

__all__ = ["ReplayDivergenceError", "ReplayModel"]


class ReplayDivergenceError(ModelError):
    """The agent asked for something other than what was recorded."""


@final
@attrs.define
class _Step:
    request_id: str
    messages: Sequence[Message]
    failures: list[str] = attrs.field(factory=list)
    response: ModelResponse | None = None


def _response(message: AssistantMessage, request_id: str, stop: str, usage: Any) -> ModelResponse:
    return ModelResponse(
        id=message.id.removeprefix("message-"),
        request_id=request_id,
        content=message.content,
        stop_reason=stop,  # type: ignore[arg-type]
        usage=usage,
    )


def _steps(records: Iterable[Record]) -> tuple[list[_Step], str | None]:
    conversation = Conversation.from_messages(())
    steps: list[_Step] = []
    system: str | None = None
    current: _Step | None = None
    for record in records:
        kind = type(record)
        if kind is SessionStartRecord:
            system = record.system  # type: ignore[union-attr]
        elif kind is StepStartRecord:
            current = _Step(record.request_id, conversation.snapshot())  # type: ignore[union-attr]
            steps.append(current)
        elif kind is AttemptFailedRecord and current is not None:
            current.failures.append(cast(AttemptFailedRecord, record).error)
        elif kind is MessageRecord:
            message = record.message  # type: ignore[union-attr]
            if type(message) is AssistantMessage and current is not None:
                # a step that never reached step/end (it failed or was cancelled in
                # its tools) still got this response
                has_calls = any(type(b) is ToolCall for b in message.content)
                stop = "tool_call" if has_calls else "stop"
                current.response = _response(
                    message,
                    current.request_id,
                    stop,
                    record.usage,  # type: ignore[union-attr]
                )
            conversation.append(message)
        elif kind is ToolResultRecord:
            conversation.append(record.result)  # type: ignore[union-attr]
        elif kind is StepEndRecord and current is not None:
            if current.response is not None:
                current.response = msgspec.structs.replace(
                    current.response,
                    request_id=current.request_id,
                    stop_reason=record.stop_reason,  # type: ignore[union-attr]
                    usage=record.usage or current.response.usage,  # type: ignore[union-attr]
                )
            current = None
        elif kind is CompactedRecord:
            conversation.replace(record.messages)  # type: ignore[union-attr]
    return steps, system


def _recorded_error(text: str) -> ModelError:
    """The recorded failure, as the kind of error it was (``Type: message``)."""
    kind, _, message = text.partition(": ")
    if kind == "ContextOverflowError":
        return ContextOverflowError(message)
    if kind == "TransientModelError":
        return TransientModelError(message)
    return ModelError(f"replayed failure: {text}")


def _where(a: object, b: object) -> str:
    """Where two reprs first differ, with some context around it."""
    left, right = repr(a), repr(b)
    at = next(
        (i for i, (x, y) in enumerate(zip(left, right, strict=False)) if x != y),
        min(len(left), len(right)),
    )
    start = max(0, at - 60)
    sent, recorded = left[start : at + 60], right[start : at + 60]
    return f"at character {at}: sent ...{sent}..., recorded ...{recorded}..."


_MADE_ID = re.compile(r"user-[0-9a-f]{12}")
"""The id a session gives a user message it made from a str (a random one)."""


def _same(sent: Message, kept: Message) -> bool:
    """Whether a message sent matches the recorded one: equal, or both user messages
    a session made from a str (``agent.prompt("...")``), whose random ids differ
    from run to run: those match by content."""
    if sent == kept:
        return True
    return (
        type(sent) is UserMessage
        and type(kept) is UserMessage
        and sent.content == kept.content
        and _MADE_ID.fullmatch(sent.id) is not None
        and _MADE_ID.fullmatch(kept.id) is not None
    )


@final
class ReplayModel:
    """A ``Model`` that answers with the responses a session ledger recorded.

    Request ``n`` is checked against the recording: its id, its system
    prompt, and its messages against the transcript recorded before that
    step (a user message a session made from a str matches by its content:
    its id is random); an agent that uses ``transform_context`` passes the same hook here,
    and it is applied to the recording before comparing. A difference raises
    ``ReplayDivergenceError`` naming the request, the first message that
    differs and where. Recorded failed attempts are replayed first, as the
    kind of error they were (``TransientModelError``, ``ContextOverflowError``
    or ``ModelError``), so retries happen as they did. Tool specs are not
    recorded, so they are not compared.
    """

    def __init__(
        self,
        records: Iterable[Record],
        *,
        transform_context: Callable[[tuple[Message, ...]], Awaitable[Sequence[Message]]]
        | None = None,
    ) -> None:
        self._steps, self._system = _steps(records)
        self._transform = transform_context
        self._index = 0
        self._failed = 0
        self.requests: list[ModelRequest] = []

    @classmethod
    async def from_store(cls, store: Any, session_id: str, **options: Any) -> ReplayModel:
        """Load the recording of ``session_id`` from a ``SessionStore``."""
        return cls((await store.load(session_id)).records, **options)

    @property
    def remaining(self) -> int:
        """Recorded steps not replayed yet."""
        return len(self._steps) - self._index

    def stream(self, request: ModelRequest) -> _ReplayStream:
        self.requests.append(request)
        if self._index >= len(self._steps):
            raise ReplayDivergenceError(
                f"{request.id}: the recording has only {len(self._steps)} requests"
            )
        return _ReplayStream(self._check, self._next, request, self._steps[self._index])

    async def _check(self, request: ModelRequest, step: _Step) -> None:
        def diverged(problem: str) -> ReplayDivergenceError:
            return ReplayDivergenceError(f"{request.id} diverges from the recording: {problem}")

        if request.id != step.request_id:
            raise diverged(f"request id is {request.id!r}, the recording has {step.request_id!r}")
        if self._system is not None and request.system != self._system:
            raise diverged(f"system prompt differs {_where(request.system, self._system)}")
        recorded = step.messages
        if self._transform is not None:
            recorded = tuple(await self._transform(tuple(recorded)))
        for index, (sent, kept) in enumerate(zip(request.messages, recorded, strict=False)):
            if not _same(sent, kept):
                raise diverged(f"message {index} ({kept.id}) differs {_where(sent, kept)}")
        if len(request.messages) != len(recorded):
            raise diverged(f"{len(request.messages)} messages sent, {len(recorded)} recorded")

    def _next(self, step: _Step) -> ModelResponse:
        if self._failed < len(step.failures):
            self._failed += 1
            raise _recorded_error(step.failures[self._failed - 1])
        self._index += 1
        self._failed = 0
        if step.response is None:
            raise ModelError(f"{step.request_id}: the recorded step got no response")
        return step.response


@final
class _ReplayStream:
    def __init__(
        self,
        check: Callable[[ModelRequest, _Step], Awaitable[None]],
        next_response: Callable[[_Step], ModelResponse],
        request: ModelRequest,
        step: _Step,
    ) -> None:
        self._check = check
        self._next = next_response
        self._request = request
        self._step = step
        self._chunks: list[Any] = []
        self._response: ModelResponse | None = None

    async def __aenter__(self) -> _ReplayStream:
        await trio.lowlevel.checkpoint()
        await self._check(self._request, self._step)
        self._response = self._next(self._step)
        self._chunks = chunks_of(self._response.content)
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
        assert self._response is not None
        return self._response
