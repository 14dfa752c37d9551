"""The pure checks of one step: every chunk as it streams, then the response
against the stream (after merging), the limits and the transcript's ids.

Merging is one rule: consecutive text pieces join into one text group,
consecutive thinking pieces into one thinking group (texts joined,
signatures joined); a tool call or redacted thinking is a group of its own
and ends any open one; empty pieces are dropped. The stream must equal the
response after merging. The rule is written twice, both on the hot path:
``StepCheck`` merges the stream as it comes, ``_response_blocks`` the
response on locals; ``tests/engine/test_step_merge_properties.py`` holds both to
one reference.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any, Final, final

import msgspec

from ..errors import ModelProtocolError
from ..limits import MAX_ASSISTANT_BLOCKS, MAX_STEP_CHUNKS, MAX_STEP_TEXT, MAX_STEP_THINKING
from ..messages._ir import (
    AssistantMessage,
    Block,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
)
from ..messages._rules import BLOCK_CHECKS, BlockError, check_text_field
from ..model import Chunk, ModelResponse, TextDelta, ThinkingDelta, Usage

__all__ = ["StepCheck"]

_STOPS_WITHOUT_CALLS: Final = frozenset({"stop", "length", "refusal", "content_filter"})


def _check_str(value: object, what: str) -> None:
    if type(value) is str and value.isascii():
        return
    try:
        check_text_field(value, what)
    except BlockError as exc:
        raise ModelProtocolError(str(exc)) from None


def _checked_block(block: Any, what: str) -> Block:
    """A response block or streamed whole chunk checked by the transcript's own
    table (``BLOCK_CHECKS``); its failure said as a broken step rule."""
    try:
        return BLOCK_CHECKS[type(block)](block)  # type: ignore[no-any-return]
    except BlockError as exc:
        if exc.code == "INVALID_ARGUMENTS":
            raise ModelProtocolError(
                f"{what} {block.id!r} to {block.name!r} has bad arguments{exc.problem}"
            ) from None
        raise ModelProtocolError(f"{what} {exc}") from None


_CANONICAL = msgspec.json.Encoder(order="sorted")

# A group as the comparison sees it: joined text (str), a call (id, name and its
# arguments as canonical JSON: keys sorted; 1, 1.0 and true differ), merged
# thinking (a ThinkingBlock), or redacted thinking (the block: Structs compare by
# value). Private values: what a consumer does to a chunk it was handed changes
# nothing here.
_Group = str | tuple[str, str, bytes] | ThinkingBlock | RedactedThinkingBlock


_Streamed = tuple[object, ToolCall, _Group]
"""A streamed call: the chunk the model gave, its checked copy, and its group."""


def _call_group(call: ToolCall) -> tuple[str, str, bytes]:
    return (call.id, call.name, _CANONICAL.encode(call.arguments))


def _group_of(parts: list[str], signatures: list[str] | None) -> _Group:
    """The open group's pieces as one group: joined text, or merged thinking."""
    if signatures is None:
        return "".join(parts)
    return ThinkingBlock("".join(parts), "".join(signatures))


@final
class StepCheck:
    """The pure checks of one step: feed chunks, then the response.

    ``add_chunk`` raises ``ModelProtocolError`` for the first invalid chunk
    (which is then not emitted); ``finish`` checks the response against the
    stream and the transcript's ids and returns the assistant message to
    append. No I/O: the loop owns awaiting and emitting.
    """

    # the stream's side of the comparison: its groups so far, and the pieces of
    # the open group, text while ``signatures`` is None, thinking otherwise
    __slots__ = (
        "_chunks",
        "_request_id",
        "_streamed",
        "_text",
        "_thinking",
        "groups",
        "parts",
        "signatures",
    )

    def __init__(self, request_id: str, silent: bool = False) -> None:
        """``silent``: the streamed chunks go to no one (the emitter is silent), so
        the copy of a streamed call can be the message's own (``_response_blocks``)."""
        self.groups: list[_Group] = []
        # (chunk, its checked copy, its group) of each streamed call, when silent
        # (``()`` until the first: a step without calls makes no list)
        self._streamed: list[_Streamed] | tuple[()] | None = () if silent else None
        self.parts: list[str] = []
        self.signatures: list[str] | None = None
        self._request_id = request_id
        self._chunks = 0
        self._text = 0
        self._thinking = 0

    def _count_thinking(self, size: int) -> None:
        self._thinking += size
        if self._thinking > MAX_STEP_THINKING:
            raise ModelProtocolError(
                f"the stream sent more than {MAX_STEP_THINKING} characters of thinking"
            )

    def add_thinking(self, thinking: str, signature: str) -> None:
        signatures = self.signatures
        if signatures is None:
            if self.parts:
                self._close()
            signatures = self.signatures = []
        self.parts.append(thinking)
        signatures.append(signature)

    def add_whole(self, group: _Group) -> None:
        if self.parts:
            self._close()
        self.groups.append(group)

    def _close(self) -> None:
        self.groups.append(_group_of(self.parts, self.signatures))
        self.parts = []
        self.signatures = None

    def close(self) -> list[_Group]:
        """The stream's groups, the open one closed."""
        if self.parts:
            self._close()
        return self.groups

    def add_chunk(self, chunk: object) -> Chunk:
        """Check one streamed chunk; return it as the run keeps it (a tool call with a
        private copy of its arguments), or raise ``ModelProtocolError``."""
        self._chunks += 1
        if self._chunks > MAX_STEP_CHUNKS:
            raise ModelProtocolError(f"the stream sent more than {MAX_STEP_CHUNKS} chunks")
        kind = type(chunk)
        if kind is TextDelta:
            text = chunk.text  # type: ignore[attr-defined]  # kind is TextDelta
            if type(text) is not str or not text.isascii():  # the hot path: one test
                _check_str(text, "text delta")
            self._text += len(text)
            if self._text > MAX_STEP_TEXT:
                raise ModelProtocolError(
                    f"the stream sent more than {MAX_STEP_TEXT} characters of text"
                )
            if text:
                if self.signatures is not None:
                    self._close()
                self.parts.append(text)
            return chunk  # type: ignore[return-value]
        if kind is ThinkingDelta:
            delta: ThinkingDelta = chunk  # type: ignore[assignment]
            _check_str(delta.thinking, "thinking delta")
            _check_str(delta.signature, "thinking delta signature")
            self._count_thinking(len(delta.thinking) + len(delta.signature))
            if delta.thinking or delta.signature:
                self.add_thinking(delta.thinking, delta.signature)
            return delta
        if kind is ToolCall:
            call: ToolCall = _checked_block(chunk, "streamed tool call")  # type: ignore[assignment]
            if self.parts:
                self._close()
            group = _call_group(call)
            self.groups.append(group)
            streamed = self._streamed
            if streamed is not None:
                if streamed:
                    streamed.append((chunk, call, group))
                else:
                    self._streamed = [(chunk, call, group)]
            return call
        if kind is RedactedThinkingBlock:
            redacted: RedactedThinkingBlock = _checked_block(chunk, "streamed redacted thinking")  # type: ignore[assignment]
            self._count_thinking(len(redacted.data))
            self.add_whole(redacted)
            return redacted
        raise ModelProtocolError(
            f"the stream yielded a {kind.__name__}, not a TextDelta, ThinkingDelta, "
            "RedactedThinkingBlock or ToolCall"
        )

    def finish(
        self,
        response: object,
        message_ids: Container[str],
        call_ids: Container[str],
    ) -> AssistantMessage:
        """Check the response; return the assistant message (id ``message-{response.id}``).

        ``message_ids`` and ``call_ids`` are the ids the transcript already
        uses: call ids must be new across the whole transcript, and so must
        the ids of the assistant message and of each call's future result.
        """
        if type(response) is not ModelResponse:
            raise ModelProtocolError(
                f"response() returned a {type(response).__name__}, not a ModelResponse"
            )
        _check_str(response.id, "response id")
        _check_str(response.request_id, "response request_id")
        if response.request_id != self._request_id:
            raise ModelProtocolError(
                f"response answers {response.request_id!r}, but the request is {self._request_id!r}"
            )
        content = response.content
        if type(content) not in (tuple, list):
            raise ModelProtocolError("response content must be a tuple of blocks")
        if len(content) > MAX_ASSISTANT_BLOCKS:
            raise ModelProtocolError(
                f"response has {len(content)} blocks, more than {MAX_ASSISTANT_BLOCKS}"
            )
        if response.usage is not None and type(response.usage) is not Usage:
            raise ModelProtocolError("response usage must be a Usage or None")
        # The message gets copies of its own, checked here: the streamed copies went
        # out in model.chunk events, and what a consumer does to those must not
        # reach the transcript or the tools (a silent step's calls keep the copies
        # made as they streamed: no one was handed those).
        blocks, calls, merged = _response_blocks(content, self._streamed)
        if merged != self.close():
            raise ModelProtocolError(
                "response content differs from the streamed chunks (after merging adjacent "
                "text and adjacent thinking)"
            )
        stop = response.stop_reason
        if stop == "tool_call":
            if not calls:
                raise ModelProtocolError("stop reason is 'tool_call' but there is no tool call")
        elif stop in _STOPS_WITHOUT_CALLS:
            if calls:
                raise ModelProtocolError(f"stop reason is {stop!r} but there are tool calls")
        else:
            raise ModelProtocolError(f"unknown stop reason {stop!r}")
        message_id = f"message-{response.id}"
        if message_id in message_ids:
            raise ModelProtocolError(f"message id {message_id!r} is already used")
        seen: set[str] = set()
        for call in calls:
            if call.id in call_ids or call.id in seen:
                raise ModelProtocolError(f"tool call id {call.id!r} is already used")
            seen.add(call.id)
            if f"tool-result-{call.id}" in message_ids:
                raise ModelProtocolError(f"message id 'tool-result-{call.id}' is already used")
        return AssistantMessage(message_id, tuple(blocks))


def _streamed_copy(
    block: object, streamed: Sequence[_Streamed] | None, index: int
) -> tuple[ToolCall, _Group] | None:
    """The checked copy and group of the streamed call ``block`` is, when no one was
    handed that copy (``streamed`` is not None) and the call still says what it
    said then, else None: the block is checked on its own. Its arguments may have
    changed in place since: their canonical JSON is compared, so a change to a
    value that is not plain JSON but encodes the same (a tuple for a list, NaN
    for null) keeps the plain copy made when it streamed, where a step that
    emitted the copy refuses it."""
    if streamed is None or index >= len(streamed):
        return None
    chunk, copy, group = streamed[index]
    if chunk is not block:
        return None
    try:
        canonical = _CANONICAL.encode(block.arguments)  # type: ignore[attr-defined]
    except Exception:  # not JSON any more: the block's own check says why
        return None
    return (copy, group) if canonical == group[2] else None  # type: ignore[index]


def _response_blocks(
    content: tuple[object, ...] | list[object],
    streamed: Sequence[_Streamed] | None = None,
) -> tuple[list[Block], list[ToolCall], list[_Group]]:
    """The response's blocks checked (calls with private copies of their
    arguments), its calls, and its merged groups; limits on text and thinking.
    A call that is the very chunk streamed (a silent step's, ``streamed``) takes
    that chunk's checked copy, once its arguments still encode the same.

    The response's side of the comparison, merged by ``StepCheck``'s rule written
    out on locals: it runs once a step, on the hot path."""
    blocks: list[Block] = []
    calls: list[ToolCall] = []
    groups: list[_Group] = []
    parts: list[str] = []
    signatures: list[str] | None = None  # None while the open group is text
    text = thinking = 0
    for position, block in enumerate(content):
        kind = type(block)
        if kind is TextBlock:
            _checked_block(block, f"response block {position}")
            text += len(block.text)  # type: ignore[attr-defined]
            if block.text:  # type: ignore[attr-defined]
                if signatures is not None:
                    groups.append(_group_of(parts, signatures))
                    parts, signatures = [], None
                parts.append(block.text)  # type: ignore[attr-defined]
            blocks.append(block)  # type: ignore[arg-type]
        elif kind is ToolCall or kind is RedactedThinkingBlock:
            reused = _streamed_copy(block, streamed, len(calls)) if kind is ToolCall else None
            whole: Block
            if reused is not None:
                whole, group = reused
            else:
                where = f"response tool call (block {position})" if kind is ToolCall else ""
                whole = _checked_block(block, where or f"response block {position}")
            if parts:
                groups.append(_group_of(parts, signatures))
                parts, signatures = [], None
            if type(whole) is ToolCall:
                groups.append(group if reused is not None else _call_group(whole))
                calls.append(whole)
            else:
                thinking += len(whole.data)  # type: ignore[union-attr]
                groups.append(whole)  # type: ignore[arg-type]
            blocks.append(whole)
        elif kind is ThinkingBlock:
            think: ThinkingBlock = _checked_block(block, f"response block {position}")  # type: ignore[assignment]
            thinking += len(think.thinking) + len(think.signature)
            if think.thinking or think.signature:
                if signatures is None:
                    if parts:
                        groups.append("".join(parts))
                        parts = []
                    signatures = []
                parts.append(think.thinking)
                signatures.append(think.signature)
            blocks.append(think)
        else:
            raise ModelProtocolError(
                f"response block {position} is a {kind.__name__}, not a TextBlock, "
                "ThinkingBlock, RedactedThinkingBlock or ToolCall"
            )
    if parts:
        groups.append(_group_of(parts, signatures))
    if text > MAX_STEP_TEXT:
        raise ModelProtocolError(
            f"response has {text} characters of text, more than {MAX_STEP_TEXT}"
        )
    if thinking > MAX_STEP_THINKING:
        raise ModelProtocolError(
            f"response has {thinking} characters of thinking, more than {MAX_STEP_THINKING}"
        )
    return blocks, calls, groups
