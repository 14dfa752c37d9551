"""Replaying a session's records (``derive``): what it refuses as damage (two ledgers
concatenated, records out of place, arguments over the limits), the usage it counts,
how it says a call without a result ended (issue 12), and the counters a resume
continues from."""

from __future__ import annotations

import shutil

import msgspec
import pytest
import trio
import trio.testing
from helpers import add, call
from ledger_scenario import agent_on, records_of, script, sums

from trio_agent import (
    MAX_ARGUMENT_ENTRIES,
    TOOL_CANCELLED,
    TOOL_OUTCOME_UNKNOWN,
    Agent,
    AssistantMessage,
    FatalToolError,
    JsonlStore,
    LedgerCorruptError,
    TextBlock,
    ToolCall,
    ToolRegistry,
    Usage,
    UserMessage,
    tool,
)
from trio_agent.ledger import (
    TOOL_FATAL,
    MessageRecord,
    SessionStartRecord,
    ToolCallRecord,
    ToolCancelledRecord,
    ToolResultRecord,
    ToolSkippedRecord,
    TurnStartRecord,
    derive,
    encode_records,
    record_decoder,
)
from trio_agent.stores import parse_jsonl
from trio_agent.testing import ScriptedModel, scripted_response


async def recorded(tmp_path, name="a", system="be brief"):
    store = JsonlStore(tmp_path / name)
    store.directory.mkdir()
    agent = agent_on(store, sums(name), system=system)
    await agent.prompt(UserMessage(f"{name}-u1", "go"))
    await agent.aclose()
    return list(await records_of(store))


def renumbered(records, start):
    return [msgspec.structs.replace(r, seq=start + i) for i, r in enumerate(records)]


async def test_two_ledgers_concatenated_are_refused(tmp_path):
    """Issue 12: two ledgers concatenated (renumbered) derived as one session; they are refused."""
    first = await recorded(tmp_path, "a", system="be brief")
    second = await recorded(tmp_path, "b", system="be verbose")
    joined = first + renumbered(second, len(first))
    with pytest.raises(LedgerCorruptError, match="a second session/start"):
        derive(parse_jsonl("s1", encode_records(joined)).records)


async def test_records_out_of_place_are_refused(tmp_path):
    """Issue 12: records out of place (a turn inside a turn, a result for no call, a call twice,
    ...) derived without a word; each is refused, saying which."""
    records = await recorded(tmp_path)
    kinds = [r.kind for r in records]
    turn_start = records[kinds.index("turn/start")]
    step_start = kinds.index("step/start")
    result = next(r for r in records if isinstance(r, ToolResultRecord))
    cases = {
        "turn/start of turn 2 inside turn 1": [
            *records[:2],
            msgspec.structs.replace(turn_start, turn=2),
        ],
        "turn/start of turn 3 after 1": [
            *records[: kinds.index("session/closed")],
            msgspec.structs.replace(turn_start, turn=3),
        ],
        "step/start of request-001 inside request-001": [
            *records[: step_start + 1],
            records[step_start],
        ],
        "does not answer an unanswered call": [
            *records[:step_start],
            msgspec.structs.replace(
                result, result=msgspec.structs.replace(result.result, tool_call_id="nope")
            ),
        ],
        "tool/call for call 'nope', which is not an open call": [
            *records[: step_start + 2],
            ToolCallRecord(seq=0, call_id="nope"),
        ],
        "session/closed inside turn 1": [*records[: step_start + 1], records[-1]],
        "tool/call for call 'ac1', which is already dispatched": [
            *records[: step_start + 3],
            records[step_start + 2],
        ],
        "tool/cancelled for call 'ac1', which is not dispatched": [
            *records[: step_start + 2],
            ToolCancelledRecord(seq=0, call_id="ac1"),
        ],
    }
    for message, damaged in cases.items():
        with pytest.raises(LedgerCorruptError, match=message):
            derive(renumbered(damaged, 0))


async def test_recorded_arguments_over_the_limits_are_refused_when_derived(tmp_path):
    """Issue 12: Recorded arguments over the limits were found only later, by ``Agent.resume``, as a
    TranscriptError; derive refuses them as damage."""
    records = await recorded(tmp_path)
    big = {f"k{i}": i for i in range(MAX_ARGUMENT_ENTRIES + 1)}
    message = AssistantMessage("message-big", (TextBlock("x"), ToolCall("big", "add", big)))
    at = [r.kind for r in records].index("step/start") + 1
    damaged = [*records[:at], MessageRecord(seq=0, message=message)]
    # found by derive as damage, not later by Agent.resume as a TranscriptError
    with pytest.raises(LedgerCorruptError, match="more than 256 object fields"):
        derive(renumbered(damaged, 0))


async def test_usage_of_a_cancelled_turn_is_in_the_ledger(store):
    """Issue 12: the usage of a response whose turn was cancelled (billed all the same) was not in
    the ledger."""
    release = trio.Event()

    @tool
    async def slow() -> str:
        await release.wait()
        return "never"

    script = [scripted_response("r1", [call("slow", "c1")], usage=Usage(100, 20))]
    agent = agent_on(store, script, tools=ToolRegistry([slow]))
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            if event.type == "tool.started":
                run.cancel()  # the response completed (and was billed); the step did not
    await agent.aclose()
    derived = derive(await records_of(store))
    assert (derived.usage.input_tokens, derived.usage.output_tokens) == (100, 20)


async def test_usage_of_a_refused_response_is_counted_on_its_own(store):
    """Issue 12: A refused response (a protocol error) was billed all the same by the provider; its
    usage is counted on its own, as failed usage."""
    refused = scripted_response("r1", "hi", usage=Usage(50, 5), request_id="request-009")
    agent = agent_on(store, [refused])
    result = await agent.prompt(UserMessage("u1", "go"))
    await agent.aclose()
    assert result.end.code == "MODEL_PROTOCOL_ERROR"
    derived = derive(await records_of(store))
    assert derived.usage == Usage() and derived.failed_usage == Usage(50, 5)


async def test_a_fatal_call_is_not_later_called_outcome_unknown(store):
    """Issue 12: a call that failed fatally was called outcome unknown on resume; it is TOOL_FATAL,
    with its message."""

    @tool
    async def boom() -> str:
        raise FatalToolError("the quota is gone")

    agent = agent_on(
        store, [scripted_response("r1", [call("boom", "c1")])], tools=ToolRegistry([boom])
    )
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.code == TOOL_FATAL
    await agent.aclose()
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([boom]))
    [(closing, code)] = resumed.closed_on_resume
    assert code == TOOL_FATAL and "the quota is gone" in closing.content
    await resumed.aclose()


async def test_a_cancelled_call_is_not_later_called_outcome_unknown(store):
    """Issue 12: a call cancelled in a process that knew it was called outcome unknown on resume; it
    is TOOL_CANCELLED."""

    running = trio.Event()

    @tool
    async def slow() -> str:
        running.set()
        await trio.sleep_forever()
        return "never"

    agent = agent_on(
        store, [scripted_response("r1", [call("slow", "c1")])], tools=ToolRegistry([slow])
    )
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            if event.type == "tool.started":
                await running.wait()  # the call runs...
                run.cancel()  # ... then is cancelled
    await agent.aclose()
    resumed = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([slow]))
    [(closing, code)] = resumed.closed_on_resume
    assert code == TOOL_CANCELLED and closing.content.startswith("TOOL_CANCELLED:")
    await resumed.aclose()


async def test_a_call_running_when_the_process_died_is_still_outcome_unknown(tmp_path):
    """Issue 12: a call running when the process died is still outcome unknown on resume."""
    store = JsonlStore(tmp_path)
    crashed = JsonlStore(tmp_path / "crashed")
    crashed.directory.mkdir()

    copied = trio.Event()

    @tool
    async def slow() -> str:
        shutil.copy(store.path("s1"), crashed.path("s1"))  # killed while it runs
        copied.set()
        await trio.sleep_forever()
        return "never"

    agent = agent_on(
        store, [scripted_response("r1", [call("slow", "c1")])], tools=ToolRegistry([slow])
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(agent.prompt, UserMessage("u1", "go"))
        await copied.wait()
        nursery.cancel_scope.cancel()
    await agent.aclose()
    resumed = await Agent.resume(crashed, "s1", model=ScriptedModel([]), tools=ToolRegistry([slow]))
    assert [code for _, code in resumed.closed_on_resume] == [TOOL_OUTCOME_UNKNOWN]
    await resumed.aclose()


async def test_derive_reads_usage_from_step_end_in_older_ledgers():
    """Issue 12: derive lost the usage that older ledgers record on step/end."""
    records = [
        SessionStartRecord(seq=0, format=1, session_id="s", created=0.0),
        TurnStartRecord(seq=1, turn=1, sequence=0),
        *map(
            record_decoder.decode,
            [
                b'{"kind":"step/start","seq":2,"request_id":"request-001"}',
                b'{"kind":"message","seq":3,"message":{"role":"assistant","id":"m","content":[]}}',
                b'{"kind":"step/end","seq":4,"request_id":"request-001","stop_reason":"stop",'
                b'"usage":{"input_tokens":7,"output_tokens":3}}',
            ],
        ),
    ]
    assert derive(records).usage == Usage(7, 3)


async def test_a_call_id_used_again_after_compaction_keeps_the_ledger_loadable(store):
    """Issue 12 (review): Compaction forgets the ids of what it dropped (live, and in derive): a
    server that numbers its calls from 1 again gives the same id to a new call, which made the
    ledger unloadable."""

    async def compact(messages):
        return [UserMessage("summary", "we added 1 and 2")]

    agent = Agent(
        model=ScriptedModel(
            [
                scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})]),
                scripted_response("r2", "3"),
                scripted_response("r3", [call("add", "c1", {"left": 3, "right": 4})]),
                scripted_response("r4", "7"),
            ]
        ),
        tools=ToolRegistry([add]),
        store=store,
        session_id="s1",
        context_window=100,
        reserve_output_tokens=0,
        count_tokens=lambda request: 10_000 if len(request.messages) > 4 else 1,
        compact=compact,
    )
    await agent.prompt(UserMessage("u1", "1+2"))
    assert (await agent.prompt(UserMessage("u2", "3+4"))).final_text == "7"
    await agent.aclose()
    assert derive(await records_of(store)).closed


async def test_resumed_counters_continue_exactly(store):
    """A resumed session's request and event counters did not continue exactly where the recording
    stopped."""
    agent = Agent(
        model=ScriptedModel(script()),
        tools=ToolRegistry([add]),
        store=store,
        session_id="s1",
        request_sequence_start=10,
    )
    live_events = []
    async with agent.turn(UserMessage("u1", "go")) as run:
        async for event in run:
            live_events.append(event)
    await agent.aclose()
    model = ScriptedModel([scripted_response("n1", "more")])
    resumed = await Agent.resume(store, "s1", model=model, tools=ToolRegistry([add]))
    assert resumed.requests == agent.requests == 11
    events = []
    async with resumed.turn(UserMessage("u2", "more")) as run:
        async for event in run:
            events.append(event)
    assert model.requests[0].id == "request-012"
    assert events[0].sequence == live_events[-1].sequence + 1
    await resumed.aclose()


async def test_a_dispatched_call_without_an_end_is_rerun_only_when_its_effect_allows(tmp_path):
    """DESIGN 12.4: a call dispatched with no end is closed as outcome unknown when
    its effect was ``once``, and left to run again (``reruns``) when it was
    ``idempotent``; a rerun is recorded once per dispatch, only for such a call,
    and a rerun skipped before its dispatch leaves it owed."""
    records = await recorded(tmp_path)
    at = [r.kind for r in records].index("tool/call")
    cut = records[: at + 1]  # the writer died during call ac1
    once = derive(renumbered(cut, 0))
    codes = [(r.tool_call_id, c) for r, c in once.closing_results()]
    assert once.reruns == () and codes[0] == ("ac1", TOOL_OUTCOME_UNKNOWN)
    idempotent = [*cut[:at], msgspec.structs.replace(cut[at], effect="idempotent")]
    derived = derive(renumbered(idempotent, 0))
    assert [c.id for c in derived.reruns] == ["ac1"]
    assert [r.tool_call_id for r, _ in derived.closing_results()] == ["ac2"]  # not started
    rerun = ToolCallRecord(seq=0, call_id="ac1", rerun=True)
    skipped = ToolSkippedRecord(seq=0, call_id="ac1")
    owed = derive(renumbered([*idempotent, rerun, skipped], 0))
    assert [c.id for c in owed.reruns] == ["ac1"]
    assert [c.id for c in derive(renumbered([*idempotent, rerun], 0)).reruns] == ["ac1"]
    cases = {
        "again, whose effect is once": [*cut, rerun],
        "again while it runs": [*idempotent, rerun, rerun],
        "again after it ended": [*idempotent, ToolCancelledRecord(seq=0, call_id="ac1"), rerun],
    }
    for message, damaged in cases.items():
        with pytest.raises(LedgerCorruptError, match=message):
            derive(renumbered(damaged, 0))


async def test_regression_a_rerun_cut_by_a_second_crash_is_owed_again(tmp_path):
    """The fleet's kill trials: a worker died while running again a call another
    worker's death had left unknown; the next worker's rerun was refused as damage
    ('again while it runs'). A rerun without an end when its turn ends is owed again."""
    records = await recorded(tmp_path)
    at = [r.kind for r in records].index("tool/call")
    idempotent = [*records[:at], msgspec.structs.replace(records[at], effect="idempotent")]
    rerun = ToolCallRecord(seq=0, call_id="ac1", rerun=True)
    end_1 = next(r for r in records if r.kind == "turn/end")  # the first crash, closed
    start_2 = next(r for r in records if r.kind == "turn/start")
    start_2 = msgspec.structs.replace(start_2, turn=2, sequence=end_1.sequence)
    crashed_again = [*idempotent, end_1, start_2, rerun]  # the second writer died in it
    assert [c.id for c in derive(renumbered(crashed_again, 0)).reruns] == ["ac1"]
    end_2 = msgspec.structs.replace(end_1, turn=2)
    start_3 = msgspec.structs.replace(start_2, turn=3)
    third = derive(renumbered([*crashed_again, end_2, start_3, rerun], 0))
    assert third.rerunning == {"ac1"} and [c.id for c in third.reruns] == ["ac1"]
