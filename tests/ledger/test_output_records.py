"""The accepted typed output in the ledger (issue 18 item 5): a ``turn/output``
record after the step that gave it and before ``turn/end``, as durable as the
policy asks before ``turn.finished`` is observed; derived back by turn
(``DerivedSession.outputs``); ignored by the transcript, so resume is unchanged;
absent for a turn without an accepted output; printed by ``trio-agent show``."""

from __future__ import annotations

import os
import shutil
from typing import Any

import msgspec
import pytest
from paths import LEDGERS

from trio_agent import (
    OUTPUT_INVALID,
    OUTPUT_TOOL_NAME,
    Agent,
    JsonlStore,
    ToolCall,
    UserMessage,
    validate_transcript,
)
from trio_agent.cli import main
from trio_agent.ledger import (
    LedgerCorruptError,
    MessageRecord,
    OutputRecord,
    SessionStartRecord,
    StepEndRecord,
    StepStartRecord,
    TurnEndRecord,
    TurnStartRecord,
    derive,
    encode_records,
    record_decoder,
)
from trio_agent.stores import SqliteStore, parse_jsonl
from trio_agent.testing import ScriptedModel, scripted_response


class Person(msgspec.Struct):
    name: str
    age: int


def answer(rid: str, cid: str, arguments: dict[str, Any]) -> Any:
    return scripted_response(rid, [ToolCall(cid, OUTPUT_TOOL_NAME, arguments)])


def typed_agent(store, script: list[Any], **options: Any) -> Agent:
    options.setdefault("output_type", Person)
    return Agent(
        model=ScriptedModel(script), store=store, session_id="s1", fsync="always", **options
    )


async def records_of(store, session_id: str = "s1") -> list[Any]:
    return list((await store.load(session_id)).records)


def outputs_in(records: list[Any]) -> list[OutputRecord]:
    return [r for r in records if type(r) is OutputRecord]


@pytest.mark.parametrize(
    ("mode", "reply"),
    [
        ("tool", answer("r1", "c1", {"name": "Ann", "age": 3})),
        ("native", scripted_response("r1", '{"name": "Ann", "age": 3}')),
    ],
)
async def test_the_accepted_output_is_recorded_before_turn_end_in_both_modes(store, mode, reply):
    agent = typed_agent(store, [reply], output_mode=mode)
    result = await agent.prompt("who?")
    await agent.aclose()
    assert result.output == Person("Ann", 3)
    records = await records_of(store)
    kinds = [r.kind for r in records]
    assert kinds[-4:] == ["step/end", "turn/output", "turn/end", "session/closed"]
    (record,) = outputs_in(records)
    assert record == OutputRecord(
        seq=record.seq, turn=1, request_id="request-001", output={"name": "Ann", "age": 3}
    )
    derived = derive(records)
    assert derived.outputs == {1: {"name": "Ann", "age": 3}}
    assert derived.last_output == {"name": "Ann", "age": 3}
    assert tuple(derived.messages) == result.messages  # the transcript ignores it


async def test_the_record_names_the_step_that_gave_the_answer_after_a_retry(store):
    agent = typed_agent(
        store,
        [
            scripted_response("r1", "Ann, aged 3"),
            answer("r2", "c2", {"name": "Ann", "age": "3"}),
            answer("r3", "c3", {"name": "Ann", "age": 3}),
        ],
    )
    await agent.prompt("who?")
    await agent.aclose()
    (record,) = outputs_in(await records_of(store))
    assert record.request_id == "request-003" and record.turn == 1


async def test_each_turn_records_its_own_output_of_its_own_type(store):
    script = [
        answer("r1", "c1", {"name": "Ann", "age": 3}),
        scripted_response("r2", "plain words"),
        answer("r3", "c3", {"response": [1, 2]}),
    ]
    agent = typed_agent(store, script)
    await agent.prompt("who?")
    await agent.prompt("say it", output_type=str)
    await agent.prompt("numbers", output_type=list[int])
    await agent.aclose()
    records = await records_of(store)
    assert [(r.turn, r.request_id) for r in outputs_in(records)] == [
        (1, "request-001"),
        (2, "request-002"),
        (3, "request-003"),
    ]
    derived = derive(records)
    assert derived.outputs == {1: {"name": "Ann", "age": 3}, 2: "plain words", 3: [1, 2]}
    assert derived.last_output == [1, 2]


async def test_a_non_object_output_is_recorded_as_its_json(store):
    agent = typed_agent(store, [answer("r1", "c1", {"response": [1, 2]})], output_type=list[int])
    assert (await agent.prompt("numbers")).output == [1, 2]
    await agent.aclose()
    assert derive(await records_of(store)).outputs == {1: [1, 2]}


async def test_an_output_with_no_json_form_is_recorded_as_null_with_the_reason(store):
    class Opaque:
        pass

    async def replace(value: Person) -> Opaque:
        return Opaque()

    agent = typed_agent(
        store, [answer("r1", "c1", {"name": "Ann", "age": 3})], output_validator=replace
    )
    result = await agent.prompt("who?")
    await agent.aclose()
    assert type(result.output) is Opaque and result.end.reason == "completed"
    (record,) = outputs_in(await records_of(store))
    assert record.output is None and record.error is not None
    assert "Opaque has no JSON form" in record.error
    assert derive(await records_of(store)).outputs == {1: None}


async def test_a_turn_that_failed_output_invalid_records_no_output(store):
    agent = typed_agent(
        store, [scripted_response(f"r{i}", "no") for i in range(1, 3)], output_retries=1
    )
    result = await agent.prompt("who?")
    await agent.aclose()
    assert result.end.reason == "failed" and result.end.code == OUTPUT_INVALID
    records = await records_of(store)
    assert outputs_in(records) == []
    assert derive(records).outputs == {} and derive(records).last_output is None


async def test_a_refusal_records_no_output(store):
    agent = typed_agent(store, [scripted_response("r1", "I can't", stop_reason="refusal")])
    result = await agent.prompt("who?")
    await agent.aclose()
    assert result.output is None
    assert outputs_in(await records_of(store)) == []


async def test_a_turn_without_output_type_records_none(store):
    agent = typed_agent(store, [scripted_response("r1", "hi")], output_type=None)
    await agent.prompt("hello")
    await agent.aclose()
    assert outputs_in(await records_of(store)) == []


async def test_resume_gives_the_same_transcript_and_knows_the_last_output(store):
    agent = typed_agent(store, [answer("r1", "c1", {"name": "Ann", "age": 3})])
    await agent.prompt("who?")
    before = agent.messages
    await agent.aclose()

    model = ScriptedModel([scripted_response("r2", '{"name": "Bob", "age": 4}')])
    resumed = await Agent.resume(store, "s1", model=model, output_type=Person, output_mode="native")
    assert resumed.messages == before
    validate_transcript(resumed.messages)
    result = await resumed.prompt("and now?")
    await resumed.aclose()
    assert result.output == Person("Bob", 4)
    assert model.requests[0].messages[: len(before)] == tuple(before)
    derived = derive(await records_of(store))
    assert derived.outputs == {1: {"name": "Ann", "age": 3}, 2: {"name": "Bob", "age": 4}}
    assert derived.last_output == {"name": "Bob", "age": 4}
    assert tuple(derived.messages) == result.messages


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_an_old_ledger_without_the_record_loads_and_then_records_one(tmp_path, kind):
    old = LEDGERS
    if kind == "jsonl":
        shutil.copy(old / "pre15.jsonl", tmp_path / "pre15.jsonl")
        store: Any = JsonlStore(tmp_path)
    else:
        shutil.copy(old / "pre15.db", tmp_path / "pre15.db")
        store = SqliteStore(tmp_path / "pre15.db")
    derived = derive(await records_of(store, "pre15"))
    assert derived.outputs == {} and derived.last_output is None
    model = ScriptedModel([answer("r4", "c4", {"name": "Ann", "age": 3})])
    agent = await Agent.resume(store, "pre15", model=model, output_type=Person)
    async with agent:
        assert (await agent.prompt("who?")).output == Person("Ann", 3)
    assert derive(await records_of(store, "pre15")).outputs == {3: {"name": "Ann", "age": 3}}


def ledger_with(*middle: Any) -> list[Any]:
    """session/start, turn 1 with one step, then ``middle`` (seq filled in)."""
    head = [
        SessionStartRecord(seq=0, format=1, session_id="s", created=0.0),
        TurnStartRecord(seq=1, turn=1, sequence=0),
        MessageRecord(seq=2, message=UserMessage("u1", "who?")),
        StepStartRecord(seq=3, request_id="request-001"),
    ]
    return head + [msgspec.structs.replace(r, seq=len(head) + i) for i, r in enumerate(middle)]


def output(turn: int = 1) -> OutputRecord:
    return OutputRecord(seq=0, turn=turn, request_id="request-001", output={"a": 1})


def step_end() -> StepEndRecord:
    return StepEndRecord(seq=0, request_id="request-001", stop_reason="stop")


def turn_end() -> TurnEndRecord:
    from trio_agent import TurnCompleted

    return TurnEndRecord(seq=0, turn=1, end=TurnCompleted(), sequence=3)


def test_a_record_in_its_place_round_trips_byte_for_byte():
    records = ledger_with(step_end(), output(), turn_end())
    data = encode_records(records)
    loaded = parse_jsonl("s", data)
    assert list(loaded.records) == records and encode_records(list(loaded.records)) == data
    assert derive(loaded.records).outputs == {1: {"a": 1}}
    line = data.splitlines()[5]
    assert record_decoder.decode(line) == records[5]
    assert b'"kind":"turn/output"' in line


@pytest.mark.parametrize(
    ("records", "says"),
    [
        (ledger_with(output()), "turn/output inside step request-001"),
        (ledger_with(step_end(), output(turn=2)), "turn/output of turn 2 where the open turn is 1"),
        (ledger_with(step_end(), turn_end(), output()), "turn/output outside a turn"),
    ],
)
def test_a_record_out_of_place_is_refused_as_corrupt(records, says):
    with pytest.raises(LedgerCorruptError, match=says):
        derive(records)


def test_an_unknown_record_kind_is_still_refused():
    data = encode_records(ledger_with(step_end())) + b'{"kind":"turn/mystery","seq":5}\n'
    with pytest.raises(LedgerCorruptError, match="line 6 is corrupt"):
        parse_jsonl("s", data)


@pytest.mark.parametrize("policy", ["always", "step"])
async def test_the_record_is_durable_before_turn_finished_is_observed(
    tmp_path, monkeypatch, policy
):
    store = JsonlStore(tmp_path)
    path = store.path("s1")
    synced: list[int] = []  # the file's size at each fsync
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    agent = Agent(
        model=ScriptedModel([answer("r1", "c1", {"name": "Ann", "age": 3})]),
        store=store,
        session_id="s1",
        fsync=policy,
        output_type=Person,
    )
    seen = False
    async with agent.turn("who?") as run:
        async for event in run:
            data = path.read_bytes()
            at = data.find(b'"kind":"turn/output"')
            if event.type == "turn.finished":
                assert at >= 0, "turn/output is not written"
                end_of_record = data.index(b"\n", at) + 1
                assert max(synced) >= end_of_record, "turn/output is not on disk yet"
                seen = True
            else:
                assert at < 0  # written when the answer is accepted, not before
    await agent.aclose()
    assert seen


async def test_the_record_is_in_the_database_before_turn_finished_is_observed(tmp_path):
    store = SqliteStore(tmp_path / "sessions.db")
    agent = typed_agent(store, [answer("r1", "c1", {"name": "Ann", "age": 3})])
    seen = False
    async with agent.turn("who?") as run:
        async for event in run:
            if event.type == "turn.finished":
                reader = SqliteStore(tmp_path / "sessions.db")  # another connection
                kinds = [r.kind for r in await records_of(reader)]
                assert kinds[-2:] == ["turn/output", "turn/end"]
                seen = True
    await agent.aclose()
    assert seen


def test_show_prints_each_turns_output_as_compact_json(tmp_path, capsys):
    records = ledger_with(step_end(), output(), turn_end())
    records[5] = msgspec.structs.replace(
        records[5], output={"name": "Zoë", "note": "a\nb\x9b", "n": [1, 2.5, None]}
    )
    (tmp_path / "s.jsonl").write_bytes(encode_records(records))
    assert main(["show", str(tmp_path / "s.jsonl")]) == 0
    text = capsys.readouterr().out
    line = 'output (from request-001): {"name":"Zoë","note":"a\\nb\\u009b","n":[1,2.5,null]}'
    assert line in text
    assert text.index(line) < text.index("== turn 1 ended: completed")
    assert msgspec.json.decode(line.split(": ", 1)[1])["note"] == "a\nb\x9b"


def test_show_says_when_an_output_had_no_json_form(tmp_path, capsys):
    records = ledger_with(step_end(), output(), turn_end())
    records[5] = msgspec.structs.replace(records[5], output=None, error="Opaque has no JSON form")
    (tmp_path / "s.jsonl").write_bytes(encode_records(records))
    assert main(["show", str(tmp_path / "s.jsonl")]) == 0
    assert "output (from request-001): not recorded: Opaque has no JSON form" in (
        capsys.readouterr().out
    )


async def test_cancelled_anywhere_in_a_typed_turn_the_ledger_has_the_output_iff_accepted(
    tmp_path,
):
    from trio_agent.testing import explore_cancellation

    made = 0

    def scenario() -> Any:
        nonlocal made
        made += 1
        store = JsonlStore(tmp_path / f"run{made}")
        agent = Agent(
            model=ScriptedModel(
                [
                    scripted_response("r1", "text first"),
                    answer("r2", "c2", {"name": "Ann", "age": 3}),
                ]
            ),
            store=store,
            session_id="s1",
            output_type=Person,
        )
        return agent.turn("who?"), agent, store

    async def check(events: Any, result: Any, agent: Agent, store: Any) -> None:
        await agent.aclose()
        if not (tmp_path / f"run{made}" / "s1.jsonl").exists():
            return  # cancelled before the session's ledger was made
        derived = derive(await records_of(store))
        if result.output is not None:
            assert result.end.reason == "completed"
            assert derived.outputs == {1: {"name": "Ann", "age": 3}}
        else:
            assert derived.outputs == {}
        resumed = await Agent.resume(store, "s1", model=ScriptedModel([]))
        assert list(resumed.messages) == derived.closed_messages()
        await resumed.aclose()

    report = await explore_cancellation(scenario, check)
    assert report.checkpoints > 10
    assert {"cancelled", "completed"} <= set(report.outcomes)
