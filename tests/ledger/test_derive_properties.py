"""Property tests of the ledger: for random valid record sequences, encoding and
deriving are lossless, and any prefix derives a transcript that repairs into a
valid one (issue 4)."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_agent import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    TurnBlocked,
    TurnCancelled,
    TurnCompleted,
    TurnContentFilter,
    TurnFailed,
    TurnInterrupted,
    TurnLength,
    TurnMaxSteps,
    TurnRefusal,
    TurnRepeatedFailure,
    TurnTokenBudget,
    UserMessage,
    repair_transcript,
    validate_transcript,
)
from trio_agent.ledger import (
    AttemptFailedRecord,
    CompactedRecord,
    MessageRecord,
    SessionStartRecord,
    StepEndRecord,
    StepStartRecord,
    ToolCallRecord,
    ToolResultRecord,
    TurnEndRecord,
    TurnStartRecord,
    derive,
    encode_records,
)
from trio_agent.stores import parse_jsonl
from trio_agent.testing.strategies import contents, thinking_blocks

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | text
    | st.floats(allow_nan=False, allow_infinity=False)
)
turn_ends = st.sampled_from(
    [
        TurnCompleted(),
        TurnLength(),
        TurnRefusal(),
        TurnContentFilter(),
        TurnMaxSteps(max_steps=3),
        TurnCancelled(),
        TurnInterrupted(),
        TurnBlocked(detail="policy"),
        TurnFailed(code="MODEL_ERROR", detail="x"),
        TurnTokenBudget(used=10, limit=5),
        TurnRepeatedFailure(tool_name="run", count=3),
    ]
)
arguments = st.dictionaries(text, st.lists(json_leaf, max_size=3) | json_leaf, max_size=3)


@st.composite
def sessions(draw):
    """A record sequence as a session would write it: turns of steps of tool batches."""
    records = [SessionStartRecord(seq=0, format=1, session_id="s", created=0.0, system="")]

    def add(make, **fields):
        records.append(make(seq=len(records), **fields))

    ids = iter(range(10**6))
    for turn in range(1, draw(st.integers(1, 3)) + 1):
        add(TurnStartRecord, turn=turn, sequence=0)
        add(MessageRecord, message=UserMessage(f"u{next(ids)}", draw(contents())))
        for _ in range(draw(st.integers(0, 3))):
            request = f"request-{next(ids):03d}"
            add(StepStartRecord, request_id=request)
            for attempt in range(1, draw(st.integers(0, 2)) + 1):
                add(
                    AttemptFailedRecord,
                    request_id=request,
                    attempt=attempt,
                    error="TransientModelError: 503",
                    retry_in=draw(st.none() | st.floats(0, 10)),
                )
            calls = [
                ToolCall(
                    f"c{next(ids)}", draw(st.sampled_from(["add", "read", "run"])), draw(arguments)
                )
                for _ in range(draw(st.integers(0, 3)))
            ]
            thinking = draw(st.lists(thinking_blocks(), max_size=2))
            blocks = thinking + ([TextBlock(draw(text))] if draw(st.booleans()) else []) + calls
            add(MessageRecord, message=AssistantMessage(f"m{next(ids)}", tuple(blocks)))
            for call in calls:
                dispatched = draw(st.booleans())
                if dispatched:
                    add(ToolCallRecord, call_id=call.id)
                code = draw(st.sampled_from([None, "TOOL_NOT_STARTED", "TOOL_OUTCOME_UNKNOWN"]))
                result = ToolResultMessage(
                    f"tool-result-{call.id}",
                    call.id,
                    call.name,
                    draw(contents()),
                    draw(st.booleans()),
                )
                add(ToolResultRecord, result=result, code=code)
            stops = ["tool_call"] if calls else ["stop", "length", "refusal", "content_filter"]
            add(StepEndRecord, request_id=request, stop_reason=draw(st.sampled_from(stops)))
        add(TurnEndRecord, turn=turn, end=draw(turn_ends), sequence=0)
        if draw(st.booleans()):  # compaction between turns: a summary replaces the history
            add(CompactedRecord, messages=(UserMessage(f"summary-{next(ids)}", draw(text)),))
    return records


@settings(max_examples=200, deadline=None)
@given(sessions())
def test_encoding_and_deriving_are_lossless(records):
    data = encode_records(records)
    loaded = parse_jsonl("s", data)
    assert list(loaded.records) == records and loaded.warnings == ()
    derived = derive(loaded.records)
    stored: list = []
    for r in records:
        if isinstance(r, MessageRecord | ToolResultRecord):
            stored.append(r.message if isinstance(r, MessageRecord) else r.result)
        elif isinstance(r, CompactedRecord):
            stored = list(r.messages)
    assert derived.messages == stored
    validate_transcript(derived.messages)
    assert encode_records(list(loaded.records)) == data  # re-encoding gives the same bytes
    again = msgspec.json.decode(msgspec.json.encode(derived.messages), type=list[Message])
    assert again == derived.messages


@settings(max_examples=100, deadline=None)
@given(sessions(), st.data())
def test_any_prefix_derives_a_repairable_transcript(records, data):
    cut = data.draw(st.integers(1, len(records)))
    prefix = records[:cut]
    derived = derive(prefix)
    validate_transcript(repair_transcript(derived.messages))
    closed = derived.messages + [result for result, _ in derived.closing_results()]
    validate_transcript(closed)
    # a call is 'outcome unknown' exactly when its tool/call was recorded
    for result, code in derived.closing_results():
        assert (code == "TOOL_OUTCOME_UNKNOWN") == (result.tool_call_id in derived.dispatched)


@settings(max_examples=50, deadline=None)
@given(sessions(), st.data())
def test_a_torn_tail_of_any_length_loads_the_whole_lines(records, data):
    encoded = encode_records(records)
    last = encode_records(records[-1:])
    keep = data.draw(st.integers(1, len(last) - 1))  # a partial last line
    loaded = parse_jsonl("s", encoded[: len(encoded) - len(last)] + last[:keep])
    assert list(loaded.records) == records[:-1]
    assert len(loaded.warnings) == 1
