"""Typed final output end to end over the real adapters (issue 18, "Done means";
DESIGN.md section 11.4): ``run_agent_loop`` and ``Agent`` against the loopback
server, which answers a scripted sequence of streamed responses and records every
request body. For OpenAI chat completions, Anthropic and the Responses API, in
tool mode (the ``final_result`` tool) and native mode (the provider's schema
field, a JSON text answer): valid first time, invalid then fixed, invalid past
the retries, text instead of the answer, an answer past 4096 code points, and a
cancellation while the server holds the retry's request."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import trio
from loopback import Reply
from wire_builders import ALL_WIRES, pieces

from trio_agent import (
    MAX_ARGUMENT_CHARS,
    MAX_STEP_TEXT,
    OUTPUT_INVALID,
    OUTPUT_TOOL_NAME,
    REJECTED_ARGUMENTS,
    Agent,
    AssistantMessage,
    Cancelled,
    Completed,
    Failed,
    JsonlStore,
    OutputError,
    TextBlock,
    TextDelta,
    ToolCall,
    ToolRegistry,
    ToolResultMessage,
    UserMessage,
    repair_transcript,
    run_agent_loop,
    tool,
    validate_transcript,
)
from trio_agent.model import OutputFormat
from trio_agent.testing import assert_run_invariants


class Person(msgspec.Struct):
    name: str
    age: int


class Essay(msgspec.Struct):
    title: str
    body: str


ANN = Person("Ann", 3)
GOOD = '{"name": "Ann", "age": 3}'
BAD_AGE = '{"name": "Ann", "age": "three"}'  # Expected `int`, got `str` - at `$.age`
AGE_PATH = "Expected `int`, got `str` - at `$.age`"
PERSON_PROPERTIES = {"name": {"type": "string"}, "age": {"type": "integer"}}
MODES = ("tool", "native")


def _wire_and_mode(modes: tuple[str, ...] = MODES) -> Any:
    combos = [(wire, mode) for wire in ALL_WIRES for mode in modes]
    return pytest.mark.parametrize(
        ("wire", "mode"), combos, ids=[f"{wire.name}-{mode}" for wire, mode in combos]
    )


EVERY_WIRE_AND_MODE = _wire_and_mode()
EVERY_WIRE_IN_TOOL_MODE = _wire_and_mode(("tool",))
EVERY_WIRE_IN_NATIVE_MODE = _wire_and_mode(("native",))


def answer(wire: Any, mode: str, raw: str, call_id: str = "call_1") -> Reply:
    """A streamed response giving ``raw`` (JSON) as the answer: the output tool's
    arguments in tool mode, the text in native mode; streamed in pieces of the
    response body, as HTTP chunks."""
    if mode == "tool":
        body = wire.call(call_id, OUTPUT_TOOL_NAME, raw)
    else:
        body = wire.text(pieces(raw))
    return Reply(body=body, piece=4096, chunked=True)


def told(wire: Any, mode: str, body: dict[str, Any]) -> str:
    """What the model was told last about its answer: the output tool's last result
    (tool mode), or the last user message (native mode)."""
    if mode == "tool":
        return wire.results(body)[-1][0]
    return wire.texts(body, "user")[-1]


def loop(
    wire: Any,
    loopback: Any,
    mode: str,
    *,
    messages: list[Any] | None = None,
    output_type: Any = Person,
    **options: Any,
) -> Any:
    return run_agent_loop(
        messages=[UserMessage("u1", "Who is it?")] if messages is None else messages,
        model=wire.model(loopback),
        tools=ToolRegistry(),
        max_steps=options.pop("max_steps", 8),
        output_type=output_type,
        output_mode=mode,
        **options,
    )


async def record(run: Any) -> tuple[list[Any], Any]:
    with trio.fail_after(60):  # a hang guard
        async with run:
            events = [event async for event in run]
    assert_run_invariants(events, run.result)
    return events, run.result


class Arrivals(list):
    """``loopback.requests`` that wakes a waiter when the n-th request is recorded
    (the server records a request before it answers it)."""

    def __init__(self) -> None:
        super().__init__()
        self._waiting: dict[int, trio.Event] = {}

    def append(self, seen: Any) -> None:
        super().append(seen)
        if (event := self._waiting.get(len(self))) is not None:
            event.set()

    async def arrived(self, count: int) -> None:
        if len(self) < count:
            await self._waiting.setdefault(count, trio.Event()).wait()


@pytest.fixture
def server(loopback: Any) -> Any:
    """The loopback server, its requests an ``Arrivals``."""
    loopback.requests = Arrivals()
    return loopback


@EVERY_WIRE_AND_MODE
async def test_a_valid_answer_first_time_is_the_output(server, wire, mode):
    server.replies.append(answer(wire, mode, GOOD))
    _, result = await record(loop(wire, server, mode))
    assert type(result) is Completed and result.stop_reason == "stop"
    assert result.output == ANN and type(result.output) is Person
    assert result.steps == 1 and len(server.requests) == 1
    validate_transcript(result.messages)
    if mode == "tool":
        # the call gets its result, so the transcript can be continued as it is
        call, accepted = result.messages[1:]
        assert call.content == (ToolCall("call_1", OUTPUT_TOOL_NAME, {"name": "Ann", "age": 3}),)
        assert type(accepted) is ToolResultMessage and accepted.tool_call_id == "call_1"
        assert accepted.content == "final result accepted" and not accepted.is_error
    else:
        (reply,) = result.messages[1:]
        assert type(reply) is AssistantMessage and result.final_text == GOOD


@EVERY_WIRE_AND_MODE
async def test_the_request_asks_for_the_types_schema_in_the_modes_own_way(server, wire, mode):
    server.replies.append(answer(wire, mode, GOOD))
    await record(loop(wire, server, mode))
    body = server.requests[0].json()
    if mode == "native":
        # the provider's own field carries the schema; no tool is offered
        assert not body.get("tools")
        sent = body[wire.field]
        schema = (sent.get("json_schema") or sent["format"])["schema"]
        # Person allows unknown fields, so strict mode (which would answer 400) is off
        assert sent == wire.expected(OutputFormat(OUTPUT_TOOL_NAME, schema, strict=False))
        assert '"strict": true' not in json.dumps(sent)
    else:
        # the output tool's parameters are the schema; no native format goes
        assert wire.field not in body
        (offered,) = body["tools"]
        schema = (
            offered.get("input_schema")  # anthropic
            or offered.get("parameters")  # responses
            or offered["function"]["parameters"]  # chat completions
        )
        assert OUTPUT_TOOL_NAME in json.dumps(offered)
    assert schema["type"] == "object" and schema["properties"] == PERSON_PROPERTIES
    assert schema["required"] == ["name", "age"]


class StrictPerson(msgspec.Struct, forbid_unknown_fields=True):
    """What OpenAI's strict mode takes (README): every property required, no others."""

    name: str
    age: int


def objects_of(schema: Any) -> list[dict[str, Any]]:
    """Every object schema within ``schema`` (``$defs`` too)."""
    found = []
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            found.append(schema)
        for value in schema.values():
            found += objects_of(value)
    elif isinstance(schema, list):
        for value in schema:
            found += objects_of(value)
    return found


@EVERY_WIRE_AND_MODE
async def test_a_list_of_strict_structs_travels_wrapped_and_comes_back_unwrapped(
    server, wire, mode
):
    people = [{"name": "Ann", "age": 3}, {"name": "Bo", "age": 40, "extra": 1}]
    server.replies += [
        answer(wire, mode, json.dumps({"response": people})),
        answer(wire, mode, json.dumps({"response": people[:1]}), "call_2"),
    ]
    _, result = await record(loop(wire, server, mode, output_type=list[StrictPerson]))
    assert type(result) is Completed and result.output == [StrictPerson("Ann", 3)]
    # the unknown field was refused with its path inside the wrapper the model sent
    said = told(wire, mode, server.requests[1].json())
    assert "unknown field `extra` - at `$.response[1]`" in said
    body = server.requests[0].json()
    sent = body[wire.field] if mode == "native" else body["tools"]
    objects = objects_of(sent)
    # the wrapper and the item: each lists every property as required, forbids others
    assert len(objects) == 2
    for schema in objects:
        assert schema["additionalProperties"] is False
        assert sorted(schema["required"]) == sorted(schema["properties"])
    assert {tuple(s["properties"]) for s in objects} == {("response",), ("name", "age")}
    if mode == "native" and wire.name != "anthropic":  # such a schema is asked for strictly
        assert '"strict": true' in json.dumps(sent)


@EVERY_WIRE_AND_MODE
async def test_an_invalid_answer_goes_back_with_its_json_path_and_the_fix_is_taken(
    server, wire, mode
):
    server.replies += [answer(wire, mode, BAD_AGE), answer(wire, mode, GOOD, "call_2")]
    _, result = await record(loop(wire, server, mode))
    assert type(result) is Completed and result.output == ANN
    assert result.steps == 2 and len(server.requests) == 2
    validate_transcript(result.messages)
    second = server.requests[1].json()
    # the second request carries the refused answer back, then what was wrong with it
    said = told(wire, mode, second)
    assert AGE_PATH in said and "(1 retry left)" in said
    if mode == "tool":
        arguments, _, is_error = wire.sent(second)
        assert arguments == {"name": "Ann", "age": "three"}
        assert is_error is not False  # an error result where the wire can say so
    else:
        assert wire.texts(second, "assistant") == [BAD_AGE]
        assert "only the JSON" in said
    assert AGE_PATH not in json.dumps(server.requests[0].json())


@EVERY_WIRE_AND_MODE
async def test_a_validator_refusal_goes_back_over_the_wire(server, wire, mode):
    async def adult(person: Person) -> None:
        if person.age < 18:
            raise OutputError("age must be at least 18 - at `$.age`")

    server.replies += [
        answer(wire, mode, GOOD),
        answer(wire, mode, '{"name": "Ann", "age": 30}', "call_2"),
    ]
    _, result = await record(loop(wire, server, mode, output_validator=adult))
    assert type(result) is Completed and result.output == Person("Ann", 30)
    assert "age must be at least 18 - at `$.age`" in told(wire, mode, server.requests[1].json())


@EVERY_WIRE_AND_MODE
async def test_invalid_past_the_retries_fails_with_output_invalid(server, wire, mode):
    server.replies += [answer(wire, mode, BAD_AGE, f"call_{i}") for i in range(1, 4)]
    _, result = await record(loop(wire, server, mode, output_retries=2))
    assert type(result) is Failed and result.code == OUTPUT_INVALID
    assert AGE_PATH in result.detail and "(3 attempts)" in result.detail
    # three requests: the first answer and two retries, each told what was left
    assert result.steps == 3 and len(server.requests) == 3
    assert "(1 retry left)" in told(wire, mode, server.requests[1].json())
    assert "(0 retries left)" in told(wire, mode, server.requests[2].json())
    validate_transcript(result.messages)


@EVERY_WIRE_AND_MODE
async def test_no_retries_fails_at_the_first_invalid_answer(server, wire, mode):
    server.replies += [answer(wire, mode, BAD_AGE), answer(wire, mode, GOOD)]
    _, result = await record(loop(wire, server, mode, output_retries=0))
    assert type(result) is Failed and result.code == OUTPUT_INVALID
    assert len(server.requests) == 1 and "(1 attempt)" in result.detail


@EVERY_WIRE_IN_TOOL_MODE
async def test_text_instead_of_the_output_tool_is_asked_again_then_taken(server, wire, mode):
    server.replies += [Reply(body=wire.text("Ann, aged 3.")), answer(wire, mode, GOOD)]
    events, result = await record(loop(wire, server, mode))
    assert type(result) is Completed and result.output == ANN and result.steps == 2
    validate_transcript(result.messages)
    second = server.requests[1].json()
    assert wire.texts(second, "assistant") == ["Ann, aged 3."]
    asked = wire.texts(second, "user")[-1]
    assert "calling the final_result tool" in asked and "(1 retry left)" in asked
    assert not wire.results(second)  # no tool was called: no result
    # the retry message is in the transcript, and was announced
    retry = result.messages[2]
    assert type(retry) is UserMessage and retry.content == asked
    accepted = [e.message.id for e in events if e.type == "message.accepted"]
    assert accepted == ["u1", retry.id]


@EVERY_WIRE_IN_TOOL_MODE
async def test_text_every_time_fails_after_the_retries(server, wire, mode):
    server.replies += [Reply(body=wire.text(f"no {i}")) for i in range(3)]
    _, result = await record(loop(wire, server, mode, output_retries=2))
    assert type(result) is Failed and result.code == OUTPUT_INVALID
    assert "answered with text" in result.detail and len(server.requests) == 3


@EVERY_WIRE_IN_NATIVE_MODE
async def test_prose_instead_of_json_is_asked_again_then_taken(server, wire, mode):
    server.replies += [Reply(body=wire.text("Ann is 3.")), answer(wire, mode, GOOD)]
    _, result = await record(loop(wire, server, mode))
    assert type(result) is Completed and result.output == ANN and result.steps == 2
    asked = told(wire, mode, server.requests[1].json())
    assert "not JSON" in asked and "(1 retry left)" in asked
    # each request asked for the schema again
    for seen in server.requests:
        assert wire.field in seen.json()


BODY = ("é" + "\U0001f600" + "x" * 8) * 1_000  # 10,000 code points, 14,000 bytes as UTF-8


@EVERY_WIRE_AND_MODE
async def test_an_answer_of_10000_code_points_is_taken_whole(server, wire, mode):
    assert len(BODY) == 10_000 > MAX_ARGUMENT_CHARS  # past a tool call's limit
    raw = json.dumps({"title": "t", "body": BODY}, ensure_ascii=mode == "tool")
    server.replies.append(answer(wire, mode, raw))
    _, result = await record(loop(wire, server, mode, output_type=Essay))
    assert type(result) is Completed and result.steps == 1, result
    assert result.output == Essay("t", BODY)
    validate_transcript(result.messages)
    if mode == "tool":
        assert result.messages[-1].content == "final result accepted"
    else:
        assert result.final_text == raw


LONGEST = ("é" + "\U0001f600" + "x" * 8) * (MAX_STEP_TEXT // 10 - 10)  # 4 bytes and 2 a point


@EVERY_WIRE_AND_MODE
async def test_an_answer_near_max_step_text_code_points_is_taken_whole(server, wire, mode):
    """Section 11.4: outputs up to ``MAX_STEP_TEXT`` code points work, whatever
    their bytes as UTF-8 or escaped JSON (the provider's argument byte cap is a
    tool call's, not an output's)."""
    raw = json.dumps({"title": "t", "body": LONGEST}, ensure_ascii=mode == "tool")
    assert MAX_STEP_TEXT - 200 < len(raw) <= MAX_STEP_TEXT or mode == "tool"
    server.replies.append(answer(wire, mode, raw))
    _, result = await record(loop(wire, server, mode, output_type=Essay))
    assert type(result) is Completed and result.steps == 1, result
    assert result.output == Essay("t", LONGEST)


@EVERY_WIRE_IN_TOOL_MODE
async def test_an_ordinary_tool_call_that_size_is_still_refused(server, wire, mode):
    # the output is exempt from the tool-argument limits; a real tool is not
    ran: list[str] = []

    @tool
    async def save(title: str, body: str) -> str:
        """Save an essay."""
        ran.append(title)
        return "saved"

    raw = json.dumps({"title": "t", "body": BODY})
    server.replies += [
        Reply(body=wire.call("call_1", "save", raw), piece=4096, chunked=True),
        answer(wire, mode, raw, "call_2"),
    ]
    run = run_agent_loop(
        messages=[UserMessage("u1", "Write it.")],
        model=wire.model(server),
        tools=ToolRegistry([save]),
        max_steps=4,
        output_type=Essay,
    )
    _, result = await record(run)
    assert type(result) is Completed and result.output == Essay("t", BODY)
    assert ran == []
    refused = result.messages[1].content[0]
    assert list(refused.arguments) == [REJECTED_ARGUMENTS]
    assert "$.body" in refused.arguments[REJECTED_ARGUMENTS]


def held(wire: Any, mode: str) -> Reply:
    """A reply the server holds: it sends the head, then waits for the client to go."""
    return Reply(body=answer(wire, mode, GOOD).body, hang_after=0)


async def cancel_when_held(server: Any, run: Any, count: int) -> list[Any]:
    """Run ``run``, cancelling it once the server holds its ``count``-th request."""
    with trio.fail_after(60):  # a hang guard
        async with run, trio.open_nursery() as nursery:

            async def cancel() -> None:
                await server.requests.arrived(count)
                run.cancel()

            nursery.start_soon(cancel)
            events = [event async for event in run]
        await server.client_closed.wait()  # the held connection was closed
    assert_run_invariants(events, run.result)
    return events


@EVERY_WIRE_AND_MODE
async def test_cancelled_during_an_output_retry_the_transcript_stays_valid_and_continues(
    server, wire, mode
):
    server.replies += [answer(wire, mode, BAD_AGE), held(wire, mode)]
    run = loop(wire, server, mode)
    events = await cancel_when_held(server, run, 2)
    result = run.result
    assert type(result) is Cancelled
    assert len(server.requests) == 2
    # the held retry left nothing behind: the refused answer and what was said of it
    validate_transcript(repair_transcript(result.messages))
    validate_transcript(result.messages)  # complete messages only: nothing to repair
    kinds = [type(m) for m in result.messages]
    if mode == "tool":
        assert kinds == [UserMessage, AssistantMessage, ToolResultMessage]
        assert AGE_PATH in result.messages[2].content and result.messages[2].is_error
    else:
        assert kinds == [UserMessage, AssistantMessage, UserMessage]
        assert AGE_PATH in result.messages[2].content
    assert not [e for e in events if e.type == "model.chunk" and e.request_id == "request-002"]
    # a new run from there, asking for the same type, gets its answer
    # (a bad answer first: its retry message or result takes ids of its own)
    server.replies += [
        answer(wire, mode, '{"name": "Ann"}', "call_3"),
        answer(wire, mode, GOOD, "call_4"),
    ]
    _, again = await record(
        loop(wire, server, mode, messages=list(result.messages), request_sequence_start=3)
    )
    assert type(again) is Completed and again.output == ANN, again
    assert again.steps == 2 and len(server.requests) == 4
    third = server.requests[2].json()
    assert AGE_PATH in told(wire, mode, third)  # the model still sees what was wrong
    assert "missing required field `age`" in told(wire, mode, server.requests[3].json())
    assert again.messages[: len(result.messages)] == result.messages
    validate_transcript(again.messages)
    ids = [m.id for m in again.messages]
    assert len(set(ids)) == len(ids)


@EVERY_WIRE_IN_NATIVE_MODE
async def test_cancelled_while_the_retrys_answer_streams_no_part_of_it_is_kept(server, wire, mode):
    # the server sends part of the retry's answer, then holds: the run is cancelled
    # on its first chunk, and the half answer never reaches the transcript
    parts = pieces(GOOD, 4)
    body = wire.text(parts)
    first = json.dumps(parts[0])[1:-1].encode()  # as the event's JSON spells it
    cut = body.index(b"\n\n", body.index(first)) + 2  # after the first piece's event
    server.replies += [answer(wire, mode, BAD_AGE), Reply(body=body, hang_after=cut)]
    run = loop(wire, server, mode)
    streamed: list[Any] = []
    with trio.fail_after(60):  # a hang guard
        async with run:
            async for event in run:
                if event.type == "model.chunk" and event.request_id == "request-002":
                    streamed.append(event.chunk)
                    run.cancel()
        await server.client_closed.wait()
    result = run.result
    assert type(result) is Cancelled
    assert streamed == [TextDelta(parts[0])]  # the half answer did stream
    assert [type(m) for m in result.messages] == [UserMessage, AssistantMessage, UserMessage]
    (answered,) = [m for m in result.messages if type(m) is AssistantMessage]
    assert answered.content == (TextBlock(BAD_AGE),)  # the first answer only
    validate_transcript(result.messages)


@EVERY_WIRE_AND_MODE
async def test_an_agent_turn_is_typed_over_the_wire_and_the_next_turn_asks_again(
    server, wire, mode
):
    server.replies += [
        answer(wire, mode, BAD_AGE),
        answer(wire, mode, GOOD, "call_2"),
        answer(wire, mode, '{"title": "On Ann", "body": "She is 3."}', "call_3"),
    ]
    agent = Agent(model=wire.model(server), output_type=Person, output_mode=mode)
    with trio.fail_after(60):  # a hang guard
        first = await agent.prompt("Who is it?")
        second = await agent.prompt("Now an essay.", output_type=Essay)
    assert first.end.reason == "completed" and first.output == ANN and first.steps == 2
    assert second.end.reason == "completed" and second.output == Essay("On Ann", "She is 3.")
    assert AGE_PATH in told(wire, mode, server.requests[1].json())
    # the third request asks for the turn's own type, with the session's whole past
    third = server.requests[2].json()
    sent = json.dumps(third[wire.field] if mode == "native" else third["tools"])
    assert '"title"' in sent and '"age"' not in sent
    assert "Who is it?" in wire.texts(third, "user")
    validate_transcript(agent.messages)


@EVERY_WIRE_AND_MODE
async def test_an_agent_turn_past_the_retries_fails_with_output_invalid(server, wire, mode):
    server.replies += [answer(wire, mode, BAD_AGE, f"call_{i}") for i in range(1, 3)]
    agent = Agent(model=wire.model(server), output_type=Person, output_mode=mode, output_retries=1)
    with trio.fail_after(60):  # a hang guard
        result = await agent.prompt("Who is it?")
    assert result.end.reason == "failed" and result.end.code == OUTPUT_INVALID
    assert result.output is None and len(server.requests) == 2
    validate_transcript(agent.messages)


@EVERY_WIRE_AND_MODE
@pytest.mark.parametrize("ledger", [False, True], ids=["in-memory", "resumed-from-ledger"])
async def test_an_agent_turn_cancelled_during_an_output_retry_can_be_continued(
    server, wire, mode, ledger, tmp_path
):
    server.replies += [answer(wire, mode, BAD_AGE), held(wire, mode)]
    options: dict[str, Any] = {"output_type": Person, "output_mode": mode}
    store = JsonlStore(tmp_path)
    kept_in = {"store": store, "session_id": "s"} if ledger else {}
    agent = Agent(model=wire.model(server), **options, **kept_in)
    turn = agent.turn("Who is it?")
    await cancel_when_held(server, turn, 2)
    assert turn.result.end.reason == "cancelled" and turn.result.output is None
    validate_transcript(repair_transcript(agent.messages))
    if ledger:  # another process takes the session up from its ledger
        kept = agent.messages
        await agent.aclose()
        agent = await Agent.resume(store, "s", model=wire.model(server), **options)
        assert agent.messages == kept
    # the model owes an answer: a turn with no new message continues, typed
    server.replies.append(answer(wire, mode, GOOD, "call_3"))
    with trio.fail_after(60):  # a hang guard
        resumed = await agent.prompt()
    assert resumed.end.reason == "completed" and resumed.output == ANN, resumed.end
    assert resumed.steps == 1 and len(server.requests) == 3
    assert AGE_PATH in told(wire, mode, server.requests[2].json())
    validate_transcript(agent.messages)
    await agent.aclose()


@pytest.mark.parametrize("wire", ALL_WIRES, ids=[wire.name for wire in ALL_WIRES])
@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "kept"])
async def test_a_nested_typed_agent_cancelled_mid_turn_leaves_both_transcripts_valid(
    server, wire, fresh
):
    # the inner agent, on a real adapter, is held by the server mid turn; the outer
    # run (scripted) is cancelled then: both transcripts stay valid and go on
    from trio_agent.testing import ScriptedModel, scripted_response

    server.replies += [held(wire, "tool")]
    inner = Agent(model=wire.model(server), output_type=Person)
    ask = inner.as_tool("ask", "Ask who it is.", fresh=fresh)
    outer = run_agent_loop(
        messages=[UserMessage("u1", "Find out who it is.")],
        model=ScriptedModel(
            [
                scripted_response("r1", [ToolCall("c1", "ask", {"input": "who?"})]),
                scripted_response("r2", "never reached"),
            ]
        ),
        tools=ToolRegistry([ask]),
        max_steps=4,
        output_type=str,
    )
    events = await cancel_when_held(server, outer, 1)
    result = outer.result
    assert type(result) is Cancelled
    assert_run_invariants(events, result)
    # the call was cut: no result invented for it, and the transcript can be repaired
    assert not any(type(m) is ToolResultMessage for m in result.messages)
    validate_transcript(repair_transcript(result.messages))
    # the inner agent's own conversation (kept) is whole and can go on
    if not fresh:
        validate_transcript(repair_transcript(inner.messages))
        server.replies.append(answer(wire, "tool", GOOD, "call_2"))
        again = await inner.prompt("who, really?")
        assert again.output == ANN
    else:
        assert inner.messages == ()  # the template itself never ran
