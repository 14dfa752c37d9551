"""The step check merges the stream (``StepCheck``, on the hot path) and the
response (``_response_blocks``, on locals) by one rule written twice for
speed (issue 15): a property test holds both to an independent reference
merge, and ``finish`` to accepting exactly when the references agree."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_agent import (
    ModelProtocolError,
    ModelResponse,
    RedactedThinkingBlock,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
)
from trio_agent.engine._step import StepCheck, _response_blocks

small = st.sampled_from(["", "", "a", "b", "é", "xy"])
arguments = st.sampled_from([{}, {"a": 1}, {"a": 1.0}, {"b": True, "a": 1}])
item = st.one_of(
    st.tuples(st.just("text"), small),
    st.tuples(st.just("think"), small, small),
    st.tuples(st.just("red"), st.sampled_from(["r1", "r2"])),
    st.tuples(st.just("call"), st.sampled_from(["c1", "c2"]), arguments),
)
sequences = st.lists(item, max_size=12)


def reference(items: list[Any]) -> list[Any]:
    """The contract's rule (DESIGN 11.1), written plainly: adjacent text joins,
    adjacent thinking joins (texts and signatures), empty pieces drop, calls
    (arguments with sorted keys) and redacted thinking stand alone."""
    out: list[Any] = []
    open_group: Any = None
    for kind, *rest in items:
        if kind == "text" and rest[0]:
            if open_group and open_group[0] == "text":
                open_group = ("text", open_group[1] + rest[0])
            else:
                out += [open_group] if open_group else []
                open_group = ("text", rest[0])
        elif kind == "think" and (rest[0] or rest[1]):
            if open_group and open_group[0] == "think":
                open_group = ("think", open_group[1] + rest[0], open_group[2] + rest[1])
            else:
                out += [open_group] if open_group else []
                open_group = ("think", rest[0], rest[1])
        elif kind in ("red", "call"):
            out += [open_group] if open_group else []
            open_group = None
            if kind == "red":
                out.append(("red", rest[0]))
            else:
                out.append(("call", rest[0], msgspec.json.encode(rest[1], order="sorted")))
    return out + ([open_group] if open_group else [])


def chunks(items: list[Any]) -> list[Any]:
    made = {
        "text": lambda t: TextDelta(t),
        "think": lambda t, s: ThinkingDelta(t, s),
        "red": lambda d: RedactedThinkingBlock(d),
        "call": lambda i, a: ToolCall(i, "tool", dict(a)),
    }
    return [made[kind](*rest) for kind, *rest in items]


def blocks(items: list[Any]) -> list[Any]:
    made = {
        "text": lambda t: TextBlock(t),
        "think": lambda t, s: ThinkingBlock(t, s),
        "red": lambda d: RedactedThinkingBlock(d),
        "call": lambda i, a: ToolCall(i, "tool", dict(a)),
    }
    return [made[kind](*rest) for kind, *rest in items]


def as_reference(groups: list[Any]) -> list[Any]:
    def one(group: Any) -> Any:
        if type(group) is str:
            return ("text", group)
        if type(group) is ThinkingBlock:
            return ("think", group.thinking, group.signature)
        if type(group) is RedactedThinkingBlock:
            return ("red", group.data)
        return ("call", group[0], group[2])

    return [one(group) for group in groups]


@settings(max_examples=1000, suppress_health_check=list(HealthCheck))
@given(sequences)
def test_both_sides_merge_as_the_reference_does(items):
    check = StepCheck("request-001")
    for chunk in chunks(items):
        check.add_chunk(chunk)
    _, _, response_groups = _response_blocks(tuple(blocks(items)))
    assert as_reference(check.close()) == reference(items)
    assert as_reference(response_groups) == reference(items)


def numbered(items: list[Any]) -> list[Any]:
    """Call ids made unique, as ``finish`` requires."""
    out, n = [], 0
    for it in items:
        if it[0] == "call":
            n += 1
            it = ("call", f"c{n}", it[2])
        out.append(it)
    return out


@settings(max_examples=1000, suppress_health_check=list(HealthCheck))
@given(sequences, sequences)
def test_finish_accepts_exactly_when_the_merged_sides_agree(streamed, answered):
    streamed, answered = numbered(streamed), numbered(answered)
    check = StepCheck("request-001")
    for chunk in chunks(streamed):
        check.add_chunk(chunk)
    calls = any(kind == "call" for kind, *_ in answered)
    response = ModelResponse(
        id="x",
        request_id="request-001",
        content=tuple(blocks(answered)),
        stop_reason="tool_call" if calls else "stop",
    )
    try:
        message = check.finish(response, set(), set())
    except ModelProtocolError as exc:
        assert "differs from the streamed chunks" in str(exc)
        assert reference(streamed) != reference(answered)
    else:
        assert reference(streamed) == reference(answered)
        assert list(message.content) == blocks(answered)
