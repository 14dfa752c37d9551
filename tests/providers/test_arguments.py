"""Tool arguments an adapter cannot take (issue 16): over ``max_argument_bytes``,
not JSON, not an object, or past a contract limit. Each becomes an error result
the model reads (the tool is not run) instead of a failed run, over the real
adapters against the loopback server. Regression tests are named after the bug
they pin."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loopback import Reply
from wire_builders import AnthropicWire, ResponsesWire, wires
from wire_builders import ChatWire as OpenAIWire

import trio_agent
from trio_agent import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    MAX_ARGUMENT_ENTRIES,
    REJECTED_ARGUMENTS,
    Agent,
    ArgumentsError,
    AssistantMessage,
    Completed,
    JsonlStore,
    ModelRequest,
    ToolCall,
    ToolFinished,
    ToolRegistry,
    ToolResultMessage,
    UserMessage,
    block,
    check_arguments,
    execute_tool_call,
    run_agent_loop,
    tool,
)
from trio_agent.providers import _arguments
from trio_agent.providers._arguments import MAX_ARGUMENT_BYTES, MAX_REASON_CHARS, take_arguments
from trio_agent.testing import ScriptedModel, scripted_response
from trio_agent.testing.strategies import arguments as plain_arguments
from trio_agent.testing.strategies import arguments_at_limits, arguments_outside_limits

REASON = "the arguments were 70,000 bytes"


# The three wires (OpenAI chat completions, Anthropic, the Responses API) are the
# shared builders of wire_builders.py.
WIRES = wires(OpenAIWire, AnthropicWire, ResponsesWire)


def note_tool(log: list[str]) -> Any:
    @tool
    async def write_note(path: str, content: str) -> str:
        """Write a note."""
        log.append(path)
        return f"wrote {len(content)} characters to {path}"

    return write_note


def note_arguments(size: int) -> str:
    """The JSON arguments of a ``write_note`` call, ``size`` bytes long."""
    head = '{"path": "notes.md", "content": "'
    return head + "x" * (size - len(head) - 2) + '"}'


async def run(model: Any, log: list[str]) -> Any:
    loop = run_agent_loop(
        messages=[UserMessage("u1", "Write the note.")],
        model=model,
        tools=ToolRegistry([note_tool(log)]),
        max_steps=4,
    )
    async with loop:
        events = [event async for event in loop]
    return loop.result, events


@WIRES
async def test_a_70_kb_tool_call_is_an_error_result_not_a_failed_run(loopback, wire):
    raw = note_arguments(70_000)
    assert len(raw.encode()) == 70_000
    loopback.replies += [
        Reply(body=wire.call("call-1", "write_note", raw), piece=4096),
        Reply(body=wire.text("I will send it in smaller pieces.")),
    ]
    log: list[str] = []
    result, events = await run(wire.model(loopback), log)
    # the run did not fail: the model's second answer ended it
    assert type(result) is Completed, result
    assert result.final_text == "I will send it in smaller pieces." and result.steps == 2
    assert log == []  # the tool was not run
    (finished,) = [e for e in events if type(e) is ToolFinished]
    reason = finished.call.arguments[REJECTED_ARGUMENTS]
    assert reason == (
        "the arguments were 70,000 bytes, more than the 65,536 this model accepts "
        "(max_argument_bytes)"
    )
    assert finished.result.is_error
    assert finished.result.content.startswith(f'Tool "write_note" was not run: {reason}. ')
    assert "smaller pieces" in finished.result.content
    # the transcript holds the call as the model was shown it, then the result
    call, answer = result.messages[1], result.messages[2]
    assert type(call) is AssistantMessage and call.content == (finished.call,)
    assert answer == finished.result
    # the next request carried both back, and said the size and the cap
    arguments, sent, is_error = wire.sent(loopback.requests[1].json())
    assert arguments == {REJECTED_ARGUMENTS: reason} and is_error is not False
    assert "70,000 bytes" in sent and "65,536" in sent and "was not run" in sent


@WIRES
async def test_the_cap_is_an_option_a_lower_one_refuses_what_the_default_takes(loopback, wire):
    raw = note_arguments(2_000)
    loopback.replies += [
        Reply(body=wire.call("call-1", "write_note", raw)),
        Reply(body=wire.text("done")),
        Reply(body=wire.call("call-1", "write_note", raw)),
        Reply(body=wire.text("done")),
    ]
    log: list[str] = []
    result, _ = await run(wire.model(loopback), log)  # the default: 64 KiB
    assert type(result) is Completed and log == ["notes.md"]
    assert not result.messages[2].is_error
    result, _ = await run(wire.model(loopback, max_argument_bytes=1_000), log)
    assert type(result) is Completed and log == ["notes.md"]  # not run again
    assert result.messages[1].content[0].arguments == {
        REJECTED_ARGUMENTS: "the arguments were 2,000 bytes, more than the 1,000 this model "
        "accepts (max_argument_bytes)"
    }
    assert result.messages[2].is_error


@WIRES
async def test_a_raised_cap_lets_70_kb_through_to_the_contract_limits(loopback, wire):
    # 70 KB of arguments are within max_argument_bytes=200_000, but 70 KB of text
    # is past MAX_ARGUMENT_CHARS: the limit refuses it, by its JSON path
    loopback.replies += [
        Reply(body=wire.call("call-1", "write_note", note_arguments(70_000))),
        Reply(body=wire.text("done")),
    ]
    log: list[str] = []
    result, _ = await run(wire.model(loopback, max_argument_bytes=200_000), log)
    assert type(result) is Completed and log == []
    reason = result.messages[1].content[0].arguments[REJECTED_ARGUMENTS]
    assert (
        reason == f"more than {MAX_ARGUMENT_CHARS} characters in keys and strings - at `$.content`"
    )
    _, sent, _ = wire.sent(loopback.requests[1].json())
    assert "$.content" in sent


@WIRES
@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ('{"path": "a.md", "content": "cut', "the arguments are not JSON: "),
        ('{"path": "a.md"} {"x": 1}', "the arguments are not JSON: "),
        ('["a.md", "text"]', "the arguments are JSON but not an object: an array"),
        ('"a.md"', "the arguments are JSON but not an object: a string"),
        ("42", "the arguments are JSON but not an object: a number"),
        ("null", "the arguments are JSON but not an object: true, false or null"),
        ('{"n": 1e400}', "the arguments are not JSON: Number out of range"),
    ],
    ids=["cut", "two-values", "array", "string", "number", "null", "huge-float"],
)
async def test_arguments_that_are_not_a_json_object_are_an_error_result(loopback, wire, raw, why):
    loopback.replies += [
        Reply(body=wire.call("call-1", "write_note", raw)),
        Reply(body=wire.text("done")),
    ]
    log: list[str] = []
    result, _ = await run(wire.model(loopback), log)
    assert type(result) is Completed and log == []
    reason = result.messages[1].content[0].arguments[REJECTED_ARGUMENTS]
    assert reason.startswith(why), reason
    assert result.messages[2].is_error and why in result.messages[2].content


def _deep(levels: int) -> dict[str, Any]:
    value: Any = []
    for _ in range(levels - 2):
        value = [value]
    return {"a": value}  # the root, then levels - 1 lists


LIMITS = [
    (
        _deep(MAX_ARGUMENT_DEPTH + 1),  # the innermost list is one too deep
        f"nesting deeper than {MAX_ARGUMENT_DEPTH} containers",
        "$.a" + "[0]" * (MAX_ARGUMENT_DEPTH - 1),
    ),
    (
        {"path": "a.md", "items": [0] * MAX_ARGUMENT_ENTRIES},
        f"more than {MAX_ARGUMENT_ENTRIES} object fields and array elements",
        "$.items",
    ),
    (
        {f"k{i}": 0 for i in range(MAX_ARGUMENT_ENTRIES + 1)},
        f"more than {MAX_ARGUMENT_ENTRIES} object fields and array elements",
        "$",
    ),
    (
        {"path": "a.md", "content": "é" * MAX_ARGUMENT_CHARS},
        f"more than {MAX_ARGUMENT_CHARS} characters in keys and strings",
        "$.content",
    ),
    ({"n": 2**64}, "integer is outside the 64-bit range", "$.n"),
    ({"list": [{"n": -(2**63) - 1}]}, "integer is outside the 64-bit range", "$.list[0].n"),
]
LIMIT_IDS = ["depth", "entries", "flat-entries", "chars", "big-int", "nested-int"]


@WIRES
@pytest.mark.parametrize(("arguments", "why", "path"), LIMITS, ids=LIMIT_IDS)
async def test_arguments_past_a_contract_limit_are_an_error_result_naming_the_path(
    loopback, wire, arguments, why, path
):
    raw = msgspec.json.encode(arguments).decode()
    loopback.replies += [
        Reply(body=wire.call("call-1", "write_note", raw)),
        Reply(body=wire.text("done")),
    ]
    log: list[str] = []
    result, _ = await run(wire.model(loopback), log)
    assert type(result) is Completed and log == []
    reason = result.messages[1].content[0].arguments[REJECTED_ARGUMENTS]
    assert reason.startswith(why) and reason.endswith(f" - at `{path}`"), reason
    _, sent, _ = wire.sent(loopback.requests[1].json())
    assert why in sent and f"`{path}`" in sent


@WIRES
@pytest.mark.parametrize("bad", [0, -1, "10", True, 1.5, None])
def test_a_bad_max_argument_bytes_is_refused_when_the_model_is_made(wire, bad):
    loopback = type("Nowhere", (), {"url": "http://127.0.0.1:9"})()
    with pytest.raises(ValueError, match="max_argument_bytes must be an int >= 1"):
        wire.model(loopback, max_argument_bytes=bad)
    assert wire.model(loopback, max_argument_bytes=1).max_argument_bytes == 1
    assert wire.model(loopback).max_argument_bytes == MAX_ARGUMENT_BYTES == 65_536


def rejected_call(call_id: str = "call-1", name: str = "write_note") -> ToolCall:
    return ToolCall(call_id, name, {REJECTED_ARGUMENTS: REASON})


async def test_execute_tool_call_answers_a_refused_call_without_running_the_tool():
    log: list[str] = []
    tools = ToolRegistry([note_tool(log)])
    known = await execute_tool_call(tools, rejected_call())
    unknown = await execute_tool_call(tools, rejected_call(name="missing"))
    assert log == []
    assert known.is_error and unknown.is_error
    assert known.content == (
        f'Tool "write_note" was not run: {REASON}. Call it again with arguments that fit: '
        "one JSON object within the limits (a long text can go in smaller pieces, over "
        "several calls)."
    )
    # the same whether or not the tool exists (but for its name)
    assert unknown.content == known.content.replace('"write_note"', '"missing"')
    assert known.id == "tool-result-call-1" and known.tool_call_id == "call-1"


async def test_a_refused_call_with_a_reason_that_is_not_text_is_still_answered():
    # a model (or a script) may send the reserved key itself: never run, reason shown
    for value in ({"why": "no"}, 7, None, "x" * 10_000):
        call = ToolCall("c", "write_note", {REJECTED_ARGUMENTS: value, "path": "a"})
        log: list[str] = []
        result = await execute_tool_call(ToolRegistry([note_tool(log)]), call)
        assert result.is_error and "was not run" in result.content and log == []
        assert len(result.content) < 1_000


def test_the_reserved_key_can_be_no_parameter_name():
    assert REJECTED_ARGUMENTS == "trio_agent.rejected_arguments"
    assert not REJECTED_ARGUMENTS.isidentifier()
    assert trio_agent.tools.REJECTED_ARGUMENTS is REJECTED_ARGUMENTS
    assert _arguments.REJECTED_ARGUMENTS is REJECTED_ARGUMENTS


def session_model() -> ScriptedModel:
    return ScriptedModel(
        [
            scripted_response(
                "r1",
                [
                    rejected_call("call-1"),
                    ToolCall("call-2", "write_note", {"path": "b.md", "content": "hi"}),
                ],
            ),
            scripted_response("r2", "done"),
        ]
    )


@pytest.mark.parametrize("execution", ["sequential", "parallel"])
async def test_a_session_answers_a_refused_call_in_sequence_and_in_parallel(execution):
    log: list[str] = []
    seen: list[ToolCall] = []

    async def before_tool_call(call: ToolCall) -> None:
        seen.append(call)  # the hook sees the call as the model was shown it

    agent = Agent(
        model=session_model(),
        tools=[note_tool(log)],
        tool_execution=execution,
        before_tool_call=before_tool_call,
    )
    result = await agent.prompt("write two notes")
    assert result.end.reason == "completed" and result.final_text == "done"
    assert log == ["b.md"]  # only the good call ran
    assert [c.id for c in seen] == ["call-1", "call-2"]
    first, second = (m for m in agent.messages if type(m) is ToolResultMessage)
    assert first.is_error and "was not run" in first.content and REASON in first.content
    assert not second.is_error


async def test_a_blocking_hook_still_wins_over_the_refusal():
    log: list[str] = []

    async def before_tool_call(call: ToolCall) -> Any:
        return block("not now")

    agent = Agent(model=session_model(), tools=[note_tool(log)], before_tool_call=before_tool_call)
    await agent.prompt("write")
    first = next(m for m in agent.messages if type(m) is ToolResultMessage)
    assert first.is_error and "not now" in first.content and log == []


async def test_a_resumed_session_shows_the_model_the_refused_call(loopback, tmp_path):
    wire = OpenAIWire
    loopback.replies += [
        Reply(body=wire.call("call-1", "write_note", note_arguments(70_000))),
        Reply(body=wire.text("I will split it.")),
        Reply(body=wire.text("Yes.")),
    ]
    log: list[str] = []
    store = JsonlStore(tmp_path)
    agent = Agent(model=wire.model(loopback), tools=[note_tool(log)], store=store, session_id="s")
    result = await agent.prompt("Write the note.")
    assert result.end.reason == "completed" and log == []
    kept = agent.messages
    await agent.aclose()
    again = await Agent.resume(store, "s", model=wire.model(loopback), tools=[note_tool(log)])
    assert again.messages == kept
    await again.prompt("Did it work?")
    await again.aclose()
    arguments, sent, _ = wire.sent(loopback.requests[2].json())
    assert (
        list(arguments) == [REJECTED_ARGUMENTS] and "70,000 bytes" in arguments[REJECTED_ARGUMENTS]
    )
    assert "was not run" in sent


def test_the_cap_is_checked_before_any_decoding():
    # over the cap, nothing is decoded: not even text that is not JSON at all
    refused = take_arguments(b"\xff" * 11, 10)
    assert refused == {
        REJECTED_ARGUMENTS: "the arguments were 11 bytes, more than the 10 this model "
        "accepts (max_argument_bytes)"
    }
    assert take_arguments(b'{"a": 12}', 9) == {"a": 12}  # exactly at the cap


def test_empty_arguments_are_an_empty_object():
    assert take_arguments(b"") == {} and take_arguments(b"  \n") == {}


def test_a_nest_too_deep_to_decode_is_refused_not_raised():
    raw = b'{"a": ' + b"[" * 5_000 + b"]" * 5_000 + b"}"
    (reason,) = take_arguments(raw).values()
    assert reason.startswith("the arguments nest too deeply")


def test_a_reason_is_kept_short():
    # a path through many keys would be long: the reason is cut (a path shows a
    # long key by its head and length, so the keys are of the most it shows whole)
    value: object = [[[]] * 300]
    for depth in range(12):
        value = {f"{depth:02d}" + "k" * 62: value}
    raw = msgspec.json.encode(value)
    (reason,) = take_arguments(raw, 100_000).values()
    assert len(reason) <= MAX_REASON_CHARS < MAX_ARGUMENT_CHARS // 4
    assert "characters cut" in reason


def test_a_path_through_huge_keys_names_each_by_its_head():
    key = "k" * 3_000
    raw = msgspec.json.encode({key: {key[:1_000]: [[[]] * 300]}})
    (reason,) = take_arguments(raw, 100_000).values()
    assert len(reason) <= MAX_REASON_CHARS
    assert "(3000 characters)" in reason and "(1000 characters)" in reason


def walk_counter(monkeypatch) -> list[object]:
    walked: list[object] = []

    def counting(arguments: object) -> dict[str, Any]:
        walked.append(arguments)
        return check_arguments(arguments)

    monkeypatch.setattr(_arguments, "check_arguments", counting)
    return walked


EDITS = {"path": "a.py", "edits": [{"old": "foo(1)", "new": "bar(2)", "n": 10**17}] * 3}


@pytest.mark.parametrize(
    "arguments",
    [
        {"path": "src/app.py", "content": "x = 1\n" * 500, "n": 2**63, "ok": True},
        {"n": -(2**63), "m": 2**64 - 1, "f": 1e308, "s": "[{,}]" * 100},
        EDITS,
        {"options": {"depth": [[[[1]]]], "name": "x"}, "q": "é" * 1_000},
    ],
    ids=["flat", "flat-at-the-int-ends", "nested", "nested-deeper"],
)
def test_the_common_call_is_not_walked_in_the_adapter(monkeypatch, arguments):
    # the step check walks every call; the adapter clears these without a walk
    walked = walk_counter(monkeypatch)
    assert take_arguments(msgspec.json.encode(arguments)) == arguments
    assert walked == []


@pytest.mark.parametrize(
    ("arguments", "fits"),
    [
        ({"path": "a", "content": "x" * (MAX_ARGUMENT_CHARS - 20)}, True),  # more bytes
        ({"path": "a", "content": "x" * MAX_ARGUMENT_CHARS}, False),
        ({"items": [{"a": i} for i in range(MAX_ARGUMENT_DEPTH)]}, True),  # many containers
        ({"items": [0] * 200, "s": "," * 60}, True),  # many commas (in a string too)
        ({"list": [1], "id": "1234567890123456789"}, True),  # 19 digits in a row, in a string
        ({"list": [1], "n": 2**63}, True),  # 19 digits in a row
        ({"list": [1], "n": 2**64}, False),
    ],
    ids=["long", "too-long", "containers", "commas", "digits-in-a-string", "int", "big-int"],
)
def test_what_the_bytes_cannot_clear_is_walked_once_and_taken_if_it_fits(
    monkeypatch, arguments, fits
):
    walked = walk_counter(monkeypatch)
    taken = take_arguments(msgspec.json.encode(arguments))
    assert walked == [arguments]
    assert (taken == arguments) is fits and (list(taken) == [REJECTED_ARGUMENTS]) is not fits


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**65), 2**65)
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.sampled_from("ab,[{é0123456789"), max_size=30)
)
_KEYS = st.text(st.sampled_from("ab[,"), max_size=2)
_NEAR_LIMITS = st.dictionaries(
    _KEYS,
    st.recursive(
        _SCALARS,
        lambda inner: st.lists(inner, max_size=20) | st.dictionaries(_KEYS, inner, max_size=4),
        max_leaves=60,
    ),
    max_size=4,
)


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(plain_arguments(), arguments_at_limits(), arguments_outside_limits(), _NEAR_LIMITS)
)
def test_take_arguments_refuses_exactly_what_check_arguments_refuses(arguments):
    try:
        raw = msgspec.json.encode(arguments)
    except (TypeError, ValueError):
        return  # not JSON at all (bytes, NaN keys ...): nothing a model can send
    try:
        expected: dict[str, Any] | None = check_arguments(msgspec.json.decode(raw))
    except ArgumentsError as exc:
        expected = None
        why = str(exc)
    except (msgspec.DecodeError, ValueError):
        return
    taken = take_arguments(raw, 1 << 20)
    if expected is None:
        assert list(taken) == [REJECTED_ARGUMENTS]
        if type(arguments) is dict:  # (a root that is no object has its own words)
            assert taken[REJECTED_ARGUMENTS] == why
    else:
        assert taken == expected


async def test_a_refused_call_passes_the_step_check_and_keeps_the_run_going():
    # the replaced arguments are plain JSON within the limits: the run goes on
    (reason,) = take_arguments(b"x" * 100_000).values()
    model = ScriptedModel(
        [
            scripted_response("r1", [ToolCall("c1", "write_note", {REJECTED_ARGUMENTS: reason})]),
            scripted_response("r2", "ok"),
        ]
    )
    log: list[str] = []
    result, _ = await run(model, log)
    assert type(result) is Completed and log == []


def test_call_parts_keep_nothing_past_the_cap_and_count_exact_bytes():

    parts = _arguments.CallParts(100, "call_1", "write")
    for _ in range(10_000):
        parts.add('"é' * 10)  # 20 characters, 30 bytes
    assert parts.over and parts.parts == []  # a runaway stream is counted, not held
    assert parts.size == 300_000
    call = parts.call()
    assert call.id == "call_1" and call.name == "write"
    assert call.arguments == {
        REJECTED_ARGUMENTS: "the arguments were 300,000 bytes, more than the 100 this "
        "model accepts (max_argument_bytes)"
    }


def test_call_parts_under_the_cap_in_characters_but_over_it_in_bytes_are_refused():

    parts = _arguments.CallParts(30)
    parts.id, parts.name = "c", "t"
    parts.add('{"k": "' + "é" * 20 + '"}')  # 29 characters, 49 bytes
    assert not parts.over
    assert "49 bytes, more than the 30" in parts.call().arguments[REJECTED_ARGUMENTS]


def test_call_parts_replace_starts_over():

    parts = _arguments.CallParts(10, "c", "t")
    parts.add("x" * 50)
    parts.replace('{"a": 1}')
    assert parts.call().arguments == {"a": 1}


@WIRES
async def test_a_lone_surrogate_escaped_in_a_calls_arguments_is_read_as_u_fffd(wire, loopback):
    """Arguments whose JSON escapes a lone surrogate (``{"a": "x\\ud83d"}``, half an emoji)
    were rejected as "not JSON: Input data was truncated" (msgspec's words): the model was told
    to fix what it cannot see. They read as U+FFFD, as the same escape in an event does, for
    every adapter; a typed answer's arguments too."""
    raw = '{"a": "x\\ud83d", "b": "\\udc00y", "c": "\\ud83d\\ude00"}'
    loopback.replies.append(Reply(body=wire.call("call-1", "f", raw)))
    request = ModelRequest(id="r1", messages=(UserMessage("u1", "hi"),), tools=())
    async with wire.model(loopback) as model, model.stream(request) as stream:
        response = await stream.response()
    (call,) = response.content
    assert call.arguments == {"a": "x\ufffd", "b": "\ufffdy", "c": "\U0001f600"}
    output = _arguments.take_output(raw.encode())
    assert output == {"a": "x\ufffd", "b": "\ufffdy", "c": "\U0001f600"}
