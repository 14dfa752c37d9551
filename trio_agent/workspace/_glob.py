"""Glob patterns matched in linear time, by simulating their automaton.

``*`` is any run of characters without ``/``, ``?`` one character but not
``/``, ``**`` any run including ``/`` (and newlines, which the regex this
replaced did not match), ``**/`` zero or more whole directories; every other
character stands for itself. A pattern must match the whole path.
Translating a glob into a backtracking regex lets a pattern such as
``*a*a*a*a*b`` take exponential time on one long name; here the set of
pattern positions reachable after each character of the path is kept as the
bits of an int, so a match costs O(len(path) x len(pattern)) at worst.
"""

from __future__ import annotations

from typing import Final, final

__all__ = ["Glob"]

_SLASH: Final = "/"


@final
class Glob:
    """A compiled glob pattern; ``match(path)`` says whether it matches all of ``path``.

    Bit ``i`` of ``state`` stands for "the first ``i`` tokens are matched"
    (bit ``len(tokens)`` set at the end: the path matched). A ``**/`` is zero
    or more ``name/``: bit ``i`` of ``inside`` stands for "in the middle of a
    directory name the ``**/`` at token ``i`` consumes", which only a ``/``
    ends (back to bit ``i`` of ``state``, from where it may match nothing more).
    """

    __slots__ = ("_accept", "_any", "_dirs", "_empty", "_literals", "_one", "_star", "_steps")

    def __init__(self, pattern: str) -> None:
        self._literals: dict[str, int] = {}  # character -> tokens that are that literal
        self._one = self._star = self._any = self._dirs = 0
        tokens = 0
        i = 0
        while i < len(pattern):
            bit = 1 << tokens
            if pattern.startswith("**/", i):
                self._dirs |= bit
                i += 3
            elif pattern.startswith("**", i):
                self._any |= bit
                i += 2
            elif pattern[i] == "*":
                self._star |= bit
                i += 1
            elif pattern[i] == "?":
                self._one |= bit
                i += 1
            else:
                self._literals[pattern[i]] = self._literals.get(pattern[i], 0) | bit
                i += 1
            tokens += 1
        self._empty = self._star | self._any | self._dirs  # tokens that may match nothing
        self._accept = 1 << tokens
        self._steps: dict[str, tuple[int, int]] = {}  # character -> (advance, stay) masks

    def _closure(self, state: int) -> int:
        """``state`` plus every position reached by letting ``*``-like tokens match nothing.

        Within a run of such tokens, adding the run's bits to a state bit in it
        carries up to the first position past the run; the bits that flip are
        exactly the positions from that state bit on. (A second state bit in the
        same run stops the carry, but it is already in ``state``.)
        """
        empty = self._empty
        return state | (((state & empty) + empty) ^ empty)

    def _step_masks(self, char: str) -> tuple[int, int]:
        """(tokens other than ``**/`` that consume ``char`` and move on, those that
        consume it and stay)."""
        masks = self._steps.get(char)
        if masks is None:
            literal = self._literals.get(char, 0)
            if char == _SLASH:  # neither * nor ? consumes a /
                masks = (literal, self._any)
            else:
                masks = (literal | self._one, self._star | self._any)
            if len(self._steps) < 4096:  # bounded: a path may hold any characters
                self._steps[char] = masks
        return masks

    def match(self, path: str) -> bool:
        """Whether the pattern matches all of ``path``."""
        dirs = self._dirs
        state, inside = self._closure(1), 0
        for char in path:
            advance, stay = self._step_masks(char)
            moved = ((state & advance) << 1) | (state & stay)
            in_dirs = (state | inside) & dirs  # a **/ consumes any character
            if char == _SLASH:  # ... and a / ends the directory name it is in
                state, inside = self._closure(moved | in_dirs), 0
            else:
                state, inside = self._closure(moved), in_dirs
            if not (state or inside):
                return False
        return bool(state & self._accept)
