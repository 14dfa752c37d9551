"""AG-UI 1.0 at ``POST /ag-ui``: a run is a turn of the session ``threadId``.

``AguiInput`` reads what a run asks (its last user message, or ``resume``
entries answering the interrupts of the run before: ``{"approved": bool,
"reason": "..."}`` decides the held call, ``cancelled`` rejects it; or tool
messages answering calls of the client's own tools, its ``tools``, whose
calls end a run as ``frontend_tool`` interrupts).
``AguiFraming`` turns the turn's events into AG-UI events as SSE ``data:``
lines: ``RUN_STARTED``; text as ``TEXT_MESSAGE_START``/``CONTENT``/``END``;
thinking as ``REASONING_START``, ``REASONING_MESSAGE_START``/``CONTENT``/``END``
and ``REASONING_END``;
each tool call as ``TOOL_CALL_START``/``ARGS``/``END`` and its result as
``TOOL_CALL_RESULT``; then ``RUN_FINISHED`` with its outcome (``success``,
``interrupt`` with one interrupt per call held for approval, ``cancelled``)
or ``RUN_ERROR`` for a failed turn, and for one that stopped short of an
answer (a refusal, a limit, a hook): its ``code`` the end's reason in
capitals (``REFUSAL``, ``MAX_STEPS``, ``USAGE_LIMIT``, ...), since an AG-UI
client reads a ``RUN_FINISHED`` as a success whatever its ``result`` says.

A model attempt that fails (``attempt.failed``: its chunks are void, the
request is retried as the next attempt) frames none of its tool calls: an
attempt's calls are held and framed only once the attempt has gone on (any
later event but a chunk of it), so the retry's calls, which may have the same
ids, are each framed once. Its text, already sent (AG-UI retracts nothing),
is ended there and stays a message of its own; the retry's text is another.
Frames are built by hand as plain JSON (camelCase), so the library needs no
AG-UI package.
"""

from __future__ import annotations

import json
from typing import Any, Final, final

import msgspec

from ..events import SessionEvent, TurnEnd, TurnFinished, TurnResult
from ..messages._ir import ToolCall, content_text
from ..model import TextDelta, ThinkingDelta
from ._bodies import ApiError, Decision
from ._frontend import ToolOffer

__all__ = [
    "PROTOCOL_VERSION",
    "AguiFraming",
    "AguiInput",
    "answers_of",
    "decisions_of",
    "message_of",
    "offers_of",
]

PROTOCOL_VERSION: Final = "1.0"


class _Resume(msgspec.Struct, frozen=True, rename="camel"):
    interrupt_id: str
    status: str
    payload: Any = None


class _Message(msgspec.Struct, frozen=True, rename="camel"):
    role: str
    id: str = ""
    content: Any = None
    tool_call_id: str | None = None


class _Tool(msgspec.Struct, frozen=True):
    name: str
    description: str = ""
    parameters: Any = None


class AguiInput(msgspec.Struct, frozen=True, rename="camel"):
    """The fields of AG-UI's ``RunAgentInput`` a run reads; the others (context,
    state, forwarded props) are accepted and not used."""

    thread_id: str
    run_id: str
    messages: list[_Message]
    resume: list[_Resume] | None = None
    tools: list[_Tool] | None = None


def offers_of(given: AguiInput) -> list[ToolOffer]:
    """The client's frontend tools."""
    return [ToolOffer(t.name, t.description, t.parameters) for t in given.tools or ()]


def answers_of(given: AguiInput) -> list[tuple[str, str]]:
    """The tool messages, as (the call they answer, the answer as text); ``ApiError(400)``
    for one without its call's id or with no text."""
    answers = []
    for message in given.messages:
        if message.role != "tool":
            continue
        if not message.tool_call_id or not 1 <= len(message.tool_call_id) <= 256:
            raise ApiError(400, "a tool message needs the toolCallId it answers")
        if not isinstance(message.content, str):
            raise ApiError(400, "a tool message's content must be text")
        answers.append((message.tool_call_id, message.content))
    return answers


def decisions_of(given: AguiInput) -> list[tuple[str, bool, str]]:
    """Each resume entry as (call id, approved, reason); ``ApiError(400)`` for a
    resolved entry whose payload is no decision."""
    decided = []
    for entry in given.resume or ():
        if entry.status == "cancelled":
            decided.append((entry.interrupt_id, False, "the approval was cancelled"))
            continue
        if entry.status != "resolved":
            raise ApiError(400, f"resume status must be resolved or cancelled: {entry.status!r}")
        try:
            decision = msgspec.convert(entry.payload, Decision)
        except msgspec.ValidationError as exc:
            raise ApiError(
                400, f'a resume payload is {{"approved": bool, "reason": "..."}}: {exc}'
            ) from None
        decided.append((entry.interrupt_id, decision.approved, decision.reason))
    return decided


def message_of(given: AguiInput, answered: bool = False) -> str | None:
    """The run's new input: its last message, a user's, as text (a string, or text
    parts joined); None when the last is a tool message and ``answered`` (the run
    goes on from the client's answers); ``ApiError(400)`` otherwise."""
    if answered and given.messages and given.messages[-1].role == "tool":
        return None
    if not given.messages or given.messages[-1].role != "user":
        raise ApiError(
            400, "a run needs a user message last (or resume entries, or answers to its tools)"
        )
    content = given.messages[-1].content
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if texts and all(isinstance(t, str) for t in texts):
            return "".join(str(t) for t in texts)
    raise ApiError(400, "the user message's content must be text")


class _Line(msgspec.Struct, frozen=True):
    event: SessionEvent


_decode_line = msgspec.json.Decoder(_Line).decode


def _data(value: dict[str, Any]) -> bytes:
    return b"data: %s\n\n" % msgspec.json.encode(value)


@final
class AguiFraming:
    """The AG-UI events of turn ``turn`` of the thread, from its session events.
    A text message is open while text streams (``_text``: its id); a call framed or the
    end closes it. An attempt's tool calls are held (``_calls``) until the attempt
    goes on, and dropped if it fails. Done once ``RUN_FINISHED`` or ``RUN_ERROR``
    is framed."""

    def __init__(
        self, thread_id: str, run_id: str, turn: int, frontend: frozenset[str] = frozenset()
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.turn = turn
        self.frontend = frontend  # the client's own tools: their calls are its to run
        self._names: dict[str, str] = {}  # each call's tool, by call id
        self.done = False
        self._text: str | None = None
        self._reasoning: str | None = None  # the open reasoning message's id
        self._started = False  # the turn's turn.started was seen
        self._calls: tuple[str, list[ToolCall]] | None = None  # an attempt's, not yet framed

    def opening(self) -> bytes:
        return _data(
            {
                "type": "RUN_STARTED",
                "threadId": self.thread_id,
                "runId": self.run_id,
                "protocolVersion": PROTOCOL_VERSION,
            }
        )

    def frame(self, sequence: int, line: bytes) -> bytes:
        event = _decode_line(line).event
        if event.type == "turn.started":
            self._started = event.turn == self.turn
            return b""
        if not self._started:
            return b""  # an earlier turn's
        return b"".join(_data(value) for value in self._translate(event))

    def _translate(self, event: SessionEvent) -> list[dict[str, Any]]:
        if event.type == "attempt.failed":
            if self._calls is not None and self._calls[0] == f"{event.request_id}.{event.attempt}":
                self._calls = None  # void: never framed
            return [*self._flush(), *self._close_text()]  # the retry streams anew
        if event.type == "model.chunk":
            chunk, attempt = event.chunk, f"{event.request_id}.{event.attempt}"
            out = self._flush() if self._calls and self._calls[0] != attempt else []
            if isinstance(chunk, ToolCall):
                if self._calls is None:
                    self._calls = (attempt, [])
                self._calls[1].append(chunk)  # framed once the attempt goes on
            elif isinstance(chunk, TextDelta) and chunk.text:
                out += self._text_piece(attempt, chunk.text)
            elif isinstance(chunk, ThinkingDelta) and chunk.thinking:
                out += self._reasoning_piece(f"{attempt}.reasoning", chunk.thinking)
            return out
        held = self._flush()  # any other event: the attempt that sent them went on
        if event.type == "tool.finished":
            text = content_text(event.result.content)
            result = {
                "type": "TOOL_CALL_RESULT",
                "messageId": event.result.id,
                "toolCallId": event.call.id,
                "content": text,
                "role": "tool",
            }
            return [*held, *self._close_text(), result]
        if isinstance(event, TurnFinished):
            self.done = True
            return [*held, *self._close_text(), self._finish(event.result)]
        return held

    def _flush(self) -> list[dict[str, Any]]:
        """The held tool calls of an attempt that has gone on, framed (the open
        text or reasoning ended first)."""
        held, self._calls = self._calls, None
        if held is None:
            return []
        return [*self._close_text(), *(framed for call in held[1] for framed in self._call(call))]

    def _text_piece(self, message_id: str, text: str) -> list[dict[str, Any]]:
        out = []
        if self._text != message_id:
            out += self._close_text()  # the reasoning before it, or another message
            self._text = message_id
            out.append({"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"})
        out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": text})
        return out

    def _reasoning_piece(self, message_id: str, text: str) -> list[dict[str, Any]]:
        out = []
        if self._reasoning != message_id:
            out += self._close_text()
            self._reasoning = message_id
            out.append({"type": "REASONING_START", "messageId": message_id})
            start = {"type": "REASONING_MESSAGE_START", "messageId": message_id}
            out.append({**start, "role": "reasoning"})
        out.append({"type": "REASONING_MESSAGE_CONTENT", "messageId": message_id, "delta": text})
        return out

    def _close_text(self) -> list[dict[str, Any]]:
        """End the open text message, or the open reasoning (at most one is open)."""
        if self._reasoning is not None:
            message_id, self._reasoning = self._reasoning, None
            return [
                {"type": "REASONING_MESSAGE_END", "messageId": message_id},
                {"type": "REASONING_END", "messageId": message_id},
            ]
        if self._text is None:
            return []
        message_id, self._text = self._text, None
        return [{"type": "TEXT_MESSAGE_END", "messageId": message_id}]

    def _call(self, call: ToolCall) -> list[dict[str, Any]]:
        self._names[call.id] = call.name
        start = {"type": "TOOL_CALL_START", "toolCallId": call.id, "toolCallName": call.name}
        arguments = json.dumps(call.arguments, separators=(",", ":"))
        return [
            start,
            {"type": "TOOL_CALL_ARGS", "toolCallId": call.id, "delta": arguments},
            {"type": "TOOL_CALL_END", "toolCallId": call.id},
        ]

    def _finish(self, result: TurnResult[Any]) -> dict[str, Any]:
        end = result.end
        if end.reason == "failed":
            return {"type": "RUN_ERROR", "message": end.detail, "code": end.code}
        if end.reason not in _FINISHED:  # stopped short of an answer: no success
            return {"type": "RUN_ERROR", "message": _stopped(end), "code": end.reason.upper()}
        finished: dict[str, Any] = {
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
        }
        if end.reason == "awaiting_approval":
            interrupts = [self._interrupt(call_id) for call_id in end.call_ids]
            finished["outcome"] = {"type": "interrupt", "interrupts": interrupts}
        elif end.reason == "cancelled":
            finished["outcome"] = {"type": "cancelled"}
        else:
            finished["outcome"] = {"type": "success"}
            finished["result"] = {"reason": end.reason, "text": result.final_text}
        return finished

    def _interrupt(self, call_id: str) -> dict[str, Any]:
        """A held call as an interrupt: the client's own tool to run (it answers
        with a tool message), or a call to approve (a resume entry decides it)."""
        name = self._names.get(call_id)
        if name is not None and name in self.frontend:
            return {
                "id": call_id,
                "reason": "frontend_tool",
                "toolCallId": call_id,
                "message": f"run the tool {name} and answer with a tool message",
            }
        return {
            "id": call_id,
            "reason": "tool_approval",
            "toolCallId": call_id,
            "message": "approve this tool call?",
            "responseSchema": _DECISION_SCHEMA,
        }


_FINISHED: Final = frozenset({"completed", "awaiting_approval", "cancelled"})
"""The ends framed as ``RUN_FINISHED``; every other one is a ``RUN_ERROR``."""

_STOPPED: Final = {
    "length": "the answer was cut at the model's output-token limit",
    "refusal": "the model refused to answer",
    "content_filter": "the provider's content policy cut the answer",
    "interrupted": "the server stopped during the turn",
}


def _stopped(end: TurnEnd) -> str:
    """Why a turn stopped short of an answer, for a person to read."""
    if end.reason == "max_steps":
        return f"the turn spent its {end.max_steps} steps"
    if end.reason == "token_budget":
        return f"the turn used {end.used} tokens, its budget {end.limit}"
    if end.reason == "usage_limit":
        return f"the {end.scope}'s {end.name} limit was reached ({end.used} of {end.limit})"
    if end.reason == "repeated_failure":
        return f"the tool {end.tool_name} failed {end.count} times in a row"
    if end.reason == "blocked":
        return f"a hook stopped the turn: {end.detail}"
    return _STOPPED.get(end.reason, end.reason)


_DECISION_SCHEMA: Final = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
}
