"""``ScriptedModel``: a ``Model`` that replays scripted responses offline."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, final

import attrs
import trio

from ..messages._ir import Block, RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolCall
from ..model import Chunk, ModelRequest, ModelResponse, StopReason, TextDelta, ThinkingDelta, Usage
from ._reraise import replayable

__all__ = [
    "ScriptExhaustedError",
    "ScriptedModel",
    "ScriptedResponse",
    "chunks_of",
    "scripted_response",
]


def chunks_of(blocks: Sequence[Block], text_chunks: int = 1) -> list[Chunk]:
    """The chunks a model streams for response ``blocks``: each text block in
    ``text_chunks`` pieces, each thinking block as one delta, calls and
    redacted thinking whole. (Merged again, they are ``blocks``.)"""
    out: list[Chunk] = []
    for block in blocks:
        kind = type(block)
        if kind is TextBlock:
            out.extend(TextDelta(part) for part in _split(block.text, text_chunks))  # type: ignore[union-attr]
        elif kind is ThinkingBlock:
            out.append(ThinkingDelta(block.thinking, block.signature))  # type: ignore[union-attr]
        else:
            out.append(block)  # type: ignore[arg-type]
    return out


class ScriptExhaustedError(Exception):
    """The model was asked for more responses than its script holds."""


_UNSET: Any = object()


@final
@attrs.frozen
class ScriptedResponse:
    """One scripted answer, and how to stream it (or fail while streaming it).

    Build it with ``scripted_response``. ``chunks`` replaces the stream made
    from ``content``; ``response`` replaces the final response object;
    ``request_id`` overrides the id the response answers. ``hang_at=k``
    blocks forever before chunk ``k`` (``k == len(chunks)``: in
    ``response()``); ``raise_at=k`` raises ``error`` there instead.
    """

    id: str
    content: tuple[Block, ...]
    stop_reason: StopReason
    usage: Usage | None = None
    text_chunks: int = 1
    chunks: tuple[Any, ...] | None = None
    response: Any = _UNSET
    request_id: str | None = None
    hang_at: int | None = None
    raise_at: int | None = None
    error: BaseException | None = None
    _streamed: tuple[Any, ...] | None = attrs.field(
        init=False, default=None, eq=False, repr=False, alias="_streamed"
    )

    def stream_chunks(self) -> tuple[Any, ...]:
        """The chunks this response streams, in order (made once: a script is
        often replayed by many models)."""
        if self.chunks is not None:
            return self.chunks
        if self._streamed is None:
            object.__setattr__(self, "_streamed", tuple(chunks_of(self.content, self.text_chunks)))
        return self._streamed  # type: ignore[return-value]

    def final_response(self, request: ModelRequest) -> Any:
        if self.response is not _UNSET:
            return self.response
        return ModelResponse(
            id=self.id,
            request_id=request.id if self.request_id is None else self.request_id,
            content=self.content,
            stop_reason=self.stop_reason,
            usage=self.usage,
        )


def _split(text: str, parts: int) -> list[str]:
    """``text`` in ``parts`` pieces of near-equal code-point length (empty text: one piece)."""
    if parts <= 1 or len(text) <= 1:
        return [text]
    size, extra = divmod(len(text), parts)
    pieces, start = [], 0
    for index in range(min(parts, len(text))):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return [p for p in pieces if p] or [text]


def scripted_response(
    id: str,
    content: str | Sequence[Block],
    stop_reason: StopReason | Literal["toolCall"] | None = None,
    *,
    usage: Usage | None = None,
    text_chunks: int = 1,
    chunks: Sequence[Any] | None = None,
    response: Any = _UNSET,
    request_id: str | None = None,
    hang_at: int | None = None,
    raise_at: int | None = None,
    error: BaseException | None = None,
) -> ScriptedResponse:
    """A scripted answer: ``content`` is text or a sequence of blocks.

    ``stop_reason`` defaults to ``"tool_call"`` when the content has a tool
    call and ``"stop"`` otherwise. ``text_chunks`` splits each text block
    into that many deltas. See ``ScriptedResponse`` for the fault options:
    ``hang_at``/``raise_at`` outside ``0..len(chunks)`` (a fault that could
    never happen) is a ``ValueError``, an ``error`` that is not an exception a
    ``TypeError``.
    """
    blocks = _blocks(content)
    if stop_reason is None:
        stop_reason = "tool_call" if any(type(b) is ToolCall for b in blocks) else "stop"
    elif stop_reason == "toolCall":
        stop_reason = "tool_call"
    if type(text_chunks) is not int or text_chunks < 1:
        raise ValueError(f"text_chunks must be an int >= 1, got {text_chunks!r}")
    _check_faults(blocks, text_chunks, chunks, hang_at, raise_at, error)
    if raise_at is not None and error is None:
        error = RuntimeError(f"scripted failure in response {id!r}")
    return ScriptedResponse(
        id=id,
        content=blocks,
        stop_reason=stop_reason,
        usage=usage,
        text_chunks=text_chunks,
        chunks=None if chunks is None else tuple(chunks),
        response=response,
        request_id=request_id,
        hang_at=hang_at,
        raise_at=raise_at,
        error=error,
    )


_BLOCKS = (TextBlock, ToolCall, ThinkingBlock, RedactedThinkingBlock)


def _blocks(content: object) -> tuple[Block, ...]:
    """``content`` as the response's blocks; ``TypeError`` naming the entry that
    is not a block (a mistake in the script, not a model that misbehaves: that
    is what ``chunks=`` and ``response=`` are for)."""
    if isinstance(content, str):
        return (TextBlock(content),)
    if isinstance(content, Mapping) or not isinstance(content, Iterable):
        raise TypeError(
            "scripted_response: content must be text or a sequence of blocks (TextBlock, "
            f"ToolCall, ThinkingBlock, RedactedThinkingBlock), got {content!r:.80}"
        )
    blocks = tuple(content)
    for index, block in enumerate(blocks):
        if type(block) not in _BLOCKS:
            hint = " (wrap text in TextBlock)" if isinstance(block, str) else ""
            raise TypeError(
                f"scripted_response: content[{index}] must be a TextBlock, ToolCall, "
                f"ThinkingBlock or RedactedThinkingBlock{hint}, got {block!r:.80}"
            )
    return blocks


def _check_faults(
    blocks: tuple[Block, ...],
    text_chunks: int,
    chunks: Sequence[Any] | None,
    hang_at: object,
    raise_at: object,
    error: object,
) -> None:
    """``ValueError`` for a fault position the stream never reaches (it would
    never happen, and a test of it would pass without testing anything);
    ``TypeError`` for an ``error`` that cannot be raised."""
    if hang_at is not None or raise_at is not None:
        last = len(chunks_of(blocks, text_chunks) if chunks is None else tuple(chunks))
        for name, at in (("hang_at", hang_at), ("raise_at", raise_at)):
            if at is not None and (type(at) is not int or not 0 <= at <= last):
                raise ValueError(
                    f"{name} must be None or an int in 0..{last} (before chunk k; {last}: "
                    f"in response()), got {at!r}"
                )
    if error is not None and not isinstance(error, BaseException):
        raise TypeError(f"error must be an exception, got {error!r:.80}")


@final
class _ScriptedStream:
    """The stream of one scripted response, its own context manager; every step
    is a trio checkpoint (with ``chunk_checkpoints=False``, opening it only)."""

    __slots__ = ("_chunks", "_every_chunk", "_faults", "_index", "_request", "_script")

    def __init__(self, script: ScriptedResponse, request: ModelRequest, every_chunk: bool) -> None:
        self._script = script
        self._request = request
        self._chunks = script.stream_chunks()
        self._index = 0
        self._every_chunk = every_chunk
        self._faults = script.hang_at is not None or script.raise_at is not None

    async def _fault(self, position: int) -> None:
        if self._script.hang_at == position:
            await trio.sleep_forever()
        if self._script.raise_at == position:
            assert self._script.error is not None
            raise replayable(self._script.error)

    async def __aenter__(self) -> _ScriptedStream:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    def __aiter__(self) -> _ScriptedStream:
        return self

    async def __anext__(self) -> Any:
        if self._every_chunk:
            await trio.lowlevel.checkpoint()
        if self._index >= len(self._chunks):
            raise StopAsyncIteration
        if self._faults:
            await self._fault(self._index)
        chunk = self._chunks[self._index]
        self._index += 1
        return chunk

    async def response(self) -> Any:
        if self._every_chunk:
            await trio.lowlevel.checkpoint()
        if self._faults:
            await self._fault(len(self._chunks))
        return self._script.final_response(self._request)


@final
class ScriptedModel:
    """A ``Model`` that answers request ``n`` with the ``n``-th scripted entry.

    An entry is a ``ScriptedResponse`` or an exception, raised when the
    stream is opened (anything else: ``TypeError`` here). ``requests``
    records every request in order and ``call_count`` counts them. Asking
    past the script raises ``ScriptExhaustedError`` (the run fails with
    ``MODEL_ERROR``).

    The requests of a session share its transcript (each holds a
    ``Transcript`` view of it, not a copy), so the log grows with the
    conversation, not with its square: a 20,000-turn session keeps its 40,000
    requests in some tens of MB. ``record_requests=False`` keeps
    ``requests`` empty (``call_count`` still counts), for benchmarks and many
    concurrent runs. The script may be shared by many
    models: responses are frozen and each model keeps its own position.

    Opening a stream, each chunk and ``response()`` are trio checkpoints, so
    ``explore_cancellation`` can cancel at every one. ``chunk_checkpoints=False``
    keeps only the one when the stream opens: the chunks and ``response()``
    follow with no checkpoint, as from a provider that read the whole stream
    in one network read (and as the peers' scripted models do in
    ``benchmarks/peers``). Faults (``hang_at``, ``raise_at``) happen either way.
    """

    __slots__ = ("_count", "_every_chunk", "_record", "_script", "requests")

    def __init__(
        self,
        responses: Sequence[ScriptedResponse | BaseException],
        *,
        record_requests: bool = True,
        chunk_checkpoints: bool = True,
    ) -> None:
        if type(record_requests) is not bool:
            raise TypeError(f"record_requests must be a bool, got {record_requests!r}")
        if type(chunk_checkpoints) is not bool:
            raise TypeError(f"chunk_checkpoints must be a bool, got {chunk_checkpoints!r}")
        self._every_chunk = chunk_checkpoints
        if isinstance(responses, (str, bytes, Mapping, ScriptedResponse, BaseException)) or (
            not isinstance(responses, Iterable)
        ):
            raise TypeError(
                "ScriptedModel takes a list of responses (each a ScriptedResponse, built with "
                f"scripted_response, or an exception), got {responses!r:.80}: put a single "
                "one in a list"
            )
        self._script = responses if type(responses) is tuple else tuple(responses)
        for index, entry in enumerate(self._script):  # not when asked: a late AttributeError
            if type(entry) is not ScriptedResponse and not isinstance(entry, BaseException):
                raise TypeError(
                    f"ScriptedModel: response {index} must be a ScriptedResponse (build it "
                    f"with scripted_response) or an exception, got {entry!r:.80}"
                )
        self._record = record_requests
        self._count = 0
        self.requests: list[ModelRequest] = []

    @property
    def call_count(self) -> int:
        return self._count

    def stream(self, request: ModelRequest) -> _ScriptedStream:
        index = self._count
        self._count += 1
        if self._record:
            self.requests.append(request)
        if index >= len(self._script):
            raise ScriptExhaustedError(
                f"request {request.id!r} is number {index + 1}, but the script has only "
                f"{len(self._script)} responses"
            )
        entry = self._script[index]
        if isinstance(entry, BaseException):
            raise replayable(entry)
        return _ScriptedStream(entry, request, self._every_chunk)
