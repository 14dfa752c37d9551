"""``trace(events)``: an event stream as compact, stable text to compare with a snapshot."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from ..events import (
    ApprovalDecided,
    ApprovalRequested,
    AttemptFailed,
    ContextCompacted,
    MessageAccepted,
    ModelChunk,
    RunFinished,
    ToolFinished,
    ToolStarted,
    ToolUpdated,
    TurnFinished,
    TurnStarted,
)
from ..messages._ir import (
    AssistantMessage,
    DocumentBlock,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from ..model import TextDelta, ThinkingDelta

__all__ = ["trace"]

_RANDOM_ID = re.compile(r"\b(user|session)-[0-9a-f]{12}\b")
"""Ids a session draws at random (``new_id``): a prompt given as a str, the session."""


class _Renderer:
    """Renders one trace; numbers random ids in order of first appearance."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.ids: dict[str, str] = {}

    def id(self, text: str) -> str:
        return _RANDOM_ID.sub(self._number, text)

    def _number(self, match: re.Match[str]) -> str:
        return self.ids.setdefault(match[0], f"{match[1]}-#{len(self.ids) + 1}")

    def text(self, text: str) -> str:
        """``text`` quoted (JSON), cut to ``width`` characters with its length said."""
        text = self.id(text)
        shown = text if len(text) <= self.width else text[: self.width - 1] + "…"
        quoted = json.dumps(shown, ensure_ascii=False)
        quoted = quoted.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates
        return quoted if shown is text else f"{quoted} ({len(text)} chars)"

    def json(self, value: Any) -> str:
        """A plain JSON value, compact with sorted keys, cut like text."""
        encoded = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        if len(encoded) <= self.width:
            return encoded
        return encoded[: self.width - 1] + f"… ({len(encoded)} chars)"

    def content(self, content: str | tuple[Any, ...]) -> str:
        if isinstance(content, str):
            return self.text(content)
        return "[" + ", ".join(self.block(block) for block in content) + "]"

    def block(self, block: Any) -> str:
        if isinstance(block, TextBlock):
            return f"text {self.text(block.text)}"
        if isinstance(block, ToolCall):
            return f"tool_call {block.name} {block.id} {self.json(block.arguments)}"
        if isinstance(block, ThinkingBlock):
            return f"thinking {self.text(block.thinking)}"
        if isinstance(block, RedactedThinkingBlock):
            return f"redacted_thinking ({len(block.data)} chars)"
        if isinstance(block, ImageBlock | DocumentBlock):
            size = f"{len(block.data)} bytes" if block.data is not None else "url"
            return f"{block.type} {block.media_type} ({size})"
        raise TypeError(f"trace: not a content block: {block!r}")

    def message(self, message: Any) -> str:
        if isinstance(message, UserMessage):
            return f"user {self.id(message.id)} {self.content(message.content)}"
        if isinstance(message, AssistantMessage):
            return f"assistant {self.id(message.id)} {self.content(message.content)}"
        if isinstance(message, ToolResultMessage):
            error = " error" if message.is_error else ""
            return (
                f"tool_result {message.tool_name} {message.tool_call_id}{error} "
                f"{self.content(message.content)}"
            )
        raise TypeError(f"trace: not a message: {message!r}")

    def chunk(self, chunk: Any) -> str:
        if isinstance(chunk, TextDelta):
            return f"text {self.text(chunk.text)}"
        if isinstance(chunk, ThinkingDelta):
            signed = f" signature ({len(chunk.signature)} chars)" if chunk.signature else ""
            return f"thinking {self.text(chunk.thinking)}{signed}"
        return self.block(chunk)

    def fields(self, struct: Any, skip: tuple[str, ...] = ()) -> str:
        """``name=value`` for each field of a result or a turn's end; ``detail`` (free
        text) quoted and cut."""
        parts = []
        for name, value in msgspec.structs.asdict(struct).items():
            if name not in skip and not (name == "output" and value is None):
                shown = self.text(value) if name == "detail" else str(value)
                parts.append(f" {name}={shown}")
        return "".join(parts)

    def result(self, result: Any) -> str:
        """A run's result (``status``) or a turn's (``end.reason``)."""
        if hasattr(result, "status"):
            fields = self.fields(result, skip=("messages", "steps", "final_text"))
            final = getattr(result, "final_text", None)
            said = f" {self.text(final)}" if final else ""
            return f"{result.status}{fields} steps={result.steps}{said}"
        said = f" {self.text(result.final_text)}" if result.final_text else ""
        usage = result.usage
        tokens = f" tokens={usage.input_tokens}+{usage.output_tokens}"
        output = "" if result.output is None else f" output={result.output}"
        end = f"{result.end.reason}{self.fields(result.end)}{output}"
        return f"{end} steps={result.steps}{tokens}{said}"


def _accepted(r: _Renderer, e: MessageAccepted) -> str:
    return r.message(e.message)


def _chunk(r: _Renderer, e: ModelChunk) -> str:
    again = f" attempt={e.attempt}" if e.attempt != 1 else ""
    return f"{e.request_id}{again} {r.chunk(e.chunk)}"


def _started(r: _Renderer, e: ToolStarted) -> str:
    return f"{e.call.name} {e.call.id}"  # its arguments: in the model.chunk before


def _updated(r: _Renderer, e: ToolUpdated) -> str:
    fraction = f" fraction={e.fraction:g}" if e.fraction is not None else ""
    return f"{e.call.name} {e.call.id} {r.text(e.message)}{fraction}"


def _finished(r: _Renderer, e: ToolFinished) -> str:
    result = e.result
    outcome = "error" if result.is_error else "ok"
    return f"{e.call.name} {e.call.id} {outcome} {r.content(result.content)}"


def _run_finished(r: _Renderer, e: RunFinished) -> str:
    return r.result(e.result)


def _attempt_failed(r: _Renderer, e: AttemptFailed) -> str:
    then = "retry" if e.retry_in is not None else "give_up"  # not the delay: it is jittered
    return f"{e.request_id} attempt={e.attempt} chunks={e.chunks} {then} {r.text(e.error)}"


def _turn_started(r: _Renderer, e: TurnStarted) -> str:
    return f"turn={e.turn}"


def _turn_finished(r: _Renderer, e: TurnFinished) -> str:
    return f"turn={e.turn} {r.result(e.result)}"


def _requested(r: _Renderer, e: ApprovalRequested) -> str:
    return f"{e.call.name} {e.call.id}"


def _decided(r: _Renderer, e: ApprovalDecided) -> str:
    verdict = "approved" if e.approved else "rejected"
    by = f" by={r.text(e.by)}" if e.by else ""
    reason = f" {r.text(e.reason)}" if e.reason else ""
    return f"{e.call.name} {e.call.id} {verdict}{by}{reason}"


def _compacted(r: _Renderer, e: ContextCompacted) -> str:
    return f"{e.request_id} messages={len(e.messages)}"


_RENDER: dict[type, Callable[[_Renderer, Any], str]] = {
    MessageAccepted: _accepted,
    ModelChunk: _chunk,
    ToolStarted: _started,
    ToolUpdated: _updated,
    ToolFinished: _finished,
    RunFinished: _run_finished,
    AttemptFailed: _attempt_failed,
    TurnStarted: _turn_started,
    TurnFinished: _turn_finished,
    ContextCompacted: _compacted,
    ApprovalRequested: _requested,
    ApprovalDecided: _decided,
}
"""One renderer per event class (of ``Event`` and ``SessionEvent``)."""


def trace(events: Iterable[Any], *, width: int = 60) -> str:
    """The events as text, one line each: ``sequence type details``, for
    ``assert trace(events) == snapshot``.

    Details are what identifies an event and what it carried: request ids,
    tool names and call ids (``3 tool.started forecast c1``), tool arguments
    (compact JSON) where the model asked for the call,
    texts quoted and cut to ``width`` characters (with the full length
    said), results by status or end reason, steps and tokens. Nothing that
    changes between runs: no timings or retry delays, and the ids a session
    draws at random (``user-`` / ``session-`` and 12 hex digits) numbered in
    order of appearance (``user-#1``). Lines are joined with ``\\n``, no
    newline at the end. Raises ``TypeError`` for anything that is not an event.
    """
    if type(width) is not int or width < 8:
        raise ValueError(f"width must be an int >= 8, got {width!r}")
    renderer = _Renderer(width)
    lines = []
    for event in events:
        render = _RENDER.get(type(event))
        if render is None:
            raise TypeError(f"trace: not an event: {event!r}")
        lines.append(f"{event.sequence} {event.type} {render(renderer, event)}")
    return "\n".join(lines)
