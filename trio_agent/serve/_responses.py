"""``ResponsesFraming``: a turn's session events as the OpenAI Responses API's
stream (``POST /v1/responses``), and the response object they build.

Text streams as a ``message`` output item (``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta`` ...,
``.done``), thinking as a ``reasoning`` item (``response.reasoning_text.*``),
each tool call as a ``function_call`` item and its result as a
``function_call_output`` item; a call held for approval is an
``mcp_approval_request`` item (``server_label`` ``"trio-agent"``), answered by
an ``mcp_approval_response`` input item in the next request. The stream opens
with ``response.created`` and ``response.in_progress`` and ends with
``response.completed``, ``response.incomplete`` (a turn cut short, or
cancelled) or ``response.failed``. Every event carries its
``sequence_number``; the frames are ``event:``/``data:`` SSE messages.

An attempt that fails (``attempt.failed``: its chunks are void, the request is
retried) leaves no item in the response: its text items are closed as
``incomplete`` and left out of the finished response, and its tool calls,
framed only once the attempt has gone on or ended, are never framed, so the
retry's calls (which may have the same ids) are each framed once.

``replay`` frames a turn again from the session's event log, for ``GET
/v1/responses/{id}``: the response as its turn's logged events make it (so far,
for a turn that runs).
"""

from __future__ import annotations

import json
import time
from typing import Any, Final, final

import msgspec

from ..events import SessionEvent, TurnFinished, TurnResult
from ..messages._ir import AssistantMessage, ToolCall, content_text
from ..model import TextDelta, ThinkingDelta
from ._eventlog import Events
from ._responses_input import ResponsesBody, ResponsesRequest, response_id

__all__ = ["SERVER_LABEL", "ResponsesFraming", "TurnStarts", "replay"]

SERVER_LABEL: Final = "trio-agent"
_INCOMPLETE: Final = {"length": "max_output_tokens", "content_filter": "content_filter"}


class _Line(msgspec.Struct, frozen=True):
    event: SessionEvent


_decode_line = msgspec.json.Decoder(_Line).decode


def _arguments(call: ToolCall) -> str:
    return json.dumps(call.arguments, separators=(",", ":"))


@final
class ResponsesFraming:
    """The Responses events of turn ``turn`` of the session, from its events. An
    output item is open while its text or thinking streams (``_open``: the
    attempt it belongs to, its kind, its item); anything else closes it. Done
    once the turn's end is framed; ``response`` is then whole."""

    def __init__(self, request: ResponsesRequest, response_id: str, turn: int) -> None:
        self.turn = turn
        self.done = False
        self._sequence = 0
        self._started = False
        self._open: tuple[str, str, dict[str, Any]] | None = None
        self._owners: list[str] = []  # the attempt each output item is of
        self._void: set[str] = set()  # attempts that failed: their items are left out
        self._calls: tuple[str, list[ToolCall]] | None = None  # an attempt's, not yet framed
        body = request.body
        previous = body.previous_response_id
        self.response: dict[str, Any] = {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "model": body.model,
            "output": [],
            "instructions": body.instructions,
            "previous_response_id": previous,
            "background": bool(body.background),
            "error": None,
            "incomplete_details": None,
            "usage": None,
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
            "metadata": {},
            "text": {"format": {"type": "text"}},
        }

    # -- Framing
    def opening(self) -> bytes:
        return self._frames(
            [
                {"type": "response.created", "response": dict(self.response)},
                {"type": "response.in_progress", "response": dict(self.response)},
            ]
        )

    def frame(self, sequence: int, line: bytes) -> bytes:
        return self._frames(self.events(line))

    def events(self, line: bytes) -> list[dict[str, Any]]:
        """The Responses events (without their numbers) one session event makes."""
        return self.take(_decode_line(line).event)

    def take(self, event: SessionEvent) -> list[dict[str, Any]]:
        """The Responses events (without their numbers) of a decoded session event."""
        if event.type == "turn.started":
            self._started = event.turn == self.turn
            return []
        if not self._started:
            return []  # an earlier turn's
        return self._translate(event)

    def so_far(self) -> dict[str, Any]:
        """The response of a turn that runs, as far as it has gone: its items, the
        open one with its text so far; those of a failed attempt, and the calls of
        an attempt that may still fail, left out."""
        output = list(self.response["output"])
        if self._open is not None:
            item = self._open[2]
            output[-1] = {**item, "content": [dict(part) for part in item["content"]]}
        kept = zip(output, self._owners, strict=True)
        return {
            **self.response,
            "output": [item for item, owner in kept if owner not in self._void],
        }

    def cut(self) -> None:
        """The turn ended with no end logged (its server stopped mid-turn): the
        response is ``incomplete`` (reason ``interrupted``), its open item too."""
        self._close("incomplete")
        self._calls = None
        self.response = self.so_far()
        self.response.update(status="incomplete", incomplete_details={"reason": "interrupted"})
        self.done = True

    def _frames(self, events: list[dict[str, Any]]) -> bytes:
        out = []
        for event in events:
            event["sequence_number"] = self._sequence
            self._sequence += 1
            data = msgspec.json.encode(event)
            out.append(b"event: %s\ndata: %s\n\n" % (event["type"].encode(), data))
        return b"".join(out)

    # -- the translation
    def _translate(self, event: SessionEvent) -> list[dict[str, Any]]:
        if event.type == "attempt.failed":
            attempt = f"{event.request_id}.{event.attempt}"
            self._void.add(attempt)
            if self._calls is not None and self._calls[0] == attempt:
                self._calls = None  # void: never framed
            return self._close("incomplete")  # the retry streams anew
        if event.type == "model.chunk":
            chunk, attempt = event.chunk, f"{event.request_id}.{event.attempt}"
            if isinstance(chunk, ToolCall):
                out = []
                if self._calls is None or self._calls[0] != attempt:
                    out = [*self._flush(), *self._close("completed")]
                    self._calls = (attempt, [])
                self._calls[1].append(chunk)  # framed once the attempt goes on
                return out
            # text of the attempt whose calls are held keeps them held (it may still
            # fail); another attempt's text means theirs went on
            held = self._flush() if self._calls and self._calls[0] != attempt else []
            if isinstance(chunk, TextDelta) and chunk.text:
                return [*held, *self._piece(attempt, "message", chunk.text)]
            if isinstance(chunk, ThinkingDelta) and chunk.thinking:
                return [*held, *self._piece(attempt, "reasoning", chunk.thinking)]
            return held
        held = self._flush()  # any other event: the attempt that sent them went on
        return [*held, *self._after_chunks(event)]

    def _flush(self) -> list[dict[str, Any]]:
        """The held tool calls of an attempt that has gone on, framed."""
        held, self._calls = self._calls, None
        if held is None:
            return []
        attempt, calls = held
        closed = self._close("completed")  # text after the calls, in their attempt
        return [*closed, *(framed for call in calls for framed in self._call(attempt, call))]

    def _after_chunks(self, event: SessionEvent) -> list[dict[str, Any]]:
        if event.type == "tool.finished":
            text = content_text(event.result.content)
            item = {
                "type": "function_call_output",
                "id": f"fco_{event.call.id}",
                "call_id": event.call.id,
                "output": text,
                "status": "completed",
            }
            return [*self._close("completed"), *self._whole(item)]
        if isinstance(event, TurnFinished):
            self.done = True
            return [*self._close("completed"), *self._finish(event.result)]
        return []

    def _added(self, item: dict[str, Any], attempt: str = "") -> dict[str, Any]:
        output = self.response["output"]
        output.append(item)
        self._owners.append(attempt)
        return {"type": "response.output_item.added", "output_index": len(output) - 1, "item": item}

    def _done(self, item: dict[str, Any]) -> dict[str, Any]:
        index = len(self.response["output"]) - 1
        return {"type": "response.output_item.done", "output_index": index, "item": item}

    def _whole(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        return [self._added(dict(item)), self._done(item)]

    def _piece(self, attempt: str, kind: str, text: str) -> list[dict[str, Any]]:
        out = []
        if self._open is None or self._open[:2] != (attempt, kind):
            out += self._close("completed")
            out += self._start(attempt, kind)
        assert self._open is not None
        item = self._open[2]
        item["content"][0]["text"] += text
        index = len(self.response["output"]) - 1
        delta = (
            "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
        )
        piece = {"type": delta, "item_id": item["id"], "output_index": index, "content_index": 0}
        piece["delta"] = text
        if kind == "message":
            piece["logprobs"] = []
        return [*out, piece]

    def _start(self, attempt: str, kind: str) -> list[dict[str, Any]]:
        number = len(self.response["output"])
        part: dict[str, Any]
        if kind == "message":
            item_id, part = f"msg_{attempt}_{number}", {"type": "output_text", "text": ""}
            part["annotations"] = []
            item: dict[str, Any] = {"type": "message", "id": item_id, "role": "assistant"}
        else:
            item_id, part = f"rs_{attempt}_{number}", {"type": "reasoning_text", "text": ""}
            item = {"type": "reasoning", "id": item_id, "summary": []}
        item.update(status="in_progress", content=[part])
        self._open = (attempt, kind, item)
        added = self._added({**item, "content": []}, attempt)
        index = added["output_index"]
        return [
            added,
            {
                "type": "response.content_part.added",
                "item_id": item_id,
                "output_index": index,
                "content_index": 0,
                "part": {**part, "text": ""},
            },
        ]

    def _close(self, status: str) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        _, kind, item = self._open
        self._open = None
        item["status"] = status
        part = item["content"][0]
        index = len(self.response["output"]) - 1
        self.response["output"][index] = item
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        text_done = (
            {"type": "response.output_text.done", **where, "text": part["text"], "logprobs": []}
            if kind == "message"
            else {"type": "response.reasoning_text.done", **where, "text": part["text"]}
        )
        return [
            text_done,
            {"type": "response.content_part.done", **where, "part": part},
            self._done(item),
        ]

    def _call(self, attempt: str, call: ToolCall) -> list[dict[str, Any]]:
        arguments = _arguments(call)
        item = {
            "type": "function_call",
            "id": f"fc_{call.id}",
            "call_id": call.id,
            "name": call.name,
            "arguments": arguments,
            "status": "completed",
        }
        added = self._added({**item, "arguments": "", "status": "in_progress"}, attempt)
        where = {"item_id": item["id"], "output_index": added["output_index"]}
        self.response["output"][-1] = item
        return [
            added,
            {"type": "response.function_call_arguments.delta", **where, "delta": arguments},
            {"type": "response.function_call_arguments.done", **where, "arguments": arguments},
            self._done(item),
        ]

    def _finish(self, result: TurnResult[Any]) -> list[dict[str, Any]]:
        end, response = result.end, self.response
        out = []
        if end.reason == "awaiting_approval":
            calls = _calls(result)
            for call_id in end.call_ids:
                call = calls.get(call_id)
                item = {
                    "type": "mcp_approval_request",
                    "id": call_id,
                    "name": "" if call is None else call.name,
                    "arguments": "{}" if call is None else _arguments(call),
                    "server_label": SERVER_LABEL,
                }
                out += self._whole(item)
        kept = zip(response["output"], self._owners, strict=True)
        response["output"] = [item for item, owner in kept if owner not in self._void]
        usage = result.usage
        response["usage"] = {
            "input_tokens": usage.input_tokens,
            "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
            "output_tokens": usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.input_tokens + usage.output_tokens,
        }
        if end.reason == "failed":
            response["status"] = "failed"
            response["error"] = {"code": end.code, "message": end.detail}
            kind = "response.failed"
        elif end.reason in ("completed", "awaiting_approval", "refusal"):
            response["status"] = "completed"
            response["completed_at"] = int(time.time())
            kind = "response.completed"
        else:
            response["status"] = "cancelled" if end.reason == "cancelled" else "incomplete"
            response["incomplete_details"] = {"reason": _INCOMPLETE.get(end.reason, end.reason)}
            kind = "response.incomplete"
        return [*out, {"type": kind, "response": response}]


_STORED: Final = ResponsesRequest(ResponsesBody(), None, (), None)


@final
class TurnStarts:
    """Where the turns last retrieved start in their sessions' logs: the sequence
    before a turn's ``turn.started`` and whether the turn before's start is logged,
    for ``size`` turns at most (the oldest forgotten). A log only grows, so a turn
    retrieved again (a client polling a background response) is read from its
    start, not from its log's."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._starts: dict[tuple[str, int], tuple[int, bool]] = {}

    def get(self, session_id: str, turn: int) -> tuple[int, bool]:
        return self._starts.get((session_id, turn), (-1, False))

    def put(self, session_id: str, turn: int, start: tuple[int, bool]) -> None:
        self._starts.pop((session_id, turn), None)
        self._starts[session_id, turn] = start
        if len(self._starts) > self.size:
            del self._starts[next(iter(self._starts))]


async def replay(
    events: Events, session_id: str, turn: int, starts: TurnStarts | None = None
) -> tuple[ResponsesFraming, bool]:
    """Turn ``turn`` of the session framed again from its event log (read in bounded
    batches from the turn's start, if ``starts`` knows it, else from the log's, up
    to the turn's end or the next turn's start), and whether the turn's start is
    logged. What the log does not hold is not made up: ``model`` is the default
    (``trio-agent``), ``instructions`` null, ``created_at`` 0, no ``completed_at``
    nor ``background``; ``previous_response_id`` names the session's turn before
    when its start is logged here (a branch's first turn has none)."""
    framing = ResponsesFraming(_STORED, response_id(session_id, turn), turn)
    framing.response["created_at"] = 0
    starts = TurnStarts(0) if starts is None else starts
    cursor, previous = starts.get(session_id, turn)
    started = past = False
    while not (framing.done or past):
        batch = await events.read(session_id, cursor)
        if not batch:
            break
        for sequence, line in batch:
            event = _decode_line(line).event
            if event.type == "turn.started":
                past = event.turn > turn  # a later turn: this one's end is not logged
                if past:
                    break
                previous = previous or event.turn == turn - 1
                if event.turn == turn and not started:
                    started = True
                    starts.put(session_id, turn, (cursor, previous))
            cursor = sequence
            framing.take(event)
            if framing.done:
                break
    framing.response.pop("completed_at", None)
    framing.response.pop("background")  # the request's, not logged
    if previous:
        framing.response["previous_response_id"] = response_id(session_id, turn - 1)
    return framing, started


def _calls(result: TurnResult[Any]) -> dict[str, ToolCall]:
    """The tool calls of the turn's last assistant message, by id."""
    for message in reversed(result.messages):
        if isinstance(message, AssistantMessage):
            return {b.id: b for b in message.content if isinstance(b, ToolCall)}
    return {}
