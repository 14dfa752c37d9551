"""Every step check, on both sides of every limit: a failure is MODEL_PROTOCOL_ERROR,
no tool runs and no assistant message is appended (DESIGN 4, 7); and a
``model.chunk`` event carries the checked copy."""

from __future__ import annotations

import math
from typing import Any

import pytest
from helpers import assert_stream_shape, call, settle, start, user

from trio_agent import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    MAX_ARGUMENT_ENTRIES,
    MAX_ASSISTANT_BLOCKS,
    MAX_STEP_CHUNKS,
    MAX_STEP_TEXT,
    AssistantMessage,
    ModelChunk,
    ModelResponse,
    TextBlock,
    TextDelta,
    Tool,
    ToolCall,
    ToolRegistry,
    ToolResultMessage,
    UserMessage,
    run_agent_loop,
)
from trio_agent.testing import scripted_response

RAN: list[dict[str, Any]] = []


async def _spy(arguments: dict[str, Any]) -> str:
    RAN.append(arguments)
    return "ran"


SPY = Tool(name="spy", description="records its calls", parameters={}, execute=_spy)


@pytest.fixture(autouse=True)
def _reset_spy():
    RAN.clear()


async def outcome(entry, *, messages=None, then=None):
    script = [entry, scripted_response("after", "next step")] if then is None else [entry, *then]
    initial = [user()] if messages is None else messages
    run, model = start(script, messages=initial, tools=ToolRegistry([SPY]))
    events, result = await settle(run)
    assert_stream_shape(events, result)
    return events, result, model, tuple(initial)


async def assert_protocol_error(entry, match: str, *, messages=None):
    events, result, model, initial = await outcome(entry, messages=messages)
    assert result.status == "failed", result
    assert result.code == "MODEL_PROTOCOL_ERROR"
    assert match in result.detail, result.detail
    assert RAN == [], "a tool ran before the step was checked"
    assert result.messages == initial, "an assistant message was appended"
    assert model.call_count == 1
    assert not any(e.type.startswith("tool.") for e in events)
    return events, result


async def assert_accepted(entry, *, messages=None):
    events, result, model, initial = await outcome(entry, messages=messages)
    assert result.status == "completed", result
    assert len(result.messages) > len(initial)
    return events, result


def nested(depth: int) -> dict[str, Any]:
    """Arguments with ``depth`` nested containers, the root object included."""
    value: Any = {}
    for level in range(depth - 2):
        value = {"d": value} if level % 2 else [value]
    return {"root": value} if depth > 1 else {}


def spy_call(arguments: Any, id: str = "c1"):
    return scripted_response("r1", [ToolCall(id, "spy", arguments)])


async def test_1024_chunks_are_accepted():
    text = "é" * MAX_STEP_CHUNKS
    events, _ = await assert_accepted(scripted_response("r1", text, text_chunks=MAX_STEP_CHUNKS))
    assert sum(isinstance(e, ModelChunk) for e in events) == MAX_STEP_CHUNKS


async def test_1025_chunks_fail_and_the_1025th_is_not_emitted():
    text = "é" * (MAX_STEP_CHUNKS + 1)
    events, _ = await assert_protocol_error(
        scripted_response("r1", text, text_chunks=MAX_STEP_CHUNKS + 1), "more than 1024 chunks"
    )
    assert sum(isinstance(e, ModelChunk) for e in events) == MAX_STEP_CHUNKS


async def test_65536_code_points_of_non_ascii_text_are_accepted():
    text = "😀é" * (MAX_STEP_TEXT // 2)
    assert len(text) == MAX_STEP_TEXT
    await assert_accepted(scripted_response("r1", text, text_chunks=64))


async def test_65537_code_points_in_the_stream_fail():
    text = "😀é" * (MAX_STEP_TEXT // 2) + "x"
    events, _ = await assert_protocol_error(
        scripted_response("r1", text, text_chunks=2), "more than 65536 characters"
    )
    # the first half fit and was emitted; the second did not
    assert sum(isinstance(e, ModelChunk) for e in events) == 1


async def test_65537_code_points_in_the_final_message_fail():
    text = "😀" * (MAX_STEP_TEXT + 1)
    entry = scripted_response("r1", text, chunks=[TextDelta("😀" * MAX_STEP_TEXT)])
    await assert_protocol_error(entry, "more than 65536")


async def test_1024_response_blocks_are_accepted():
    blocks = [TextBlock("a")] * MAX_ASSISTANT_BLOCKS
    _, result = await assert_accepted(
        scripted_response("r1", blocks, chunks=[TextDelta("a" * MAX_ASSISTANT_BLOCKS)])
    )
    assert len(result.messages[-1].content) == MAX_ASSISTANT_BLOCKS  # kept as given


async def test_1025_response_blocks_fail_even_if_they_merge_into_one():
    blocks = [TextBlock("a")] * (MAX_ASSISTANT_BLOCKS + 1)
    await assert_protocol_error(
        scripted_response("r1", blocks, chunks=[TextDelta("a" * (MAX_ASSISTANT_BLOCKS + 1))]),
        "more than 1024",
    )


def test_nested_builds_the_depth_it_names():
    def depth(value: Any) -> int:
        if isinstance(value, dict):
            return 1 + max(map(depth, value.values()), default=0)
        if isinstance(value, list):
            return 1 + max(map(depth, value), default=0)
        return 0

    assert [depth(nested(n)) for n in (1, 2, 32, 33)] == [1, 2, 32, 33]


async def test_argument_depth_32_is_accepted():
    await assert_accepted(spy_call(nested(MAX_ARGUMENT_DEPTH)))
    assert len(RAN) == 1


async def test_argument_depth_33_fails():
    await assert_protocol_error(spy_call(nested(MAX_ARGUMENT_DEPTH + 1)), "nesting deeper than 32")


async def test_256_entries_are_accepted():
    await assert_accepted(spy_call({"items": [0] * (MAX_ARGUMENT_ENTRIES - 1)}))


async def test_257_entries_fail():
    await assert_protocol_error(spy_call({"items": [0] * MAX_ARGUMENT_ENTRIES}), "more than 256")


async def test_257_entries_spread_over_levels_fail():
    arguments = {f"k{i}": {"a": 1, "b": [2]} for i in range(64)}  # 64 + 64*2 + 64*1 = 256
    await assert_accepted(spy_call(arguments))
    arguments["extra"] = None
    RAN.clear()
    await assert_protocol_error(spy_call(arguments), "more than 256")


async def test_4096_characters_of_non_ascii_keys_and_strings_are_accepted():
    await assert_accepted(spy_call({"ключ": "я" * (MAX_ARGUMENT_CHARS - 4)}))


async def test_4097_characters_fail():
    await assert_protocol_error(
        spy_call({"ключ": "я" * (MAX_ARGUMENT_CHARS - 3)}), "more than 4096 characters"
    )


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"x": math.nan}, "not finite"),
        ({"x": math.inf}, "not finite"),
        ({"x": [-math.inf]}, "not finite"),
        ({"x": b"bytes"}, "bytes is not plain JSON"),
        ({1: "int key"}, "key 1 is not a string"),
        ({"x": ("a", "tuple")}, "tuple is not plain JSON"),
        ({"x": object()}, "object is not plain JSON"),
        ({"x": {1, 2}}, "set is not plain JSON"),
        ({"x": "lone \ud800"}, "not valid Unicode"),
        (["not", "an", "object"], "must be a JSON object"),
        (None, "must be a JSON object"),
    ],
)
async def test_non_json_argument_values_fail(arguments, match):
    await assert_protocol_error(spy_call(arguments), match)


async def test_argument_errors_name_the_json_path():
    _, result = await assert_protocol_error(
        spy_call({"items": [{"ok": 1}, {"bad": math.nan}]}), "at `$.items[1].bad`"
    )


async def test_request_id_mismatch_fails():
    await assert_protocol_error(
        scripted_response("r1", "hi", request_id="request-999"), "'request-999'"
    )


async def test_different_splitting_of_the_same_text_is_accepted():
    entry = scripted_response(
        "r1",
        [TextBlock("Hello, "), TextBlock("world")],
        chunks=[TextDelta("He"), TextDelta(""), TextDelta("llo, wor"), TextDelta("ld")],
    )
    events, result = await assert_accepted(entry)
    assert [e.chunk.text for e in events if isinstance(e, ModelChunk)][:4] == [
        "He",
        "",
        "llo, wor",
        "ld",
    ]


@pytest.mark.parametrize(
    ("content", "chunks"),
    [
        ([TextBlock("abc")], [TextDelta("ab")]),
        ([TextBlock("ab")], [TextDelta("abc")]),
        ([TextBlock("a"), call("spy", "c1")], [call("spy", "c1"), TextDelta("a")]),
        ([call("spy", "c1", {"n": 1})], [call("spy", "c1", {"n": 1.0})]),
        ([call("spy", "c1", {"n": 1})], [call("spy", "c1", {"n": True})]),
        ([call("spy", "c1", {"n": {"d": [[1]]}})], [call("spy", "c1", {"n": {"d": [[1.0]]}})]),
        ([call("spy", "c1", {"n": 1})], [call("spy", "c2", {"n": 1})]),
        ([call("spy", "c1", {"n": 1})], [call("other", "c1", {"n": 1})]),
        ([call("spy", "c1", {"n": 1})], []),
        (
            [TextBlock("a"), call("spy", "c1"), TextBlock("b")],
            [TextDelta("ab"), call("spy", "c1")],
        ),
    ],
)
async def test_stream_and_response_that_differ_after_merging_fail(content, chunks):
    await assert_protocol_error(scripted_response("r1", content, chunks=chunks), "differs")


class _Sneaky(str):
    """A str subclass: equal to its text, but not plain JSON."""


@pytest.mark.parametrize(
    "bad",
    [
        call("spy", "c1", {"n": (1,)}),
        call("spy", "c1", {"n": {1}}),
        call("spy", "c1", {_Sneaky("n"): 1}),
        ToolCall(_Sneaky("c1"), "spy", {"n": 1}),
        ToolCall("c1", _Sneaky("spy"), {"n": 1}),
    ],
)
async def test_a_response_call_is_checked_itself_not_only_compared(bad):
    # The response's calls are checked and copied on their own: a value equal to
    # the streamed one but not plain JSON (a str subclass included) is refused.
    entry = scripted_response("r1", [bad], chunks=[call("spy", "c1", {"n": 1})])
    await assert_protocol_error(entry, "response tool call")


async def test_stop_with_tool_calls_fails():
    await assert_protocol_error(scripted_response("r1", [call("spy", "c1")], "stop"), "'stop'")
    RAN.clear()
    await assert_protocol_error(scripted_response("r1", [call("spy", "c1")], "length"), "'length'")


async def test_tool_call_stop_without_calls_fails():
    await assert_protocol_error(scripted_response("r1", "just text", "tool_call"), "no tool call")


async def test_unknown_stop_reason_fails():
    await assert_protocol_error(scripted_response("r1", "x", "end_turn"), "unknown stop reason")


async def test_call_id_used_twice_in_one_response_fails():
    await assert_protocol_error(
        scripted_response("r1", [call("spy", "same"), call("spy", "same")]),
        "'same' is already used",
    )


async def test_call_id_used_in_the_initial_transcript_fails():
    history = [
        user(),
        AssistantMessage("a1", (call("spy", "old"),)),
        ToolResultMessage("t1", "old", "spy", "done"),
        UserMessage("u2", "again"),
    ]
    await assert_protocol_error(
        scripted_response("r1", [call("spy", "old")]), "'old' is already used", messages=history
    )


async def test_call_id_used_in_an_earlier_step_fails():
    events, result, model, _ = await outcome(
        scripted_response("r1", [call("spy", "c1")]),
        then=[scripted_response("r2", [call("spy", "c1")]), scripted_response("r3", "x")],
    )
    assert result.status == "failed" and result.code == "MODEL_PROTOCOL_ERROR"
    assert "'c1' is already used" in result.detail
    assert len(RAN) == 1  # only the first step's call ran
    assert [m.id for m in result.messages] == ["user-001", "message-r1", "tool-result-c1"]
    assert result.steps == 2 and model.call_count == 2


async def test_message_id_already_used_fails():
    history = [UserMessage("message-r1", "my id collides")]
    await assert_protocol_error(
        scripted_response("r1", "hi"), "'message-r1' is already used", messages=history
    )


async def test_result_id_already_used_fails():
    history = [UserMessage("tool-result-c1", "my id collides")]
    await assert_protocol_error(
        scripted_response("r1", [call("spy", "c1")]),
        "'tool-result-c1' is already used",
        messages=history,
    )


async def test_response_id_reused_by_a_later_step_fails():
    _, result, _, _ = await outcome(
        scripted_response("r1", [call("spy", "c1")]),
        then=[scripted_response("r1", "again")],
    )
    assert result.code == "MODEL_PROTOCOL_ERROR" and "'message-r1' is already used" in result.detail


@pytest.mark.parametrize(
    "chunk", [{"type": "text_delta", "text": "hi"}, TextBlock("hi"), "hi", None, 42, TextDelta(5)]
)
async def test_a_chunk_that_is_not_a_chunk_fails_and_is_not_emitted(chunk):
    events, _ = await assert_protocol_error(
        scripted_response("r1", "hi", chunks=[TextDelta("h"), chunk]), "request-001: "
    )
    assert [e.chunk for e in events if isinstance(e, ModelChunk)] == [TextDelta("h")]


async def test_invalid_unicode_in_a_delta_fails():
    await assert_protocol_error(
        scripted_response("r1", "a\udc80", chunks=[TextDelta("a\udc80")]), "not valid Unicode"
    )


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (spy_call({}, id="c\udc80"), "tool call id is not valid Unicode"),
        (scripted_response("r1", [ToolCall("c1", "sp\udc80y", {})]), "name is not valid Unicode"),
        (spy_call({"k\udc80": 1}), "not valid Unicode"),
        (scripted_response("r\udc80", "hi"), "response id is not valid Unicode"),
    ],
)
async def test_every_string_of_a_step_must_be_valid_unicode(entry, match):
    """DESIGN 7: all strings of a step are valid Unicode, not only the text deltas;
    the first bad chunk is not emitted."""
    events, _ = await assert_protocol_error(entry, match)
    assert not any(e.type == "model.chunk" and isinstance(e.chunk, ToolCall) for e in events)


@pytest.mark.parametrize(
    "response",
    [
        None,
        {"id": "r1"},
        ModelResponse(id=1, request_id="request-001", content=(), stop_reason="stop"),
        ModelResponse(id="r1", request_id="request-001", content="text", stop_reason="stop"),
        ModelResponse(
            id="r1", request_id="request-001", content=(TextDelta("x"),), stop_reason="stop"
        ),
        ModelResponse(
            id="r1", request_id="request-001", content=(), stop_reason="stop", usage={"a": 1}
        ),
    ],
)
async def test_malformed_responses_fail(response):
    await assert_protocol_error(scripted_response("r1", "", response=response, chunks=[]), "")


async def test_empty_deltas_are_valid_and_emitted():
    entry = scripted_response("r1", "", chunks=[TextDelta(""), TextDelta("")])
    events, result = await assert_accepted(entry)
    assert [e.chunk for e in events if isinstance(e, ModelChunk)][:2] == [TextDelta("")] * 2
    assert result.messages[1] == AssistantMessage("message-r1", (TextBlock(""),))


async def test_model_chunk_carries_the_checked_copy_not_the_models_object():
    """A ``model.chunk`` event carried the model's own object, which the model could still change;
    it carries the checked copy."""
    streamed = {"left": 1, "right": 2}  # the chunk's dict, which the model changes later
    entry = scripted_response(
        "r1",
        [call("add", "c1", {"left": 1, "right": 2})],
        chunks=[call("add", "c1", streamed)],
    )
    run, _ = start([entry], max_steps=1)
    events = []
    async with run:
        async for event in run:
            if isinstance(event, ModelChunk):
                streamed["left"] = float("nan")
            events.append(event)
    chunk = next(e.chunk for e in events if isinstance(e, ModelChunk))
    assert chunk.arguments == {"left": 1, "right": 2}
    assert chunk == run.result.messages[1].content[0]
    assert_stream_shape(events, run.result)


class _OneObjectModel:
    """Streams ``call`` and answers with that very object, after ``change`` (what a
    model might do to its own call between the two)."""

    def __init__(self, call: ToolCall, change=lambda arguments: None) -> None:
        self.call, self.change = call, change

    def stream(self, request):
        model = self

        class _Stream:
            async def __aenter__(self):
                return self

            async def __aexit__(self, *exc):
                return None

            def __aiter__(self):
                return self._chunks()

            async def _chunks(self):
                yield model.call

            async def response(self):
                model.change(model.call.arguments)
                return ModelResponse("r1", request.id, (model.call,), "tool_call")

        return _Stream()


async def _silently(model, tools=None):
    """The run's result, read without its events: its emitter is silent."""
    run = run_agent_loop(
        messages=[user()],
        model=model,
        tools=ToolRegistry([SPY]) if tools is None else tools,
        max_steps=1,
    )
    return await run.wait()


async def test_a_silent_step_keeps_its_own_copy_of_a_call_streamed_and_answered_as_one_object():
    # No one is handed the streamed copy, so the message takes it: still a copy
    # of the model's object, never the object itself.
    original = ToolCall("c1", "spy", {"n": [1, 2]})
    result = await _silently(_OneObjectModel(original))
    kept = result.messages[1].content[0]
    assert kept == original and kept is not original
    assert kept.arguments is not original.arguments
    assert kept.arguments["n"] is not original.arguments["n"]
    original.arguments["n"].append(3)  # the model's object, changed after the step
    assert result.messages[1].content[0].arguments == {"n": [1, 2]}
    assert RAN == [{"n": [1, 2]}]


@pytest.mark.parametrize("silent", [True, False])
async def test_a_call_the_model_changed_after_streaming_it_is_refused(silent):
    # The same object in the stream and the response, its arguments changed in
    # place in between: the response differs from what was streamed.
    def change(arguments):
        arguments["n"] = 2

    model = _OneObjectModel(ToolCall("c1", "spy", {"n": 1}), change)
    if silent:
        result = await _silently(model)
    else:
        run = run_agent_loop(messages=[user()], model=model, tools=ToolRegistry([SPY]), max_steps=1)
        events, result = await settle(run)
        assert_stream_shape(events, result)
    assert result.code == "MODEL_PROTOCOL_ERROR"
    assert "differs from the streamed chunks" in result.detail
    assert RAN == []


async def test_a_call_changed_to_equal_json_that_is_not_plain_json_is_refused_when_streamed():
    # The streamed copy went out in a model.chunk event: the response's call is
    # checked on its own, and a tuple (JSON-equal to the list it replaced) is
    # refused, as when the response is another object.
    def change(arguments):
        arguments["n"] = (1,)

    model = _OneObjectModel(ToolCall("c1", "spy", {"n": [1]}), change)
    run = run_agent_loop(messages=[user()], model=model, tools=ToolRegistry([SPY]), max_steps=1)
    events, result = await settle(run)
    assert result.code == "MODEL_PROTOCOL_ERROR"
    assert "response tool call" in result.detail and "bad arguments" in result.detail
    assert RAN == []


async def test_a_silent_call_changed_to_equal_json_keeps_the_plain_copy_it_streamed():
    # Silent, the call is compared by its canonical JSON and the checked copy made
    # when it streamed is kept: the change is not refused, and nothing that is not
    # plain JSON reaches the transcript or the tool.
    def change(arguments):
        arguments["n"] = (1,)

    model = _OneObjectModel(ToolCall("c1", "spy", {"n": [1]}), change)
    result = await _silently(model)
    kept = result.messages[1].content[0]
    assert kept.arguments == {"n": [1]} and type(kept.arguments["n"]) is list
    assert RAN == [{"n": [1]}] and type(RAN[0]["n"]) is list
