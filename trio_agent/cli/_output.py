"""What ``demo``, ``run`` and ``resume`` print, through one ``Printer``: text as it
streams, a line per tool call, progress report and result, a summary per turn; a
spinner with the elapsed time while a call runs when stdout is a terminal (plain
lines otherwise); or, with ``--json``, one versioned JSON line per event. All of it
goes through an ``Output``, written in order off the trio thread."""

from __future__ import annotations

import os
import re
from typing import Final, TextIO, final

import msgspec
import trio

from ..events import SessionEvent, TurnEnd
from ..messages._ir import (
    AssistantMessage,
    DocumentBlock,
    ImageBlock,
    InputBlock,
    Message,
    TextBlock,
    UserMessage,
)
from ..model import TextDelta
from ..tools._types import enc_hook, json_bytes
from ._schema import SCHEMA_VERSION, EventLine

__all__ = [
    "SPIN_SECONDS",
    "Output",
    "Printer",
    "content_line",
    "describe_end",
    "json_line",
    "one_line",
    "visible",
]

SPIN_SECONDS: Final = 0.1
_FRAMES: Final = "|/-\\"
_CLEAR: Final = "\r\x1b[K"  # back to the start of the line, and erase it
# Controls a terminal would act on (escape sequences from a model or a command):
# shown as \xNN. Newline and tab stay.
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab shown as ``\\xNN``."""
    text = text.replace("\r\n", "\n")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


_WIDE_CONTROL: Final = re.compile(r"[\x7f-\x9f]")


def json_line(value: object) -> str:
    """``value`` as compact JSON on one line, safe on a terminal and still JSON:
    msgspec escapes the controls below ``\\x20``; DEL and the C1 controls (which
    can only sit in strings) are written as ``\\u00NN``."""
    text = json_bytes(value).decode()
    return _WIDE_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def one_line(text: str, limit: int = 100) -> str:
    """``text`` on one line (whitespace collapsed, controls shown), at most ``limit``."""
    text = visible(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def content_line(content: str | tuple[InputBlock, ...], limit: int = 100) -> str:
    """User or tool-result content on one line: its text, and a short mark for
    each image and document (media type and size, or URL)."""
    if type(content) is str:
        return one_line(content, limit)
    parts = []
    for block in content:
        if type(block) is TextBlock:
            parts.append(block.text)
        else:
            assert isinstance(block, ImageBlock | DocumentBlock)
            kind = "image" if type(block) is ImageBlock else "document"
            where = block.url if block.data is None else f"{len(block.data)} bytes"
            parts.append(f"[{kind} {block.media_type} {where}]")
    return one_line(" ".join(parts), limit)


_END_WORDS: Final = {
    "refusal": "the model declined to answer",
    "content_filter": "the provider's content policy cut the answer",
    "length": "the model reached its output-token limit",
}


def describe_end(end: TurnEnd) -> str:
    """A turn end's reason, with its code or detail when it has one."""
    detail = ""
    if end.reason == "failed":
        detail = f"{end.code}: {end.detail}"
    elif end.reason == "blocked":
        detail = end.detail
    elif end.reason == "repeated_failure":
        detail = f"{end.tool_name} failed {end.count} times"
    elif end.reason == "token_budget":
        detail = f"{end.used} of {end.limit} tokens"
    elif end.reason == "usage_limit":
        figures = (
            f"${end.used:.4f} of ${end.limit:.4f}"
            if end.name == "cost"
            else f"{end.used} of {end.limit}"
        )
        detail = f"the {end.scope}'s {end.name} limit ({figures})"
    else:
        detail = _END_WORDS.get(end.reason, "")
    return f"{end.reason}: {one_line(detail, 200)}" if detail else end.reason


@final
class Output:
    """Text for stdout and stderr, written in order by one task in a worker thread, so
    a slow reader never blocks the trio thread. ``write`` never waits; after the
    writer task is gone (or before it starts), ``flush_here()`` writes what is left."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self._pending: list[tuple[TextIO, str]] = []
        self._wake: trio.Event | None = None
        self._closing = False
        self._writing = False
        self._idle: trio.Event | None = None  # set each time the writer wrote a batch
        self._broken: set[int] = set()

    @property
    def is_terminal(self) -> bool:
        """stdout is a terminal that can redraw a line."""
        try:
            return self.stdout.isatty() and os.environ.get("TERM") != "dumb"
        except ValueError:  # a closed stream
            return False

    def write(self, text: str, *, err: bool = False) -> None:
        self._pending.append((self.stderr if err else self.stdout, text))
        if self._wake is not None:
            self._wake.set()

    def _write(self, pending: list[tuple[TextIO, str]]) -> None:
        for stream, text in pending:
            if id(stream) in self._broken:
                continue
            try:
                stream.write(text)
                stream.flush()
            except BrokenPipeError:  # the reader went away (`| head`): the run goes on
                self._broken.add(id(stream))

    def flush_here(self) -> None:
        """Write what is pending in this thread (outside ``trio.run`` only)."""
        pending, self._pending = self._pending, []
        self._write(pending)

    async def run(self) -> None:
        """The writer task: writes until ``close()``, then what is left, and returns."""
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake = trio.Event()
                await self._wake.wait()
                continue
            pending, self._pending = self._pending, []
            self._writing = True
            try:
                await trio.to_thread.run_sync(self._write, pending)
            finally:
                self._writing = False
                if self._idle is not None:
                    self._idle.set()

    async def drained(self) -> None:
        """Wait until the writer task has written everything written so far (before
        reading an answer from the terminal, so the question is on it)."""
        while self._pending or self._writing:
            self._idle = trio.Event()
            await self._idle.wait()

    def close(self) -> None:
        """No more text: the writer task returns once it has written everything."""
        self._closing = True
        if self._wake is not None:
            self._wake.set()


_line_encoder = msgspec.json.Encoder(enc_hook=enc_hook)  # a typed output may be pydantic's


@final
class Printer:
    """Prints a session's events for a person, or as JSON lines (``as_json``).

    ``live`` (a terminal): while tool calls run, a spinner line shows the call
    and its elapsed time, redrawn every ``SPIN_SECONDS`` by ``spin()`` and erased
    before anything else is printed. Not live: plain lines, no control characters.
    """

    def __init__(self, out: Output, *, as_json: bool, live: bool | None = None) -> None:
        self.out = out
        self.as_json = as_json
        self.live = (out.is_terminal if live is None else live) and not as_json
        self._in_text = False  # a streamed text line is open
        self._spinner_shown = False
        self._frame = 0
        self._running: dict[str, tuple[str, float]] = {}  # call id: name, start

    # -- lines
    def _line(self, text: str) -> None:
        self._clear_spinner()
        if self._in_text:
            self.out.write("\n")
            self._in_text = False
        self.out.write(text + "\n")

    def note(self, text: str) -> None:
        """A line of the command's own (a warning, what a resume closed): on stdout
        among the events, or on stderr when stdout holds JSON lines."""
        if self.as_json:
            self.out.write(visible(text) + "\n", err=True)
        else:
            self._line(visible(text))

    def ask(self, text: str) -> None:
        """A question of the command's own, left open for the answer on its line:
        on stdout, or on stderr when stdout holds JSON lines."""
        self._clear_spinner()
        if self._in_text:
            self.out.write("\n")
            self._in_text = False
        self.out.write(visible(text), err=self.as_json)

    def output(self, value: object) -> None:
        """The turn's typed answer, as one JSON line (``json_line``); with ``--json``
        nothing: the ``turn.finished`` line carries it (``result.output``)."""
        if not self.as_json:
            self._line(json_line(value))

    def close(self) -> None:
        """End an open text line and erase the spinner: the turn's output is over."""
        self._running.clear()
        self._clear_spinner()
        if self._in_text:
            self.out.write("\n")
            self._in_text = False

    # -- the spinner
    def _clear_spinner(self) -> None:
        if self._spinner_shown:
            self.out.write(_CLEAR)
            self._spinner_shown = False

    def draw_spinner(self) -> None:
        """Redraw the spinner line (if live and a call runs)."""
        if not self.live or not self._running:
            return
        name, start = next(iter(self._running.values()))
        more = len(self._running) - 1
        what = one_line(name, 40) + (f" and {more} more" if more else "")
        elapsed = trio.current_time() - start
        frame = _FRAMES[self._frame % len(_FRAMES)]
        self._frame += 1
        self.out.write(f"{_CLEAR}{frame} {what} running, {elapsed:.1f} s")
        self._spinner_shown = True

    async def spin(self) -> None:
        """Redraw the spinner every ``SPIN_SECONDS`` (run it as a task while live)."""
        while True:
            await trio.sleep(SPIN_SECONDS)
            self.draw_spinner()

    # -- events
    def __call__(self, event: SessionEvent) -> None:
        if self.as_json:
            wrapped = EventLine(schema=SCHEMA_VERSION, event=event)
            self.out.write(_line_encoder.encode(wrapped).decode() + "\n")
            return
        if event.type == "model.chunk":
            if isinstance(event.chunk, TextDelta) and event.chunk.text:
                self._clear_spinner()
                self.out.write(visible(event.chunk.text))
                self._in_text = not event.chunk.text.endswith("\n")
            return
        if event.type == "tool.started":
            args = msgspec.json.encode(event.call.arguments).decode()
            self._line(f"-> {one_line(event.call.name, 80)}({one_line(args, 80)})")
            self._running[event.call.id] = (event.call.name, trio.current_time())
            self.draw_spinner()
        elif event.type == "tool.updated":
            # a report may hold several lines (a command's output since the last one)
            part = "" if event.fraction is None else f" ({event.fraction:.0%})"
            for line in event.message.splitlines() or [""]:
                self._line(f"   ... {one_line(line, 200)}{part}")
            self.draw_spinner()
        elif event.type == "tool.finished":
            self._running.pop(event.call.id, None)
            mark = "error" if event.result.is_error else "ok"
            self._line(f"   [{mark}] {content_line(event.result.content)}")
            self.draw_spinner()
        elif event.type == "approval.requested":
            args = json_line(event.call.arguments)
            self._line(
                f"-? {one_line(event.call.name, 80)}({one_line(args, 80)}) "
                f"waits for approval [{one_line(event.call.id, 80)}]"
            )
        elif event.type == "approval.decided":
            said = "approved" if event.approved else "rejected"
            if event.by:
                said += f" by {one_line(event.by, 40)}"
            if not event.approved and event.reason:
                said += f": {one_line(event.reason, 80)}"
            self._line(
                f"   [{said}] {one_line(event.call.name, 80)} [{one_line(event.call.id, 80)}]"
            )
        elif event.type == "message.accepted":
            self._accepted(event.message)
        elif event.type == "attempt.failed":
            wait = "giving up" if event.retry_in is None else f"retrying in {event.retry_in:.1f} s"
            void = f"; the {event.chunks} chunk(s) above are void" if event.chunks else ""
            self._line(
                f"   (attempt {event.attempt} failed: {one_line(event.error, 80)}; {wait}{void})"
            )
        elif event.type == "context.compacted":
            self._line(
                f"   (context compacted before {event.request_id}: "
                f"{len(event.messages)} messages kept)"
            )
        elif event.type == "turn.finished":
            self._running.clear()
            result = event.result
            usage = result.usage
            cost = "" if usage.cost is None else f", ${usage.cost:.6f}"
            self._line(
                f"[turn {event.turn} {describe_end(result.end)}; {result.steps} step(s), "
                f"{usage.input_tokens} in / {usage.output_tokens} out tokens{cost}]"
            )

    def _accepted(self, message: Message) -> None:
        """A message the turn took in: the user's input, or a result closing a call."""
        if isinstance(message, UserMessage):
            self._line(f"user: {content_line(message.content)}")
        elif isinstance(message, AssistantMessage):
            text = " ".join(b.text for b in message.content if isinstance(b, TextBlock))
            self._line(f"assistant: {one_line(text)}")
        else:
            mark = "error" if message.is_error else "ok"
            self._line(
                f"   [{mark}] {one_line(message.tool_name, 80)}: {content_line(message.content)}"
            )
