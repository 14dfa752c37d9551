"""Replaying a session's records: the transcript and counters they give.

The transcript is never stored on its own: ``derive`` rebuilds it from the
records, checking each one against what can appear where (``Replay``), so a
ledger that was spliced, concatenated or edited is refused as corrupt
instead of being half understood. A replay starts from ``session/start`` or
from a ``snapshot`` (``_snapshot``): either gives the same ``DerivedSession``
(``_derived``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, final

from ..engine._transcript import Conversation
from ..events import ApprovalDecision
from ..limits import OUTPUT_TOOL_NAME, ArgumentsError, check_arguments
from ..messages._ir import Message, ToolCall, TranscriptError
from ._derived import NO_USAGE
from ._derived import TOOL_CANCELLED as TOOL_CANCELLED
from ._derived import TOOL_FATAL as TOOL_FATAL
from ._derived import TOOL_NOT_STARTED as TOOL_NOT_STARTED
from ._derived import TOOL_OUTCOME_UNKNOWN as TOOL_OUTCOME_UNKNOWN
from ._derived import DerivedSession as DerivedSession
from ._derived import add_usage as add_usage
from ._derived import closing_result as closing_result
from ._records import (
    FORMAT_VERSION,
    ApprovalDecidedRecord,
    ApprovalRequestedRecord,
    AttemptFailedRecord,
    CompactedRecord,
    EventsReservedRecord,
    LedgerCorruptError,
    MessageRecord,
    OutputRecord,
    Record,
    SessionClosedRecord,
    SessionStartRecord,
    SnapshotRecord,
    StepEndRecord,
    StepStartRecord,
    ToolCallRecord,
    ToolCancelledRecord,
    ToolFailedRecord,
    ToolResultRecord,
    ToolSkippedRecord,
    TurnEndRecord,
    TurnStartRecord,
)
from ._snapshot import restore, take

__all__ = [
    "TOOL_CANCELLED",
    "TOOL_FATAL",
    "TOOL_NOT_STARTED",
    "TOOL_OUTCOME_UNKNOWN",
    "DerivedSession",
    "Replay",
    "add_usage",
    "closing_result",
    "derive",
    "derive_own",
    "replay_of",
]


@final
class Replay:
    """The records' rules, one method per kind. Between turns, in a turn, in a step
    of a turn: each record is refused where it cannot be. Made from a
    ``session/start`` (``started``) or from a snapshot's state
    (``_snapshot.restore``)."""

    def __init__(
        self,
        session: DerivedSession,
        conversation: Conversation,
        model: str = "",
        held: dict[str, ToolCall] | None = None,
        decided: dict[str, ApprovalDecision] | None = None,
    ) -> None:
        self.conversation = conversation  # the live transcript's own rules
        self.session = session
        self.step: str | None = None  # the open step's request id
        self.model = model  # the open (or last) turn's model (its label)
        self.step_usage = False  # the open step's response recorded its usage
        # Calls held for approval and not answered yet, in request order, and the
        # decisions on them.
        self.held: dict[str, ToolCall] = {} if held is None else held
        self.decided: dict[str, ApprovalDecision] = {} if decided is None else decided
        # the messages were checked when they joined a live transcript (a ledger's
        # own replay, for its snapshots): only their links and ids are checked again
        self.trusted = False

    @classmethod
    def started(cls, start: SessionStartRecord) -> Replay:
        """The replay of a session from its ``session/start``."""
        if start.format != FORMAT_VERSION:
            raise LedgerCorruptError(f"ledger format {start.format} is not {FORMAT_VERSION}")
        if start.seq != 0:
            raise LedgerCorruptError(f"record seq {start.seq} where 0 was expected")
        conversation = Conversation.from_messages(())
        session = DerivedSession(
            session_id=start.session_id,
            system=start.system,
            messages=conversation.messages,
            turns=0,
            requests=start.first_request - 1,
            sequence=start.first_sequence,
            next_seq=1,
            open_turn=None,
            dispatched=set(),
            metadata=dict(start.metadata),
            conversation=conversation,
        )
        return cls(session, conversation)

    # -- rules shared by several kinds
    def _in_turn(self, what: str) -> None:
        if self.session.open_turn is None:
            raise LedgerCorruptError(f"{what} outside a turn")

    def _in_step(self, what: str, request_id: str) -> None:
        if self.step != request_id:
            raise LedgerCorruptError(
                f"{what} for {request_id} where the open step is {self.step or 'none'}"
            )

    def _open_call(self, what: str, call_id: str, dispatched: bool) -> None:
        if call_id not in self.conversation.linker.open_calls:
            raise LedgerCorruptError(f"{what} for call {call_id!r}, which is not an open call")
        if (call_id in self.session.dispatched) != dispatched:
            said = "not dispatched" if dispatched else "already dispatched"
            raise LedgerCorruptError(f"{what} for call {call_id!r}, which is {said}")

    def _message(self, message: Message) -> None:
        conversation = self.conversation
        conversation.append(message if self.trusted else conversation.check_new(message))

    # -- one method per kind
    def session_start(self, record: SessionStartRecord) -> None:
        raise LedgerCorruptError("a second session/start (two ledgers joined?)")

    def session_closed(self, record: SessionClosedRecord) -> None:
        if self.session.open_turn is not None:
            raise LedgerCorruptError(f"session/closed inside turn {self.session.open_turn}")
        self.session.sequence = record.sequence

    def events_reserved(self, record: EventsReservedRecord) -> None:
        self.session.reserved = max(self.session.reserved, record.until)

    def turn_start(self, record: TurnStartRecord) -> None:
        session = self.session
        if session.open_turn is not None:
            raise LedgerCorruptError(
                f"turn/start of turn {record.turn} inside turn {session.open_turn}"
            )
        if record.turn != session.turns + 1:
            raise LedgerCorruptError(f"turn/start of turn {record.turn} after {session.turns}")
        session.turns = session.open_turn = record.turn
        session.sequence = record.sequence
        self.model = record.model

    def turn_end(self, record: TurnEndRecord) -> None:
        if record.turn != self.session.open_turn:
            raise LedgerCorruptError(
                f"turn/end of turn {record.turn} where the open turn is "
                f"{self.session.open_turn or 'none'}"
            )
        self.session.open_turn = None
        self.session.sequence = record.sequence
        self.step = None
        # a call run again that has no end when its turn ends (its writer died in it)
        # is owed again, as after its first dispatch
        self.session.rerunning.clear()

    def step_start(self, record: StepStartRecord) -> None:
        self._in_turn("step/start")
        if self.step is not None:
            raise LedgerCorruptError(f"step/start of {record.request_id} inside {self.step}")
        self.step, self.step_usage = record.request_id, False
        self.session.requests += 1
        self.session.steps += 1

    def step_end(self, record: StepEndRecord) -> None:
        self._in_step("step/end", record.request_id)
        if record.usage is not None and not self.step_usage:  # an older ledger
            self.session.usage = add_usage(self.session.usage, record.usage)
        self.step = None

    def attempt_failed(self, record: AttemptFailedRecord) -> None:
        self._in_step("attempt/failed", record.request_id)
        if record.usage is not None:
            self.session.failed_usage = add_usage(self.session.failed_usage, record.usage)

    def message(self, record: MessageRecord) -> None:
        self._message(record.message)
        if record.usage is not None:
            session = self.session
            session.usage = add_usage(session.usage, record.usage)
            label = record.model or self.model
            by_model = session.usage_by_model
            by_model[label] = add_usage(by_model.get(label, NO_USAGE), record.usage)
            self.step_usage = True

    def tool_call(self, record: ToolCallRecord) -> None:
        if record.rerun:
            self._rerun(record.call_id)
            return
        self._open_call("tool/call", record.call_id, dispatched=False)
        if record.effect != "once":
            self.session.effects[record.call_id] = record.effect
        if record.call_id in self.held and not self._approved(record.call_id):
            raise LedgerCorruptError(
                f"tool/call for call {record.call_id!r}, which is held for approval and "
                "was not approved"
            )
        self.session.dispatched.add(record.call_id)
        if self._counted(record.call_id):
            self.session.tool_calls += 1

    def _rerun(self, call_id: str) -> None:
        """A call dispatched again after a resume: its first dispatch has no end, and
        its effect lets it run twice."""
        session = self.session
        self._open_call("tool/call (rerun)", call_id, dispatched=True)
        if call_id not in session.effects:
            raise LedgerCorruptError(f"tool/call runs call {call_id!r} again, whose effect is once")
        if call_id in session.cancelled or call_id in session.failed:
            raise LedgerCorruptError(f"tool/call runs call {call_id!r} again after it ended")
        if call_id in session.rerunning:
            raise LedgerCorruptError(f"tool/call runs call {call_id!r} again while it runs")
        if call_id in self.held and not self._approved(call_id):
            raise LedgerCorruptError(
                f"tool/call runs call {call_id!r} again, which is held for approval and "
                "was not approved"
            )
        session.rerunning.add(call_id)

    def tool_skipped(self, record: ToolSkippedRecord) -> None:
        self._open_call("tool/skipped", record.call_id, dispatched=True)
        if record.call_id in self.session.rerunning:  # its first dispatch's outcome: unknown
            self.session.rerunning.discard(record.call_id)
            return
        # never started: not owed a run again (its effect is moot), answered as a
        # call never dispatched, as the live session's next turn answers it
        self.session.dispatched.discard(record.call_id)
        self.session.effects.pop(record.call_id, None)
        if self._counted(record.call_id):
            self.session.tool_calls -= 1

    def _counted(self, call_id: str) -> bool:
        """Whether an open call counts as a tool call (the output tool's does not)."""
        call = self.conversation.linker.open_calls.get(call_id)
        return call is not None and call.name != OUTPUT_TOOL_NAME

    def tool_cancelled(self, record: ToolCancelledRecord) -> None:
        self._open_call("tool/cancelled", record.call_id, dispatched=True)
        self.session.cancelled.add(record.call_id)

    def tool_failed(self, record: ToolFailedRecord) -> None:
        self._open_call("tool/failed", record.call_id, dispatched=True)
        self.session.failed[record.call_id] = record.error

    def tool_result(self, record: ToolResultRecord) -> None:
        # recorded as calls complete; placed in call order, as live
        result = record.result  # a held call's (rejected, or blocked: any after_tool_call)
        self._message(result)
        self._forget(result.tool_call_id)

    def approval_requested(self, record: ApprovalRequestedRecord) -> None:
        # in the step whose response made the call, before its turn ends; or, for a
        # call owed a rerun, in the turn that would run it again (``_owed_again``)
        self._in_turn("approval/requested")
        if record.turn != self.session.open_turn:
            raise LedgerCorruptError(
                f"approval/requested in turn {record.turn} where the open turn is "
                f"{self.session.open_turn}"
            )
        if not self._owed_again(record.call_id):
            if self.step is None:
                raise LedgerCorruptError("approval/requested outside a step")
            self._open_call("approval/requested", record.call_id, dispatched=False)
        if record.call_id in self.held:
            raise LedgerCorruptError(f"a second approval/requested for call {record.call_id!r}")
        call = self.conversation.linker.open_calls[record.call_id]
        if record.call != call:
            raise LedgerCorruptError(
                f"approval/requested for call {record.call_id!r} names another tool or "
                "arguments than the call"
            )
        self.held[call.id] = call

    def _owed_again(self, call_id: str) -> bool:
        """Whether ``call_id`` is a call owed a rerun, not running again now: one a
        turn may hold for approval before it runs it again (its first dispatch let
        through by nobody the ledger shows)."""
        session = self.session
        return (
            call_id in self.conversation.linker.open_calls
            and call_id in session.dispatched
            and call_id in session.effects
            and call_id not in session.cancelled
            and call_id not in session.failed
            and call_id not in session.rerunning
        )

    def approval_decided(self, record: ApprovalDecidedRecord) -> None:
        # anywhere (usually between turns), once per held call, before its result
        call_id = record.call_id
        if call_id not in self.held:
            raise LedgerCorruptError(
                f"approval/decided for call {call_id!r}, which is not waiting for approval "
                "(never requested, or already answered)"
            )
        if call_id in self.decided:
            raise LedgerCorruptError(f"a second approval/decided for call {call_id!r}")
        if record.arguments is not None:
            try:
                check_arguments(record.arguments)
            except ArgumentsError as exc:
                raise LedgerCorruptError(
                    f"approval/decided for call {call_id!r}: arguments: {exc}"
                ) from None
        self.decided[call_id] = record.decision

    def _as_dispatched(self, call: ToolCall) -> ToolCall:
        """``call`` as it was dispatched: with the arguments its approver set, if any
        (a call run again must not run with the model's, which nobody approved)."""
        decision = self.decided.get(call.id)
        if decision is None or not decision.approved or decision.arguments is None:
            return call
        return ToolCall(call.id, call.name, decision.arguments)

    def _approved(self, call_id: str) -> bool:
        decision = self.decided.get(call_id)
        return decision is not None and decision.approved

    def output(self, record: OutputRecord) -> None:
        # after the step that gave it, before its turn/end
        self._in_turn("turn/output")
        if record.turn != self.session.open_turn:
            raise LedgerCorruptError(
                f"turn/output of turn {record.turn} where the open turn is {self.session.open_turn}"
            )
        if self.step is not None:
            raise LedgerCorruptError(f"turn/output inside step {self.step}")
        self.session.outputs[record.turn] = record.output

    def take_snapshot(self) -> SnapshotRecord:
        """The state so far as a ``snapshot`` record, numbered as the next record
        (``ValueError`` inside a turn: a snapshot follows a ``turn/end``)."""
        if self.session.open_turn is not None or self.step is not None:
            raise ValueError("a snapshot is taken between turns")
        return take(self.session, self.conversation, self.model, self.held, self.decided)

    def snapshot(self, record: SnapshotRecord) -> None:
        # a cache of the state so far, written after a turn/end: only its place is
        # checked here (a resume that starts from it reads its state)
        if self.session.open_turn is not None:
            raise LedgerCorruptError(f"snapshot inside turn {self.session.open_turn}")

    def compacted(self, record: CompactedRecord) -> None:
        # As live (a new linker): ids the compacted transcript dropped may come again.
        self.conversation.replace(record.messages)
        self.session.messages = self.conversation.messages
        for call_id in [*self.session.dispatched, *self.session.failed, *self.held]:
            self._forget(call_id)

    def _forget(self, call_id: str) -> None:
        """A call that has its result (or was compacted away) is no longer open."""
        session = self.session
        session.dispatched.discard(call_id)
        session.cancelled.discard(call_id)
        session.failed.pop(call_id, None)
        session.effects.pop(call_id, None)
        session.rerunning.discard(call_id)
        self.held.pop(call_id, None)
        self.decided.pop(call_id, None)

    def feed(self, record: Record) -> None:
        session = self.session
        if record.seq != session.next_seq:
            raise LedgerCorruptError(
                f"record seq {record.seq} where {session.next_seq} was expected"
            )
        try:
            _RULES[type(record)](self, record)
        except TranscriptError as exc:
            raise LedgerCorruptError(f"record {record.seq}: {exc}") from None
        except LedgerCorruptError as exc:
            raise LedgerCorruptError(f"record {record.seq} ({record.kind}): {exc}") from None
        session.closed = type(record) is SessionClosedRecord
        session.next_seq += 1

    def finish(self) -> DerivedSession:
        session = self.session
        if session.open_turn is not None:  # the writer died in a turn
            session.sequence = max(session.sequence, session.reserved)
        # a held call dispatched (approved, then run) is answered as any call; one
        # held after its dispatch (owed a rerun) waits until it is approved
        pending = [
            call
            for key, call in self.held.items()
            if key not in session.dispatched or not self._approved(key)
        ]
        session.pending_approvals = tuple(pending)
        session.decisions = {c.id: self.decided[c.id] for c in pending if c.id in self.decided}
        waiting = {call.id for call in pending}
        session.reruns = tuple(
            self._as_dispatched(call)
            for key, call in self.conversation.linker.open_calls.items()
            if key in session.effects
            and key in session.dispatched  # a snapshot's state could name another
            and key not in session.cancelled
            and key not in session.failed
            and key not in waiting
        )
        session.approved_reruns = frozenset(c.id for c in session.reruns if self._approved(c.id))
        return session


_RULES: dict[type, Callable[[Replay, Any], None]] = {
    SessionStartRecord: Replay.session_start,
    SessionClosedRecord: Replay.session_closed,
    EventsReservedRecord: Replay.events_reserved,
    TurnStartRecord: Replay.turn_start,
    TurnEndRecord: Replay.turn_end,
    StepStartRecord: Replay.step_start,
    StepEndRecord: Replay.step_end,
    AttemptFailedRecord: Replay.attempt_failed,
    MessageRecord: Replay.message,
    ToolCallRecord: Replay.tool_call,
    ToolSkippedRecord: Replay.tool_skipped,
    ToolCancelledRecord: Replay.tool_cancelled,
    ToolFailedRecord: Replay.tool_failed,
    ToolResultRecord: Replay.tool_result,
    CompactedRecord: Replay.compacted,
    OutputRecord: Replay.output,
    ApprovalRequestedRecord: Replay.approval_requested,
    ApprovalDecidedRecord: Replay.approval_decided,
    SnapshotRecord: Replay.snapshot,
}


def derive(records: Iterable[Record]) -> DerivedSession:
    """Replay ``records``: from ``session/start`` (``seq`` 0) or from a
    ``snapshot`` (a resume's tail; the same ``DerivedSession`` as the whole
    ledger's), ``seq`` contiguous, each record where it can be.

    Raises ``LedgerCorruptError`` for a gap, a missing or second
    ``session/start``, an unknown format, a record out of place (a turn
    inside a turn, a step outside one, a call dispatched twice or not
    open), or records that do not make a valid transcript (messages are
    checked as live ones are, arguments within the limits included; a
    transcript cut after a tool call is valid here: calls may be open; a
    snapshot that matches its ``crc32`` has its messages' links and ids
    checked, not their blocks, which its session checked).
    Approvals: a request outside a step or for a call that is not open, a
    decision for a call not waiting for one (never requested, answered, or
    already decided), a held call dispatched without an approval, or one
    answered without being dispatched by anything but an error result.
    """
    return replay_of(records).finish()


def derive_own(session_id: str, records: Iterable[Record]) -> DerivedSession:
    """``derive`` of records loaded as session ``session_id``'s (a tail, from a
    snapshot on): ``LedgerCorruptError`` when they say they are another session's
    (a snapshot spliced in from another ledger), so the caller reads it whole."""
    derived = derive(records)
    if derived.session_id != session_id:
        raise LedgerCorruptError(
            f"the snapshot names session {derived.session_id!r}, not {session_id!r}"
        )
    return derived


def replay_of(records: Iterable[Record]) -> Replay:
    """The replay of ``records`` (``derive``'s rules), not finished: from their
    first record, a ``session/start`` or a ``snapshot`` (whose state is checked as
    it is restored, ``LedgerCorruptError`` when it cannot be)."""
    replay: Replay | None = None
    for record in records:
        if replay is None:
            if type(record) is SnapshotRecord:
                replay = Replay(*restore(record))
                replay.feed(record)
            elif type(record) is not SessionStartRecord:
                raise LedgerCorruptError("the ledger does not begin with session/start")
            else:
                replay = Replay.started(record)
        else:
            replay.feed(record)
    if replay is None:
        raise LedgerCorruptError("the ledger is empty")
    return replay
