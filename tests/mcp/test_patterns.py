"""The regular expressions of an MCP tool's inputSchema never run on the event
loop (hardening issue): a server's ``pattern`` such as ``^(a+)+$`` backtracks
for seconds in Python's ``re``, doubling per character, and ``jsonschema`` ran
it on the trio thread, wherever a regex is (``pattern``, ``patternProperties``
with ``additionalProperties``, ``propertyNames``, ``unevaluatedProperties``).
Server: tests/support/mcp_servers/edge/pattern_server.py (one tool per place)."""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from paths import EDGE_SERVERS

pytest.importorskip("mcp")

from trio_agent.mcp import MCPServerStdio
from trio_agent.mcp import _patterns as _mcp_patterns
from trio_agent.tools import ToolArgumentsError

SERVER = str(EDGE_SERVERS / "pattern_server.py")
EVIL = "^(a+)+$"
RED_TEAM = "a" * 26 + "!"  # 2 to 7 s in re, as the red team found
SLOW = "a" * 30 + "!"  # 16 times that
MANY = 50
"""Checkpoints another task must pass while a call is checked: thousands when the
loop is free (the matcher child takes 20 ms to start alone), none when a match
holds it."""


async def ticks_during(call: Callable[[], Awaitable[Any]]) -> tuple[Any, int]:
    """What ``call`` returned (or the exception it raised) and how many times a
    task that only yields to the scheduler ran meanwhile."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await trio.lowlevel.checkpoint()
            ticks += 1

    outcome: Any
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        try:
            outcome = await call()
        except ToolArgumentsError as exc:
            outcome = exc
        seen = ticks
        nursery.cancel_scope.cancel()
    return outcome, seen


def refused(outcome: Any, *fragments: str) -> None:
    assert isinstance(outcome, ToolArgumentsError), outcome
    for fragment in fragments:
        assert fragment in str(outcome), str(outcome)


async def test_a_backtracking_pattern_does_not_hold_the_event_loop():
    """The red team's case: ``^(a+)+$`` against 26 ``a``s and ``!`` held the trio
    thread 6.5 s (a 1 s deadline on the turn ended it only then)."""
    with trio.fail_after(60):
        async with MCPServerStdio(sys.executable, [SERVER]) as server:
            tools = {t.name: t for t in server.tools()}
            outcome, ticks = await ticks_during(lambda: tools["match"].execute({"x": RED_TEAM}))
    refused(outcome, "$.x")  # does not match, or undecided within the bound: refused
    assert ticks >= MANY  # observed: 0


async def test_a_sane_pattern_still_validates_and_names_the_path():
    """What the patterns are for is kept: valid arguments reach the server, invalid
    ones get jsonschema's message at their JSON path."""
    with trio.fail_after(60):
        async with MCPServerStdio(sys.executable, [SERVER]) as server:
            tools = {t.name: t for t in server.tools()}
            assert '"x": "aaa"' in await tools["match"].execute({"x": "aaa"})
            with pytest.raises(ToolArgumentsError, match=r"'ab' does not match .* - at `\$\.x`"):
                await tools["match"].execute({"x": "ab"})
            assert '"aa": 1' in await tools["keyed"].execute({"m": {"aa": 1}})
            with pytest.raises(ToolArgumentsError, match=r"not of type 'integer' - at `\$\.m\.aa`"):
                await tools["keyed"].execute({"m": {"aa": "one"}})
            with pytest.raises(ToolArgumentsError, match=r"'b' does not match any of the regexes"):
                await tools["keyed"].execute({"m": {"b": 1}})
            with pytest.raises(ToolArgumentsError, match=r"'b' does not match .* - at `\$\.m`"):
                await tools["named"].execute({"m": {"b": 1}})


async def test_a_pattern_not_decided_within_its_bound_refuses_the_call(monkeypatch):
    """A match that could not be decided in time must fail closed, naming the
    argument; before, it was decided on the loop however long it took."""
    monkeypatch.setattr(_mcp_patterns, "PATTERN_SECONDS", 1.0)
    with trio.fail_after(60):
        async with MCPServerStdio(sys.executable, [SERVER]) as server:
            tools = {t.name: t for t in server.tools()}
            outcome, ticks = await ticks_during(lambda: tools["match"].execute({"x": SLOW}))
    refused(outcome, f"pattern {EVIL!r} within 1 s", "the call was refused - at `$.x`")
    assert ticks >= MANY


@pytest.mark.parametrize("tool", ["keyed", "named"])
async def test_property_names_are_matched_off_the_loop_too(monkeypatch, tool):
    """``patternProperties`` (and ``additionalProperties`` beside it) and
    ``propertyNames`` matched the model's keys with ``re`` on the loop."""
    monkeypatch.setattr(_mcp_patterns, "PATTERN_SECONDS", 1.0)
    with trio.fail_after(60):
        async with MCPServerStdio(sys.executable, [SERVER]) as server:
            tools = {t.name: t for t in server.tools()}
            outcome, ticks = await ticks_during(lambda: tools[tool].execute({"m": {SLOW: 1}}))
    refused(outcome, "within 1 s", f"- at `$.m['{SLOW}']`")
    assert ticks >= MANY


async def test_a_not_cannot_turn_an_undecided_match_into_a_pass(monkeypatch):
    """Under ``not``, an undecided match reported as a failed one would make the
    ``not`` pass: the call must be refused, not sent."""
    monkeypatch.setattr(_mcp_patterns, "PATTERN_SECONDS", 1.0)
    with trio.fail_after(60):
        async with MCPServerStdio(sys.executable, [SERVER]) as server:
            tools = {t.name: t for t in server.tools()}
            outcome, ticks = await ticks_during(lambda: tools["negated"].execute({"x": SLOW}))
    refused(outcome, "within 1 s", "- at `$.x`")
    assert ticks >= MANY


async def test_unevaluated_properties_beside_pattern_properties_leave_the_check_to_the_server(
    monkeypatch,
):
    """jsonschema's ``unevaluatedProperties`` runs ``re`` on the
    ``patternProperties`` it finds, out of our reach: such a schema is not used
    to check (as one that does not compile), never matched on the loop. Told by
    what ``re`` was asked, not by how busy the loop looked: this call is quick
    either way, so a count of scheduler ticks said little on a loaded machine."""
    asked = []
    search = re.search

    def watched(pattern: Any, string: Any, *rest: Any) -> Any:
        if string == SLOW:
            asked.append(pattern)
        return search(pattern, string, *rest)

    with trio.fail_after(60):
        async with MCPServerStdio(sys.executable, [SERVER]) as server:
            tools = {t.name: t for t in server.tools()}
            monkeypatch.setattr(re, "search", watched)
            outcome = await tools["evaluated"].execute({"m": {SLOW: 1}})
            monkeypatch.undo()
    assert SLOW in outcome  # the server answered
    assert asked == []  # the model's key was never matched in this process


async def test_format_regex_compiles_nothing():
    """Pins that no format checker is on: ``format: regex`` would compile the
    model's string with ``re`` on the loop."""
    with trio.fail_after(60):
        async with MCPServerStdio(sys.executable, [SERVER]) as server:
            tools = {t.name: t for t in server.tools()}
            assert '"x": "("' in await tools["formatted"].execute({"x": "("})


async def test_patterns_refuse_the_call_when_the_matcher_cannot_run(monkeypatch):
    """Fail closed: with no child to match in, nothing is decided."""
    with trio.fail_after(60):
        async with MCPServerStdio(sys.executable, [SERVER]) as server:
            tools = {t.name: t for t in server.tools()}
            monkeypatch.setattr(sys, "executable", "/nonexistent/python")
            with pytest.raises(ToolArgumentsError, match=r"the call was refused - at `\$\.x`"):
                await tools["match"].execute({"x": "aaa"})
