"""ScriptedModel and scripted_response, the offline model the tests and demo use."""

from __future__ import annotations

import pytest
import trio

from trio_agent import ModelRequest, ModelResponse, TextBlock, TextDelta, ToolCall, Usage
from trio_agent.testing import ScriptedModel, ScriptExhaustedError, scripted_response


def request(n: int = 1) -> ModelRequest:
    return ModelRequest(id=f"request-{n:03d}", messages=(), tools=())


async def read(model: ScriptedModel, req: ModelRequest):
    async with model.stream(req) as stream:
        chunks = [chunk async for chunk in stream]
        return chunks, await stream.response()


def test_stop_reason_is_inferred_and_the_course_spelling_is_accepted():
    the_call = ToolCall("c1", "add", {})
    assert scripted_response("r", "text").stop_reason == "stop"
    assert scripted_response("r", [the_call]).stop_reason == "tool_call"
    assert scripted_response("r", [the_call], "toolCall").stop_reason == "tool_call"
    assert scripted_response("r", "t", "length").stop_reason == "length"
    assert scripted_response("r", "text").content == (TextBlock("text"),)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_text_chunks_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="text_chunks"):
        scripted_response("r", "text", text_chunks=bad)


async def test_records_requests_and_streams_content_split_into_chunks():
    the_call = ToolCall("c1", "add", {"left": 1})
    usage = Usage(input_tokens=3)
    model = ScriptedModel(
        [scripted_response("r1", [TextBlock("abcdef"), the_call], text_chunks=3, usage=usage)]
    )
    chunks, response = await read(model, request(7))
    assert chunks == [TextDelta("ab"), TextDelta("cd"), TextDelta("ef"), the_call]
    assert response == ModelResponse(
        id="r1",
        request_id="request-007",
        content=(TextBlock("abcdef"), the_call),
        stop_reason="tool_call",
        usage=usage,
    )
    assert model.call_count == 1 and model.requests == [request(7)]


async def test_more_text_chunks_than_characters_gives_one_per_character():
    model = ScriptedModel([scripted_response("r1", "ab", text_chunks=5)])
    chunks, _ = await read(model, request())
    assert chunks == [TextDelta("a"), TextDelta("b")]


async def test_exhausted_script_raises_a_named_error():
    model = ScriptedModel([])
    with pytest.raises(ScriptExhaustedError, match="script has only 0 responses"):
        model.stream(request())
    assert model.call_count == 1


async def test_an_exception_entry_is_raised_when_the_stream_opens():
    model = ScriptedModel([ConnectionResetError("reset")])
    with pytest.raises(ConnectionResetError):
        model.stream(request())


async def test_raise_at_and_hang_at():
    model = ScriptedModel(
        [
            scripted_response("r1", "abcd", text_chunks=4, raise_at=2, error=OSError("x")),
            scripted_response("r2", "abcd", text_chunks=4, hang_at=4),
        ]
    )
    seen = []
    with pytest.raises(OSError, match="x"):
        async with model.stream(request(1)) as stream:
            async for chunk in stream:
                seen.append(chunk)
    assert seen == [TextDelta("a"), TextDelta("b")]
    with trio.move_on_after(0.05) as scope:
        await read(model, request(2))
    assert scope.cancelled_caught


async def test_overrides_for_protocol_faults():
    model = ScriptedModel(
        [
            scripted_response("r1", "hi", chunks=["junk"], request_id="other", response=None),
            scripted_response("r2", "hi", request_id="other"),
        ]
    )
    chunks, response = await read(model, request(1))
    assert chunks == ["junk"] and response is None
    _, response = await read(model, request(2))
    assert response.request_id == "other"


async def task_steps(model: ScriptedModel) -> int:
    """How many steps the task reading one stream of ``model`` takes."""

    class Count(trio.abc.Instrument):
        steps = 0

        def after_task_step(self, task):
            if task.name == "reader":
                Count.steps += 1

    instrument = Count()
    trio.lowlevel.add_instrument(instrument)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, model, request(), name="reader")
    finally:
        trio.lowlevel.remove_instrument(instrument)
    return Count.steps


async def test_every_stream_step_is_a_checkpoint():
    """Opening, each chunk and response() are checkpoints, so cancellation can land there."""
    model = ScriptedModel([scripted_response("r1", "abc", text_chunks=3)])
    # open, 3 chunks, end of stream, response(), and the task's final step
    assert await task_steps(model) == 7


async def test_without_chunk_checkpoints_only_opening_is_one():
    script = [scripted_response("r1", "abc", text_chunks=3)]
    model = ScriptedModel(script, chunk_checkpoints=False)
    assert await task_steps(model) == 2  # open, and the task's final step
    chunks, response = await read(ScriptedModel(script, chunk_checkpoints=False), request())
    assert chunks == [TextDelta("a"), TextDelta("b"), TextDelta("c")]
    assert response.content == (TextBlock("abc"),)


async def test_faults_still_happen_without_chunk_checkpoints():
    model = ScriptedModel(
        [scripted_response("r1", "abcd", text_chunks=4, hang_at=2)], chunk_checkpoints=False
    )
    with trio.move_on_after(0.05) as scope:
        await read(model, request())
    assert scope.cancelled_caught
    at_response = ScriptedModel(
        [scripted_response("r1", "ab", text_chunks=2, raise_at=2, error=OSError("late"))],
        chunk_checkpoints=False,
    )
    with pytest.raises(OSError, match="late"):
        await read(at_response, request())
    with pytest.raises(TypeError, match="chunk_checkpoints"):
        ScriptedModel([], chunk_checkpoints=1)


async def test_without_a_request_log_it_still_counts_and_answers_in_order():
    script = (scripted_response("r1", "one"), scripted_response("r2", "two"))
    model = ScriptedModel(script, record_requests=False)
    first = await read(model, request(1))
    second = await read(model, request(2))
    assert [first[1].content, second[1].content] == [(TextBlock("one"),), (TextBlock("two"),)]
    assert model.call_count == 2 and model.requests == []
    with pytest.raises(ScriptExhaustedError):
        model.stream(request(3))
    assert model.call_count == 3


async def test_models_sharing_one_script_keep_their_own_position():
    script = [scripted_response("r1", "one"), scripted_response("r2", "two")]
    a, b = ScriptedModel(script), ScriptedModel(script)
    script.append(scripted_response("r3", "late"))  # the model took a snapshot
    await read(a, request(1))
    _, response = await read(b, request(1))
    assert response.content == (TextBlock("one"),)
    await read(a, request(2))
    with pytest.raises(ScriptExhaustedError, match="only 2 responses"):
        a.stream(request(3))


@pytest.mark.parametrize("bad", [0, 1, "no", None])
def test_record_requests_must_be_a_bool(bad):
    with pytest.raises(TypeError, match="record_requests"):
        ScriptedModel([], record_requests=bad)


async def test_regression_a_shared_fault_does_not_grow_its_traceback_per_replay():
    # One exception instance is raised by every model sharing the script: it must
    # not carry the tracebacks of the earlier raises (a leak that grew each time).
    error = OSError("flaky")
    script = (
        scripted_response("r1", "abcd", text_chunks=2, raise_at=1, error=error),
        error,
    )
    depths = []
    for _ in range(5):
        for position in (0, 1):
            model = ScriptedModel(script[position:] + script[:position])
            with pytest.raises(OSError) as caught:
                await read(model, request())
            tb, depth = caught.value.__traceback__, 0
            while tb is not None:
                tb, depth = tb.tb_next, depth + 1
            depths.append(depth)
    assert len(set(depths[0::2])) == 1 and len(set(depths[1::2])) == 1


async def test_regression_a_recorded_failure_keeps_its_own_traceback_on_replay():
    # A recorded real failure keeps the frames it was raised from, every replay.
    def fail():
        raise OSError("recorded")

    try:
        fail()
    except OSError as exc:
        recorded = exc
    frames = []
    for _ in range(3):
        with pytest.raises(OSError) as caught:
            await read(ScriptedModel([recorded]), request())
        tb, names = caught.value.__traceback__, []
        while tb is not None:
            names.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        frames.append(names)
    assert "fail" in frames[0] and frames[0] == frames[1] == frames[2]


async def test_a_long_scripted_session_keeps_every_request_without_copying_the_transcript():
    """Issue 38: every request kept its own copy of the whole transcript, so a
    20,000-turn scripted session peaked at 3.2 GB. The requests now share the
    session's transcript: 600 turns keep 1,200 requests in what a few copies of
    the transcript would take (measured by tracemalloc, not a clock)."""
    import tracemalloc

    from trio_agent import Agent

    turns = 600
    script = [scripted_response(f"r{i}", f"answer {i}") for i in range(turns)]
    model = ScriptedModel(script)
    agent = Agent(model=model)
    tracemalloc.start()
    try:
        for i in range(turns):
            await agent.prompt(f"question {i}")
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(model.requests) == turns
    assert model.requests[-1].messages[-1].content == f"question {turns - 1}"
    assert len(model.requests[0].messages) == 1  # each request as it was sent
    # copies would hold 1 + 3 + ... + (2 * turns - 1) = turns**2 message references
    # (8 bytes each: 2.9 MB here); shared views hold a few per request
    assert kept < turns * turns * 8 / 2, kept


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"hang_at": 3}, ValueError),  # "abc" in 2 chunks: 0..2 only
        ({"raise_at": -1}, ValueError),
        ({"hang_at": "0"}, ValueError),
        ({"raise_at": True}, ValueError),
        ({"raise_at": 0, "error": "boom"}, TypeError),
    ],
)
def test_a_fault_that_could_never_happen_is_refused_when_scripted(options, error):
    """``hang_at``/``raise_at`` past the stream, negative or not an int never fired:
    the test that scripted the fault passed without testing it. An ``error`` that
    is no exception failed the run later with an ``AttributeError`` of ours."""
    with pytest.raises(error, match=r"hang_at|raise_at|error must be"):
        scripted_response("r1", "abc", text_chunks=2, **options)


def test_faults_at_each_end_of_the_stream_are_taken():
    assert scripted_response("r1", "abc", text_chunks=2, hang_at=2).hang_at == 2
    assert scripted_response("r1", [], raise_at=0).raise_at == 0
    chunks = [TextDelta("a")] * 3
    assert scripted_response("r1", "ignored", chunks=chunks, raise_at=3).raise_at == 3


@pytest.mark.parametrize("script", ["hello", [{"id": "r1"}], [scripted_response("r1", "a"), 5]])
def test_a_script_entry_that_is_no_response_is_refused_when_the_model_is_made(script):
    """A script entry that is neither a ``ScriptedResponse`` nor an exception (a str,
    which is a sequence of them, a dict) failed each run that reached it with an
    ``AttributeError`` of ours, reported as the model's error."""
    with pytest.raises(TypeError, match="ScriptedResponse"):
        ScriptedModel(script)


@pytest.mark.parametrize(
    "script", [scripted_response("r1", "a"), RuntimeError("down"), {"r1": "a"}, 5, b"ab"]
)
def test_a_single_response_not_in_a_list_is_refused_saying_so(script):
    """``ScriptedModel(scripted_response(...))``, the common slip, was refused with
    "'ScriptedResponse' object is not iterable" (an exception entry: the same; a
    dict: its first key named as a bad response)."""
    with pytest.raises(TypeError, match=r"takes a list of responses.*put a single one in a list"):
        ScriptedModel(script)


@pytest.mark.parametrize(
    ("content", "where"),
    [
        (["Hello", "world"], r"content\[0\] .*wrap text in TextBlock.*'Hello'"),
        ([TextBlock("a"), {"name": "f"}], r"content\[1\] must be a TextBlock, ToolCall"),
        ({"text": "a"}, "content must be text or a sequence of blocks"),
        (5, "content must be text or a sequence of blocks"),
    ],
)
def test_content_that_is_no_blocks_is_refused_when_scripted(content, where):
    """Content given as a list of strings, or a dict, was taken, and every run that
    reached it failed ``MODEL_PROTOCOL_ERROR`` ("the stream yielded a str"),
    blaming the model for a slip in the script; an int raised "'int' object is
    not iterable"."""
    with pytest.raises(TypeError, match=where):
        scripted_response("r1", content)
