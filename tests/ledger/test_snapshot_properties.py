"""Property tests of snapshots (issue 38): on random sessions (approvals, outputs,
usage, effects, cancelled and failed calls, compaction) cut anywhere, deriving
from any snapshot and the records after it gives what deriving the whole ledger
gives."""

from __future__ import annotations

from typing import Any

import attrs
import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_agent import (
    AssistantMessage,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    TurnCompleted,
    TurnInterrupted,
    UserMessage,
)
from trio_agent.ledger import (
    ApprovalDecidedRecord,
    ApprovalRequestedRecord,
    AttemptFailedRecord,
    CompactedRecord,
    DerivedSession,
    EventsReservedRecord,
    MessageRecord,
    OutputRecord,
    Record,
    SessionStartRecord,
    SnapshotRecord,
    StepEndRecord,
    StepStartRecord,
    ToolCallRecord,
    ToolCancelledRecord,
    ToolFailedRecord,
    ToolResultRecord,
    TurnEndRecord,
    TurnStartRecord,
    derive,
    encode_records,
)
from trio_agent.ledger._derive import replay_of
from trio_agent.model import Usage
from trio_agent.stores import parse_jsonl

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
usages = st.none() | st.builds(Usage, st.integers(0, 99), st.integers(0, 99))
labels = st.sampled_from(["", "a:one", "b:two"])


def same(left: DerivedSession, right: DerivedSession) -> None:
    """Every field of two derived sessions but the replay's conversation object."""
    for field in attrs.fields(DerivedSession):
        if field.name != "conversation":
            assert getattr(left, field.name) == getattr(right, field.name), field.name


@st.composite
def sessions(draw: Any) -> list[Record]:
    """Records as sessions write them, with a snapshot after some turn ends."""
    records: list[Record] = [
        SessionStartRecord(
            seq=0, format=1, session_id="s", created=0.0, system="sys", metadata={"k": 1}
        )
    ]
    ids = iter(range(10**6))
    held: list[ToolCall] = []
    decided: dict[str, bool] = {}
    reruns: list[ToolCall] = []  # dispatched, idempotent, no end: the writer died

    def add(make: Any, **fields: Any) -> None:
        records.append(make(seq=len(records), **fields))

    for turn in range(1, draw(st.integers(1, 4)) + 1):
        for call in held:  # between turns: a person decides, or not yet
            if call.id not in decided and draw(st.booleans()):
                decided[call.id] = draw(st.booleans())
                add(ApprovalDecidedRecord, call_id=call.id, approved=decided[call.id])
        add(TurnStartRecord, turn=turn, sequence=turn * 10, model=draw(labels))
        if held and len(decided) < len(held):  # an undecided call: the turn stops
            add(TurnEndRecord, turn=turn, end=TurnCompleted(), sequence=turn * 10 + 5)
            if draw(st.booleans()):
                records.append(replay_of(records).take_snapshot())
            continue
        for call in reruns:  # a resume left them open: they run again first
            add(ToolCallRecord, call_id=call.id, rerun=True)
            result = ToolResultMessage(f"r-{call.id}", call.id, call.name, "ok")
            add(ToolResultRecord, result=result)
        reruns = []
        for call in held:  # resolved: run if approved, an error result if rejected
            if decided[call.id]:
                add(ToolCallRecord, call_id=call.id)
            rejected = not decided[call.id]
            result = ToolResultMessage(f"r-{call.id}", call.id, call.name, "x", rejected)
            add(ToolResultRecord, result=result)
        held, decided = [], {}
        if draw(st.booleans()):
            add(EventsReservedRecord, until=turn * 10 + 1024)
        add(MessageRecord, message=UserMessage(f"u{next(ids)}", draw(text)))
        steps = draw(st.integers(0, 3))
        for step in range(steps):
            request = f"request-{next(ids):03d}"
            add(StepStartRecord, request_id=request)
            if draw(st.booleans()):
                add(
                    AttemptFailedRecord,
                    request_id=request,
                    attempt=1,
                    error="TransientModelError: 503",
                    retry_in=None,
                    usage=draw(usages),
                )
            calls = [
                ToolCall(f"c{next(ids)}", draw(st.sampled_from(["add", "final_result"])), {})
                for _ in range(draw(st.integers(0, 3)))
            ]
            message = AssistantMessage(f"m{next(ids)}", (TextBlock(draw(text)), *calls))
            add(MessageRecord, message=message, usage=draw(usages), model=draw(labels))
            last = step == steps - 1
            for call in calls:
                fates = ["result", "ended", *(["held", "held", "held", "open"] if last else [])]
                fate = draw(st.sampled_from(fates))
                if fate == "held":
                    add(ApprovalRequestedRecord, turn=turn, call_id=call.id, name=call.name,
                        arguments=call.arguments)  # fmt: skip
                    held.append(call)
                    continue
                if fate == "open":
                    add(ToolCallRecord, call_id=call.id, effect="idempotent")
                    reruns.append(call)
                    continue
                effect = draw(st.sampled_from(["once", "idempotent"]))
                add(ToolCallRecord, call_id=call.id, effect=effect)
                if fate == "ended":
                    if draw(st.booleans()):
                        add(ToolCancelledRecord, call_id=call.id)
                    else:
                        add(ToolFailedRecord, call_id=call.id, error="boom")
                result = ToolResultMessage(f"r-{call.id}", call.id, call.name, "ok", False)
                code = None if fate == "result" else "TOOL_FATAL"
                add(ToolResultRecord, result=result, code=code)
            add(StepEndRecord, request_id=request, stop_reason="tool_call" if calls else "stop")
        if reruns:  # a resume ends the turn the writer died in
            add(TurnEndRecord, turn=turn, end=TurnInterrupted(), sequence=turn * 10 + 5)
            if draw(st.booleans()):
                records.append(replay_of(records).take_snapshot())
            continue
        if steps and not held and draw(st.booleans()):
            add(OutputRecord, turn=turn, request_id="request-001", output={"n": turn})
        end = draw(st.sampled_from([TurnCompleted(), TurnInterrupted()]))
        add(TurnEndRecord, turn=turn, end=end, sequence=turn * 10 + 5)
        if draw(st.booleans()):
            records.append(replay_of(records).take_snapshot())
        if not held and draw(st.booleans()):
            add(CompactedRecord, messages=(UserMessage(f"summary-{next(ids)}", draw(text)),))
    return records


def same_links(left: DerivedSession, right: DerivedSession) -> None:
    """What the two transcripts check the next messages against: ids (as sets: a
    replay adds a result's id as it comes, the transcript holds results in call
    order) and open calls."""
    one, other = left.conversation.linker, right.conversation.linker
    assert set(one.message_ids) == set(other.message_ids)
    assert set(one.call_ids) == set(other.call_ids)
    assert one.open_calls == other.open_calls and list(one.open_calls) == list(other.open_calls)
    assert one.count == other.count


@settings(max_examples=300, deadline=None)
@given(sessions(), st.data())
def test_any_snapshot_then_its_tail_derives_as_the_whole_ledger(records, data):
    cut = data.draw(st.integers(1, len(records)))
    prefix = records[:cut]
    whole = derive(prefix)
    for index, record in enumerate(prefix):
        if type(record) is SnapshotRecord:
            assert record.crc32 is not None  # restored as the checksum allows: trusted
            tail = parse_jsonl("s", encode_records(prefix[index:]), first_seq=None)
            derived = derive(tail.records)
            same(derived, whole)
            same_links(derived, whole)
            assert whole.closing_results() == derive(prefix[index:]).closing_results()
            # an older ledger's snapshot (no checksum): every message checked, same state
            older = [msgspec.structs.replace(record, crc32=None), *prefix[index + 1 :]]
            checked = derive(older)
            same(checked, whole)
            same_links(checked, whole)


def test_a_snapshot_keeps_the_decision_on_a_call_still_held():
    """A snapshot dropped the decision on one of two held calls when the other was
    still undecided (the property test rarely draws it)."""
    calls = [ToolCall("c1", "add", {}), ToolCall("c2", "add", {})]
    records: list[Record] = [SessionStartRecord(seq=0, format=1, session_id="s", created=0.0)]

    def add(make: Any, **fields: Any) -> None:
        records.append(make(seq=len(records), **fields))

    add(TurnStartRecord, turn=1, sequence=0)
    add(MessageRecord, message=UserMessage("u1", "go"))
    add(StepStartRecord, request_id="request-001")
    add(MessageRecord, message=AssistantMessage("m1", tuple(calls)))
    for call in calls:
        add(ApprovalRequestedRecord, turn=1, call_id=call.id, name="add", arguments={})
    add(StepEndRecord, request_id="request-001", stop_reason="tool_call")
    add(TurnEndRecord, turn=1, end=TurnCompleted(), sequence=5)
    add(ApprovalDecidedRecord, call_id="c1", approved=True, reason="fine")
    add(TurnStartRecord, turn=2, sequence=5)
    add(TurnEndRecord, turn=2, end=TurnCompleted(), sequence=7)
    records.append(replay_of(records).take_snapshot())
    whole, tail = derive(records), derive(records[-1:])
    same(tail, whole)
    assert set(tail.decisions) == {"c1"} and tail.decisions["c1"].reason == "fine"
