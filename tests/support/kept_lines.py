"""``KeptLines``: a ``SessionWriter`` that keeps the lines a ``Ledger`` writes, in
memory: what a test that forges a ledger by hand (as an attacker would) writes
through the ledger's own API, then reads, edits or writes to a file."""

from __future__ import annotations


class KeptLines:
    """A ``SessionWriter`` keeping each line given to it in ``lines`` (nothing is
    written anywhere; flushing and closing do nothing)."""

    def __init__(self, lines: list[bytes] | None = None) -> None:
        self.lines: list[bytes] = [] if lines is None else lines

    def append(self, line: bytes) -> None:
        self.lines.append(line)

    def commit(self) -> None:
        pass

    async def flush(self, durable: bool) -> None:
        pass

    async def aclose(self) -> None:
        pass
