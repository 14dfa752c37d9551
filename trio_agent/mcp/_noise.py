"""What a server does wrong again and again, logged without flooding the log:
the first few as warnings, the rest at DEBUG (a hostile or broken server can
write garbage in a loop)."""

from __future__ import annotations

from typing import Final, final

from .._log import MCP as logger

__all__ = ["WARNED", "Noise"]

WARNED: Final = 10
"""Occurrences of one kind of noise logged as warnings, a server; the rest at DEBUG."""


@final
class Noise:
    """One kind of noise from one server (``label``): ``note(text)`` logs the
    first ``WARNED`` as warnings, then says once that more go to DEBUG."""

    __slots__ = ("count", "label")

    def __init__(self, label: str) -> None:
        self.label = label
        self.count = 0

    def note(self, text: str) -> None:
        self.count += 1
        if self.count > WARNED:
            logger.debug("%s: %s", self.label, text)
            return
        logger.warning("%s: %s", self.label, text)
        if self.count == WARNED:
            logger.warning("%s: more of these are logged at DEBUG", self.label)
