"""The ledger's side of human approval (issue 19): ``approval/requested`` and
``approval/decided`` records, what ``derive`` makes of them (pending approvals,
decisions, what a resume closes and what it leaves held), the corrupt cases it
refuses, both stores, old ledgers, and ``show``. Records are written through the
``Ledger`` API directly; the engine's own tests drive a live agent."""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kept_lines import KeptLines
from paths import LEDGERS

from trio_agent import (
    AssistantMessage,
    JsonlStore,
    SqliteStore,
    TextBlock,
    ToolCall,
    UserMessage,
    validate_transcript,
)
from trio_agent.cli._show import show
from trio_agent.engine._approvals import ApprovalDecision
from trio_agent.events import TurnAwaitingApproval, TurnCompleted
from trio_agent.ledger import (
    TOOL_CANCELLED,
    TOOL_FATAL,
    TOOL_NOT_STARTED,
    TOOL_OUTCOME_UNKNOWN,
    ApprovalDecidedRecord,
    ApprovalRequestedRecord,
    DerivedSession,
    Ledger,
    LedgerCorruptError,
    Record,
    ToolResultRecord,
    TurnEndRecord,
    derive,
    encode_records,
    record_decoder,
)
from trio_agent.ledger._records import record_encoder
from trio_agent.limits import MAX_ARGUMENT_DEPTH
from trio_agent.messages._ir import tool_result
from trio_agent.model import Usage

A = ToolCall("call-a", "write_file", {"path": "notes.txt", "text": "hi"})  # held
B = ToolCall("call-b", "add", {"left": 20, "right": 22})  # runs at once
USER = UserMessage("user-1", "Write 42 to notes.txt")
ASKING = AssistantMessage("message-r1", (TextBlock("On it."), A, B))
DONE = AssistantMessage("message-r2", (TextBlock("Written."),))
APPROVE = ApprovalDecision(call_id=A.id, approved=True, by="ann", at=1700000000.5)
EDIT = ApprovalDecision(
    call_id=A.id, approved=True, by="ann", arguments={"path": "scratch/notes.txt", "text": "hi"}
)
REJECT = ApprovalDecision(call_id=A.id, approved=False, reason="not there", by="bob")


def records_of(lines: list[bytes]) -> list[Record]:
    return [record_decoder.decode(line) for line in lines]


def written(write: Callable[[Ledger], Any]) -> list[Record]:
    """The records ``write`` writes through a fresh ``Ledger``."""
    memory = KeptLines()
    write(Ledger(memory, 0))
    return records_of(memory.lines)


def asking_step(ledger: Ledger) -> None:
    """Turn 1 up to the assistant message that makes calls A and B."""
    ledger.session_started("s1", 0.0, "")
    ledger.turn_started(1, 0)
    ledger.message(USER)
    ledger.step_started("request-001")
    ledger.message(ASKING, usage=Usage(10, 5))


def first_turn(ledger: Ledger, marks: dict[str, int]) -> None:
    """Turn 1: the step holds A, runs B, and the turn ends awaiting approval."""
    asking_step(ledger)
    marks["requested"] = ledger.next_seq
    ledger.approval_requested(A)
    ledger.tool_call(B)
    ledger.message(tool_result(B, '{"sum": 42}', False))
    ledger.step_ended("request-001", "tool_call")
    ledger.turn_ended(1, TurnAwaitingApproval(call_ids=(A.id,)), 9)


def resolving_turn(ledger: Ledger, turn: int, decision: ApprovalDecision, marks: dict[str, int]):
    """The turn that resolves A (run if approved, an error result if rejected), then
    asks the model again. It starts between A's assistant message and A's result."""
    ledger.turn_started(turn, 10 * turn)
    if decision.approved:
        marks["dispatched"] = ledger.next_seq
        ledger.tool_call(A)
        marks["result"] = ledger.next_seq
        ledger.message(tool_result(A, "written", False))
    else:
        marks["result"] = ledger.next_seq
        ledger.message(tool_result(A, f"rejected by bob: {decision.reason}", True))
    ledger.step_started(f"request-{turn:03d}")
    ledger.message(AssistantMessage(f"message-r{turn}", (TextBlock("Done."),)), usage=Usage(3, 2))
    ledger.step_ended(f"request-{turn:03d}", "stop")
    ledger.turn_ended(turn, TurnCompleted(), 10 * turn + 9)


def story(decision: ApprovalDecision) -> tuple[list[Record], dict[str, int]]:
    """A whole ledger: held in turn 1, decided between turns, resolved in turn 2,
    closed; and the seq of each approval milestone."""
    marks: dict[str, int] = {}

    def write(ledger: Ledger) -> None:
        first_turn(ledger, marks)
        marks["decided"] = ledger.next_seq
        ledger.approval_decided(decision)
        resolving_turn(ledger, 2, decision, marks)
        ledger.session_closed(30)

    return written(write), marks


def codes(derived: DerivedSession) -> dict[str, str]:
    return {result.tool_call_id: code for result, code in derived.closing_results()}


def open_calls(messages: list) -> set[str]:
    """The ids of the calls in ``messages`` that no result answers."""
    calls = {
        b.id
        for m in messages
        if type(m) is AssistantMessage
        for b in m.content
        if type(b) is ToolCall
    }
    return calls - {m.tool_call_id for m in messages if hasattr(m, "tool_call_id")}


@pytest.mark.parametrize("decision", [APPROVE, EDIT, REJECT], ids=["approve", "edit", "reject"])
def test_request_decide_and_resolve_across_turns(decision):
    records, marks = story(decision)
    assert [type(records[marks[k]]) for k in ("requested", "decided")] == [
        ApprovalRequestedRecord,
        ApprovalDecidedRecord,
    ]
    derived = derive(records)
    assert derived.pending_approvals == () and derived.decisions == {}
    assert derived.closing_results() == [] and derived.closed and derived.turns == 2
    validate_transcript(derived.messages)  # every call answered, once
    results = {m.tool_call_id: m for m in derived.messages if hasattr(m, "tool_call_id")}
    assert results[A.id].is_error is not decision.approved
    assert [type(m).__name__ for m in derived.messages] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",  # B's and A's, in call order: A first
        "ToolResultMessage",
        "AssistantMessage",
    ]
    assert derived.messages[2].tool_call_id == A.id


def test_the_records_carry_the_call_and_the_whole_decision():
    records, marks = story(EDIT)
    requested, decided = records[marks["requested"]], records[marks["decided"]]
    assert requested == ApprovalRequestedRecord(
        seq=marks["requested"], turn=1, call_id=A.id, name=A.name, arguments=A.arguments
    )
    assert requested.call == A
    assert decided.decision == EDIT
    assert ApprovalDecidedRecord.of(7, APPROVE).decision == APPROVE


def test_held_calls_are_pending_in_request_order_with_their_decisions():
    c = ToolCall("call-c", "run", {"command": "ls"})
    asking = AssistantMessage("message-r1", (A, B, c))

    def write(ledger: Ledger) -> None:
        ledger.session_started("s1", 0.0, "")
        ledger.turn_started(1, 0)
        ledger.message(USER)
        ledger.step_started("request-001")
        ledger.message(asking)
        ledger.approval_requested(c)  # asked for in this order
        ledger.approval_requested(A)
        ledger.tool_call(B)
        ledger.message(tool_result(B, "42", False))
        ledger.step_ended("request-001", "tool_call")
        ledger.turn_ended(1, TurnAwaitingApproval(call_ids=(A.id, c.id)), 9)
        ledger.approval_decided(ApprovalDecision(call_id=c.id, approved=False))

    derived = derive(written(write))
    assert derived.pending_approvals == (c, A)
    assert derived.decisions == {c.id: ApprovalDecision(call_id=c.id, approved=False)}
    assert derived.closing_results() == []
    assert open_calls(derived.closed_messages()) == {A.id, c.id}
    # the conversation a resume goes on from: the held calls open, results welcome
    conversation = derived.closed_conversation()
    assert conversation.messages == derived.closed_messages()
    assert list(conversation.linker.open_calls) == [A.id, c.id]  # call order
    conversation.append(tool_result(A, "rejected", True))
    conversation.append(tool_result(c, "ran", False))
    validate_transcript(conversation.messages)


def expected_at(n: int, marks: dict[str, int], decision: ApprovalDecision):
    """What ``records[:n]`` says of A: pending, its decision, its closing code."""
    until = marks["dispatched"] if decision.approved else marks["result"]
    pending = marks["requested"] < n <= until
    decided = pending and marks["decided"] < n
    code = None
    if marks["requested"] - 1 < n <= marks["requested"]:  # its message, no request yet
        code = TOOL_NOT_STARTED
    elif decision.approved and marks["dispatched"] < n <= marks["result"]:
        code = TOOL_OUTCOME_UNKNOWN  # dispatched, never again
    return pending, decided, code


@pytest.mark.parametrize("decision", [APPROVE, EDIT, REJECT], ids=["approve", "edit", "reject"])
async def test_every_prefix_derives_and_resumes_to_what_it_says(decision):
    records, marks = story(decision)
    lines = [record_encoder.encode(r) + b"\n" for r in records]
    for n in range(1, len(records) + 1):
        derived = derive(records[:n])
        pending, decided, code = expected_at(n, marks, decision)
        assert derived.pending_approvals == ((A,) if pending else ()), n
        assert derived.decisions == ({A.id: decision} if decided else {}), n
        assert codes(derived).get(A.id) == code, n
        # closed_messages (what Agent.resume starts from) leaves only held calls open
        closed = derived.closed_messages()
        assert open_calls(closed) == ({A.id} if pending else set()), n
        await resume_and_finish(lines[:n], derived, decision, code)


async def resume_and_finish(
    lines: list[bytes], derived: DerivedSession, decision: ApprovalDecision, code: str | None
) -> None:
    """Take the prefix over (as ``Agent.resume`` does), check the held call is kept
    with its decision, then resolve it: it is answered exactly once."""
    memory = KeptLines()
    memory.lines = list(lines)
    ledger, closing = await Ledger.take_over(memory, derived, "step")
    assert {result.tool_call_id: c for result, c in closing}.get(A.id) == code
    again = derive(records_of(memory.lines))
    assert again.pending_approvals == derived.pending_approvals
    assert again.decisions == derived.decisions
    assert again.open_turn is None and again.closing_results() == []
    if again.pending_approvals:
        if A.id not in again.decisions:
            ledger.approval_decided(decision)
        resolving_turn(ledger, again.turns + 1, decision, {})
    elif code == TOOL_OUTCOME_UNKNOWN:  # never dispatched twice: the ledger refuses it
        ledger.tool_call(A)
        with pytest.raises(LedgerCorruptError, match="not an open call"):
            derive(records_of(memory.lines))
        return
    done = derive(records_of(memory.lines))
    assert done.pending_approvals == () and done.decisions == {}
    validate_transcript(done.messages)  # every call answered
    answers = [m for m in done.messages if getattr(m, "tool_call_id", None) == A.id]
    assert len(answers) == (1 if ASKING in done.messages else 0)  # once, whatever happened


def held_then(write_more: Callable[[Ledger], None]) -> DerivedSession:
    """A held, B open, then ``write_more``; derived (the writer died there)."""

    def write(ledger: Ledger) -> None:
        asking_step(ledger)
        ledger.approval_requested(A)
        write_more(ledger)

    return derive(written(write))


def test_a_crash_during_the_step_closes_the_other_calls_and_keeps_the_held_one():
    derived = held_then(lambda ledger: ledger.tool_call(B))  # died while B ran
    assert derived.pending_approvals == (A,) and derived.open_turn == 1
    assert codes(derived) == {B.id: TOOL_OUTCOME_UNKNOWN}
    closed = derived.closed_messages()
    assert [m.tool_call_id for m in closed[2:]] == [B.id] and open_calls(closed) == {A.id}


def decided_and(decision: ApprovalDecision, *more: str) -> DerivedSession:
    """A held and decided between turns, then the next turn does ``more``."""

    def write(ledger: Ledger) -> None:
        ledger.tool_call(B)
        ledger.message(tool_result(B, "42", False))
        ledger.step_ended("request-001", "tool_call")
        ledger.turn_ended(1, TurnAwaitingApproval(call_ids=(A.id,)), 9)
        ledger.approval_decided(decision)
        ledger.turn_started(2, 10)
        for what in more:
            if what == "failed":
                ledger.tool_failed(A, "disk full")
            else:
                getattr(ledger, f"tool_{what}")(A)

    return held_then(write)


@pytest.mark.parametrize(
    ("more", "code"),
    [
        (("call",), TOOL_OUTCOME_UNKNOWN),
        (("call", "cancelled"), TOOL_CANCELLED),
        (("call", "failed"), TOOL_FATAL),
    ],
)
def test_an_approved_call_dispatched_without_a_result_is_closed_as_any_call(more, code):
    derived = decided_and(APPROVE, *more)
    assert derived.pending_approvals == () and derived.decisions == {}
    assert codes(derived) == {A.id: code}
    validate_transcript(derived.closed_messages())


@pytest.mark.parametrize("more", [(), ("call", "skipped")], ids=["not-yet", "skipped"])
def test_an_approved_call_not_dispatched_stays_pending_with_its_decision(more):
    derived = decided_and(APPROVE, *more)
    assert derived.pending_approvals == (A,) and derived.decisions == {A.id: APPROVE}
    assert codes(derived) == {} and open_calls(derived.closed_messages()) == {A.id}


def test_a_rejected_call_not_answered_yet_stays_pending_with_its_rejection():
    derived = decided_and(REJECT)
    assert derived.pending_approvals == (A,) and derived.decisions == {A.id: REJECT}
    assert codes(derived) == {}


def test_a_held_call_may_be_answered_as_interrupted_without_a_decision():
    def write(ledger: Ledger) -> None:  # a cancelled turn answers what it left open
        ledger.message(tool_result(B, "interrupted: no result was recorded", True))
        ledger.message(tool_result(A, "interrupted: no result was recorded", True))

    derived = held_then(write)
    assert derived.pending_approvals == () and derived.closing_results() == []


def test_compaction_forgets_held_calls():
    def write(ledger: Ledger) -> None:
        ledger.message(tool_result(B, "42", False))
        ledger.message(tool_result(A, "interrupted", True))
        ledger.compacted((USER, DONE))

    assert held_then(write).pending_approvals == ()


def corrupt_cases() -> dict[str, tuple[Callable[[Ledger], Any], str]]:
    def between_turns(ledger: Ledger, decision: ApprovalDecision | None = None) -> None:
        asking_step(ledger)
        ledger.approval_requested(A)
        ledger.step_ended("request-001", "tool_call")
        ledger.turn_ended(1, TurnAwaitingApproval(call_ids=(A.id,)), 9)
        if decision is not None:
            ledger.approval_decided(decision)
        ledger.turn_started(2, 10)

    def steps(*writes: Callable[[Ledger], Any]) -> Callable[[Ledger], None]:
        def write(ledger: Ledger) -> None:
            for one in writes:
                one(ledger)

        return write

    held = steps(asking_step, lambda led: led.approval_requested(A))
    deep: Any = "x"
    for _ in range(MAX_ARGUMENT_DEPTH + 1):
        deep = [deep]
    return {
        "decided-unknown-call": (
            steps(
                held,
                lambda led: led.approval_decided(ApprovalDecision(call_id="call-z", approved=True)),
            ),
            "not waiting for approval",
        ),
        "decided-not-requested": (
            steps(asking_step, lambda led: led.approval_decided(APPROVE)),
            "not waiting for approval",
        ),
        "decided-twice": (
            steps(
                held,
                lambda led: led.approval_decided(APPROVE),
                lambda led: led.approval_decided(REJECT),
            ),
            "a second approval/decided",
        ),
        "decided-after-its-result": (
            steps(
                held,
                lambda led: led.approval_decided(REJECT),
                lambda led: led.message(tool_result(A, "rejected", True)),
                lambda led: led.approval_decided(APPROVE),
            ),
            "not waiting for approval",
        ),
        "decided-with-arguments-past-the-limits": (
            steps(
                held,
                lambda led: led.approval_decided(
                    ApprovalDecision(call_id=A.id, approved=True, arguments={"path": deep})
                ),
            ),
            "arguments",
        ),
        "requested-outside-a-step": (
            steps(
                asking_step,
                lambda led: led.step_ended("request-001", "tool_call"),
                lambda led: led.approval_requested(A),
            ),
            "outside a step",
        ),
        "requested-twice": (steps(held, lambda led: led.approval_requested(A)), "a second"),
        "requested-for-no-call": (
            steps(asking_step, lambda led: led.approval_requested(ToolCall("call-z", "run", {}))),
            "not an open call",
        ),
        "requested-for-a-dispatched-call": (
            steps(asking_step, lambda led: led.tool_call(B), lambda led: led.approval_requested(B)),
            "already dispatched",
        ),
        "requested-with-other-arguments": (
            steps(
                asking_step,
                lambda led: led.approval_requested(ToolCall(A.id, A.name, {"path": "/etc"})),
            ),
            "another tool or arguments",
        ),
        "requested-for-another-tool": (
            steps(
                asking_step, lambda led: led.approval_requested(ToolCall(A.id, "run", A.arguments))
            ),
            "another tool or arguments",
        ),
        "dispatched-undecided": (steps(held, lambda led: led.tool_call(A)), "was not approved"),
        "dispatched-undecided-in-a-later-turn": (
            steps(between_turns, lambda led: led.tool_call(A)),
            "was not approved",
        ),
        "dispatched-rejected": (
            steps(lambda led: between_turns(led, REJECT), lambda led: led.tool_call(A)),
            "was not approved",
        ),
        "new-input-while-held": (
            steps(between_turns, lambda led: led.message(UserMessage("user-2", "and?"))),
            "have no result",
        ),
    }


@pytest.mark.parametrize("name", sorted(corrupt_cases()))
def test_a_ledger_that_breaks_an_approval_rule_is_corrupt(name):
    write, match = corrupt_cases()[name]
    records = written(write)
    with pytest.raises(LedgerCorruptError, match=match):
        derive(records)
    derive(records[:-1])  # the last record is the one refused


def test_a_request_outside_a_turn_or_in_another_turn_is_corrupt():
    records = written(asking_step)

    def with_request(turn: int, end_turn: bool) -> list[Record]:
        more = list(records)
        if end_turn:
            more.append(TurnEndRecord(seq=len(more), turn=1, end=TurnCompleted(), sequence=2))
        request = ApprovalRequestedRecord(
            seq=len(more), turn=turn, call_id=A.id, name=A.name, arguments=A.arguments
        )
        return [*more, request]

    with pytest.raises(LedgerCorruptError, match="open turn is 1"):
        derive(with_request(2, end_turn=False))
    with pytest.raises(LedgerCorruptError, match="outside a turn"):
        derive(with_request(1, end_turn=True))


def test_the_ledger_refuses_to_write_a_request_outside_a_turn():
    memory = KeptLines()
    ledger = Ledger(memory, 0)
    ledger.session_started("s1", 0.0, "")
    with pytest.raises(RuntimeError, match="outside a turn"):
        ledger.approval_requested(A)
    assert ledger.next_seq == 1 and len(memory.lines) == 1


def make_store(kind: str, where: Path):
    return JsonlStore(where) if kind == "jsonl" else SqliteStore(where / "sessions.db")


async def store_lines(store, session_id: str, lines: list[bytes]) -> None:
    """Write ``lines`` as a session's, as a writer that died after them would."""
    writer = store.create(session_id)
    for line in lines:
        writer.append(line)
    await writer.flush(True)
    await writer.aclose()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_both_stores_keep_the_records_and_a_resume_keeps_the_held_call(tmp_path, kind):
    store = make_store(kind, tmp_path)
    try:
        records, marks = story(APPROVE)
        lines = [record_encoder.encode(r) + b"\n" for r in records]
        await store_lines(store, "whole", lines)
        assert list((await store.load("whole")).records) == records
        # died between the decision and the dispatch: a resume keeps A, approved
        await store_lines(store, "s1", lines[: marks["dispatched"]])
        loaded = await store.load("s1")
        derived = derive(loaded.records)
        ledger, closing = await Ledger.take_over(store.reopen(loaded), derived, "step")
        await ledger.aclose()
        assert closing == []
        again = derive((await store.load("s1")).records)
        assert again.pending_approvals == (A,) and again.decisions == {A.id: APPROVE}
        ends = [r.end for r in (await store.load("s1")).records if type(r) is TurnEndRecord]
        assert ends[-1].reason == "interrupted"
        # died after the dispatch: A is answered as unknown, once, durably
        await store_lines(store, "s2", lines[: marks["dispatched"] + 1])
        loaded = await store.load("s2")
        ledger, closing = await Ledger.take_over(
            store.reopen(loaded), derive(loaded.records), "step"
        )
        await ledger.aclose()
        assert [(r.tool_call_id, c) for r, c in closing] == [(A.id, TOOL_OUTCOME_UNKNOWN)]
        after = (await store.load("s2")).records
        assert [r.code for r in after if type(r) is ToolResultRecord][-1] == TOOL_OUTCOME_UNKNOWN
        assert derive(after).pending_approvals == ()
    finally:
        if isinstance(store, SqliteStore):
            await store.aclose()


async def test_the_jsonl_bytes_round_trip(tmp_path):
    store = JsonlStore(tmp_path)
    records, _ = story(EDIT)
    await store_lines(store, "s1", [record_encoder.encode(r) + b"\n" for r in records])
    data = (tmp_path / "s1.jsonl").read_bytes()
    loaded = await store.load("s1")
    assert encode_records(loaded.records) == data
    for record in loaded.records:
        assert record_decoder.decode(record_encoder.encode(record)) == record


def test_a_decision_that_does_not_say_approved_is_a_rejection():
    line = b'{"kind":"approval/decided","seq":3,"call_id":"call-a"}'
    record = record_decoder.decode(line)
    assert record.decision == ApprovalDecision(call_id="call-a", approved=False)


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_old_ledgers_load_with_nothing_pending(tmp_path, kind):
    old = LEDGERS
    name = "pre15.jsonl" if kind == "jsonl" else "pre15.db"
    shutil.copy(old / name, tmp_path / name)
    store = JsonlStore(tmp_path) if kind == "jsonl" else SqliteStore(tmp_path / name)
    try:
        derived = derive((await store.load("pre15")).records)
    finally:
        if isinstance(store, SqliteStore):
            await store.aclose()
    assert derived.pending_approvals == () and derived.decisions == {}
    assert derived.closing_results() == []


async def show_of(tmp_path: Path, records: list[Record], capsys, as_json: bool = False) -> str:
    await store_lines(
        JsonlStore(tmp_path), "s1", [record_encoder.encode(r) + b"\n" for r in records]
    )
    assert show(argparse.Namespace(ledger=str(tmp_path / "s1.jsonl"), json=as_json)) == 0
    return capsys.readouterr().out


async def test_show_lists_pending_approvals_with_their_decisions(tmp_path, capsys):
    c = ToolCall("call-c", "run", {"command": "rm -rf build"})

    def write(ledger: Ledger) -> None:
        ledger.session_started("s1", 0.0, "")
        ledger.turn_started(1, 0)
        ledger.message(USER)
        ledger.step_started("request-001")
        ledger.message(AssistantMessage("message-r1", (A, c)))
        ledger.approval_requested(A)
        ledger.approval_requested(c)
        ledger.step_ended("request-001", "tool_call")
        ledger.turn_ended(1, TurnAwaitingApproval(call_ids=(A.id, c.id)), 9)
        ledger.approval_decided(EDIT)

    out = await show_of(tmp_path, written(write), capsys)
    assert "  call call-a waits for approval" in out
    assert "approval: call call-a approved by ann" in out
    assert "waiting for approval: 2 call(s)" in out
    assert (
        '  call-a write_file({"path":"notes.txt","text":"hi"}): approved by ann, to run with '
        '{"path":"scratch/notes.txt","text":"hi"}'
    ) in out
    assert '  call-c run({"command":"rm -rf build"}): undecided' in out


async def test_show_says_nothing_of_approvals_once_resolved(tmp_path, capsys):
    records, _ = story(REJECT)
    out = await show_of(tmp_path, records, capsys)
    assert "approval: call call-a rejected by bob (not there)" in out
    assert "waiting for approval" not in out


async def test_show_json_carries_the_approval_records(tmp_path, capsys):
    records, marks = story(APPROVE)
    out = await show_of(tmp_path, records, capsys, as_json=True)
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[marks["requested"]]["record"]["kind"] == "approval/requested"
    decided = lines[marks["decided"]]["record"]
    assert decided == msgspec.to_builtins(records[marks["decided"]]) | {"kind": "approval/decided"}
    assert decided["approved"] is True and decided["by"] == "ann"
