"""Snapshots: the replay's state at a turn's end as one record (``snapshot``), and
the replay restored from one, so a resume replays the records after it, not the
whole ledger (the replay itself is ``_derive``'s ``Replay``, made of what
``restore`` returns). ``take`` and ``restore`` are inverse: ``derive`` of a snapshot and
the records after it is ``derive`` of the whole ledger (the property tests say so).

What a restored replay does not know: the ids of messages and calls that are no
longer in the transcript (compacted away). A live session and a full replay do
not know them either (compaction gives the transcript a new linker), so duplicate
checks are the same from a snapshot as from ``session/start``."""

from __future__ import annotations

import zlib
from typing import Any, Final, NamedTuple

import msgspec
from msgspec import Struct

from ..engine._transcript import Conversation
from ..events import ApprovalDecision
from ..messages._ir import Message, ToolCall, TranscriptError
from ..model import Usage
from ._derived import DerivedSession
from ._records import FORMAT_VERSION, LedgerCorruptError, SnapshotRecord

__all__ = ["Restored", "SnapshotState", "restore", "take"]


class SnapshotState(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a ``Replay`` holds between turns; ``next_seq`` is the snapshot
    record's own ``seq``. Calls are named by id; each must be open in
    ``messages`` (the calls of its last assistant message without a result)."""

    format: int
    session_id: str
    system: str = ""
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    messages: tuple[Message, ...] = ()
    turns: int = 0
    requests: int = 0
    sequence: int = 0
    next_seq: int = 1
    reserved: int = 0
    steps: int = 0
    tool_calls: int = 0
    model: str = ""
    usage: Usage = Usage()
    failed_usage: Usage = Usage()
    usage_by_model: dict[str, Usage] = msgspec.field(default_factory=dict)
    outputs: dict[int, Any] = msgspec.field(default_factory=dict)
    dispatched: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()
    failed: dict[str, str] = msgspec.field(default_factory=dict)
    effects: dict[str, str] = msgspec.field(default_factory=dict)
    rerunning: tuple[str, ...] = ()
    held: tuple[str, ...] = ()
    decided: tuple[ApprovalDecision, ...] = ()


_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder(SnapshotState)


class Restored(NamedTuple):
    """A snapshot's state as a ``Replay`` is made of (its arguments, in order)."""

    session: DerivedSession
    conversation: Conversation
    model: str
    held: dict[str, ToolCall]
    decided: dict[str, ApprovalDecision]


def take(
    session: DerivedSession,
    conversation: Conversation,
    model: str,
    held: dict[str, ToolCall],
    decided: dict[str, ApprovalDecision],
) -> SnapshotRecord:
    """The snapshot of a replay between turns (``Replay.take_snapshot``), numbered
    as the next record."""
    state = SnapshotState(
        format=FORMAT_VERSION,
        session_id=session.session_id,
        system=session.system,
        metadata=session.metadata,
        messages=tuple(conversation.messages),
        turns=session.turns,
        requests=session.requests,
        sequence=session.sequence,
        next_seq=session.next_seq,
        reserved=session.reserved,
        steps=session.steps,
        tool_calls=session.tool_calls,
        model=model,
        usage=session.usage,
        failed_usage=session.failed_usage,
        usage_by_model=session.usage_by_model,
        outputs=session.outputs,
        dispatched=tuple(sorted(session.dispatched)),
        cancelled=tuple(sorted(session.cancelled)),
        failed=session.failed,
        effects=session.effects,
        rerunning=tuple(sorted(session.rerunning)),
        held=tuple(held),
        decided=tuple(decided.values()),
    )
    encoded = _encoder.encode(state)
    return SnapshotRecord(
        seq=session.next_seq, state=msgspec.Raw(encoded), crc32=zlib.crc32(encoded)
    )


def restore(record: SnapshotRecord) -> Restored:
    """What a replay is made of at the snapshot (the snapshot itself still to be
    replayed: ``Replay(*restore(record)).feed(record)``). ``LedgerCorruptError``
    for a state that does not decode or does not hold together (a damaged
    snapshot), or whose bytes do not match their checksum.

    Its transcript's links and ids are checked as a replay checks them; each
    message's blocks are checked too unless the record's checksum says the state's
    bytes are those its session wrote (they were checked as they joined the live
    transcript), which is most of what a long transcript's resume cost. The
    checksum finds accidental damage, not a deliberate edit."""
    crc = record.crc32
    if crc is not None and zlib.crc32(record.state) != crc:
        raise LedgerCorruptError(f"snapshot {record.seq} does not match its checksum")
    try:
        state = _decoder.decode(record.state)
    except msgspec.DecodeError as exc:
        raise LedgerCorruptError(f"snapshot {record.seq} does not decode: {exc}") from None
    if state.format != FORMAT_VERSION:
        raise LedgerCorruptError(f"snapshot format {state.format} is not {FORMAT_VERSION}")
    if state.next_seq != record.seq:
        raise LedgerCorruptError(f"snapshot {record.seq} holds the state before {state.next_seq}")
    conversation = _conversation_of(record.seq, state.messages, trusted=crc is not None)
    session = _session(state, conversation)
    open_calls = conversation.linker.open_calls
    named = {
        *state.dispatched,
        *state.cancelled,
        *state.failed,
        *state.effects,
        *state.rerunning,
        *state.held,
    }
    strays = sorted(named - open_calls.keys())
    decided = {decision.call_id: decision for decision in state.decided}
    strays += sorted(decided.keys() - set(state.held))
    if strays:
        raise LedgerCorruptError(f"snapshot {record.seq} names calls that are not open: {strays}")
    held = {call_id: open_calls[call_id] for call_id in state.held}
    return Restored(session, conversation, state.model, held, decided)


def _conversation_of(seq: int, messages: tuple[Message, ...], trusted: bool) -> Conversation:
    """The transcript's conversation, checked as a replay checks it (``trusted``:
    its links and ids only)."""
    try:
        conversation = Conversation.restored(messages, trusted=trusted)
    except TranscriptError as exc:
        raise LedgerCorruptError(f"snapshot {seq}: {exc}") from None
    return conversation


def _session(state: SnapshotState, conversation: Conversation) -> DerivedSession:
    return DerivedSession(
        session_id=state.session_id,
        system=state.system,
        messages=conversation.messages,
        turns=state.turns,
        requests=state.requests,
        sequence=state.sequence,
        next_seq=state.next_seq,
        open_turn=None,
        dispatched=set(state.dispatched),
        usage=state.usage,
        failed_usage=state.failed_usage,
        cancelled=set(state.cancelled),
        failed=dict(state.failed),
        reserved=state.reserved,
        metadata=dict(state.metadata),
        outputs=dict(state.outputs),
        steps=state.steps,
        tool_calls=state.tool_calls,
        usage_by_model=dict(state.usage_by_model),
        effects=dict(state.effects),
        rerunning=set(state.rerunning),
        conversation=conversation,
    )
