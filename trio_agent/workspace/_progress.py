"""Progress of the workspace tools, reported through the call's ``ToolContext``.

``OutputLines`` turns what a running command writes into ``tool.updated``
reports: each complete line (stdout and stderr as they arrive), made safe to
print and cut, the lines since the last report sent together, at most one
report per ``PROGRESS_INTERVAL`` (the context's own bound). ``Meter`` paces
the counts a worker thread reports (files searched, bytes read): none in the
first ``seconds`` of the work, then at most one per ``seconds``.
"""

from __future__ import annotations

import math
import re
import time
from collections import deque
from typing import final

import trio

from ..tools._context import MAX_PROGRESS_TEXT, PROGRESS_INTERVAL, ToolContext

__all__ = ["LINE_CHARS", "Meter", "OutputLines", "printable", "size_text"]

LINE_CHARS = 200
"""Characters of one output line in a progress report; a longer line is cut (``…``)."""
_LINE_BYTES = LINE_CHARS * 4  # enough bytes for LINE_CHARS characters of any UTF-8 text
_PENDING_LINES = 50  # lines waiting for a report: the newest are kept, the rest counted
_SLACK = 1e-6  # seconds added to the bound, so clock rounding never has a report dropped
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def printable(raw: bytes, cut: bool) -> str:
    """One output line as text that is safe to print: decoded as UTF-8 (bad bytes
    become U+FFFD), what a terminal would show after the last carriage return,
    escape sequences removed, other control characters replaced, at most
    ``LINE_CHARS`` characters (``cut``: the line was longer than ``raw``)."""
    text = raw.decode("utf-8", "replace").rstrip("\r")
    text = _ESCAPES.sub("", text.rpartition("\r")[2])
    text = _CONTROLS.sub("\ufffd", text).rstrip()
    if cut or len(text) > LINE_CHARS:
        text = text[: LINE_CHARS - 1] + "…"
    return text


@final
class OutputLines:
    """A running command's output lines, reported to ``context`` as they come.

    ``feed`` takes each piece of output (on the trio thread); the complete
    lines wait until the context's bound allows a report, then go out
    together, newest last, one line each (blank lines skipped), within
    ``MAX_PROGRESS_TEXT``; lines that did not fit are counted in a first
    ``[... N more lines]`` line. ``due`` is when waiting lines can go out
    (``math.inf`` when none wait): the reader calls ``flush`` then.
    ``end`` reports the last line, even without a newline, if the bound
    allows (the call's result has all of the output in any case).
    """

    __slots__ = ("_context", "_last", "_partial", "_pending", "_skipped")

    def __init__(self, context: ToolContext) -> None:
        self._context = context
        self._last = -math.inf  # when this call's last report went out (trio's clock)
        self._partial = bytearray()  # the line being written, its first bytes only
        self._pending: deque[bytes] = deque(maxlen=_PENDING_LINES)
        self._skipped = 0  # complete lines that will not be reported

    @property
    def due(self) -> float:
        """When the waiting lines can be reported (trio's clock), or ``math.inf``."""
        return self._last + PROGRESS_INTERVAL + _SLACK if self._pending else math.inf

    def feed(self, data: bytes | bytearray) -> None:
        """Take a piece of output; report the complete lines at once if the bound allows."""
        *complete, rest = bytes(data).split(b"\n")
        if complete:
            complete[0] = bytes(self._partial + complete[0])
            self._partial = bytearray()
            complete = [line for line in complete if line and not line.isspace()]
            if len(complete) > _PENDING_LINES:  # only the newest lines can be reported
                self._skipped += len(self._pending) + len(complete) - _PENDING_LINES
                self._pending.clear()
                complete = complete[-_PENDING_LINES:]
            for line in complete:
                if len(self._pending) == _PENDING_LINES:  # the oldest makes room
                    self._skipped += 1
                self._pending.append(bytes(line[: _LINE_BYTES + 1]))
        if len(self._partial) <= _LINE_BYTES:
            self._partial += rest[: _LINE_BYTES + 1 - len(self._partial)]
        self.flush()

    def flush(self) -> None:
        """Report the waiting lines now, if the bound allows (else they keep waiting)."""
        if trio.current_time() < self.due:  # also when none wait (``due`` is inf)
            return
        lines = [printable(raw[:_LINE_BYTES], len(raw) > _LINE_BYTES) for raw in self._pending]
        lines = [line for line in lines if line]
        skipped = self._skipped
        self._pending.clear()
        self._skipped = 0
        while lines and sum(map(len, lines)) + len(lines) > MAX_PROGRESS_TEXT - 30:
            lines.pop(0)
            skipped += 1
        if not lines:
            return
        if skipped:
            lines.insert(0, f"[... {skipped} more lines]")
        self._context.report("\n".join(lines))
        # read after the report: never before the context's own reading, so the
        # context's bound holds whenever ``due`` has come
        self._last = trio.current_time()

    def end(self) -> None:
        """The output ended: what was being written is a complete line too."""
        if self._partial:
            self.feed(b"\n")
        self.flush()


@final
class Meter:
    """Paces a worker thread's progress reports: ``due()`` is true at most once per
    ``seconds`` (``time.monotonic``), and never in the first ``seconds``, so
    quick work reports nothing."""

    __slots__ = ("_next", "_seconds")

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._next = time.monotonic() + seconds

    def due(self) -> bool:
        """Whether a report may go out now; if so, the next one waits ``seconds``."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self._seconds
        return True


def size_text(count: int) -> str:
    """A byte count for people: ``812 B``, ``3.4 KiB``, ``12.0 MiB``."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"
