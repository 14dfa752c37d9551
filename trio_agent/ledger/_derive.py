"""Replaying a session's records: the transcript and counters they give.

The transcript is never stored on its own: ``derive`` rebuilds it from the
records, checking each one against what can appear where (``_Replay``), so a
ledger that was spliced, concatenated or edited is refused as corrupt
instead of being half understood.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, final

import attrs

from ..engine._transcript import Conversation
from ..errors import TOOL_FATAL
from ..events import ApprovalDecision
from ..limits import OUTPUT_TOOL_NAME, ArgumentsError, check_arguments, cut_text
from ..messages._ir import AssistantMessage, Message, ToolCall, ToolResultMessage, TranscriptError
from ..messages._ir import tool_result as make_tool_result
from ..model import Usage
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

__all__ = [
    "TOOL_CANCELLED",
    "TOOL_FATAL",
    "TOOL_NOT_STARTED",
    "TOOL_OUTCOME_UNKNOWN",
    "DerivedSession",
    "add_usage",
    "closing_result",
    "derive",
]

TOOL_NOT_STARTED: Final = "TOOL_NOT_STARTED"
TOOL_OUTCOME_UNKNOWN: Final = "TOOL_OUTCOME_UNKNOWN"
TOOL_CANCELLED: Final = "TOOL_CANCELLED"

_CLOSING_TEXT = {
    TOOL_NOT_STARTED: (
        "TOOL_NOT_STARTED: the session stopped before this call was dispatched; "
        "call it again if it is still needed."
    ),
    TOOL_OUTCOME_UNKNOWN: (
        "TOOL_OUTCOME_UNKNOWN: this call was dispatched but the session stopped before "
        "its result was recorded; call it again only if it is idempotent, otherwise "
        "check the external state first."
    ),
    TOOL_CANCELLED: (
        "TOOL_CANCELLED: this call was cancelled while it ran and has no result; it may "
        "have done part of its work: check the external state before calling it again."
    ),
    TOOL_FATAL: "TOOL_FATAL: this call failed fatally and has no result: {error}",
}
_MAX_ERROR_CHARS = 2000
_NO_USAGE: Final = Usage()


def closing_result(call: ToolCall, code: str, error: str = "") -> ToolResultMessage:
    """The explicit error result that answers ``call`` left open, for ``code``
    (``TOOL_NOT_STARTED``, ``TOOL_OUTCOME_UNKNOWN``, ``TOOL_CANCELLED``, or
    ``TOOL_FATAL`` with its ``error``)."""
    text = _CLOSING_TEXT[code].format(error=cut_text(error, _MAX_ERROR_CHARS))
    return make_tool_result(call, text, True)


def add_usage(total: Usage, more: Usage) -> Usage:
    """``total`` and ``more`` summed, token count by token count (no cost)."""
    return Usage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        cache_read_tokens=total.cache_read_tokens + more.cache_read_tokens,
        cache_write_tokens=total.cache_write_tokens + more.cache_write_tokens,
    )


@attrs.define(eq=False)
class DerivedSession:
    """What the records say: the transcript, the counters, and what was left open.

    ``sequence`` is where the session's next events start: exact after a
    clean end of turn, else above every sequence the last writer reserved,
    so event numbers never repeat across processes. ``closed``: the last
    writer closed the session (``session/closed`` is the last record); False
    means it died, or is still writing. ``usage`` sums what every completed
    response reported, ``failed_usage`` what refused responses reported.
    ``metadata`` is the run configuration recorded when the session was
    created (``Agent(metadata=...)``; ``{}`` when none was): read it before
    resuming with ``derive((await store.load(session_id)).records).metadata``.
    ``outputs``: each turn's accepted typed answer (``output_type=``) as JSON, by
    turn number (``turn/output``; None for one that had no JSON form); turns
    without one are absent.

    ``pending_approvals``: the calls held for a person's approval
    (``approval/requested``) that are still waiting to be resolved, in the order
    they were asked for: not answered, and not dispatched (an approved call
    dispatched before the writer died is not pending: ``closing_results``
    answers it as ``TOOL_OUTCOME_UNKNOWN``, or it is in ``reruns``).
    ``decisions``: the decisions recorded (``approval/decided``) for those of
    them that have one, by call id; the others wait for one.

    ``reruns``: the calls of the last assistant message dispatched with no
    recorded end (their process died during them) whose tool's effect was
    ``"idempotent"`` or ``"pure"`` (``tool/call``'s ``effect``), in call
    order: a resume leaves them open and the next turn runs them again, with
    the same idempotency key. ``effects``: the effect of each call dispatched
    and not ended, when it is not ``"once"``.

    What the session used, for its usage limits: ``steps`` (model requests it
    opened), ``tool_calls`` (calls dispatched, but the output tool's, and
    not skipped), and ``usage_by_model``: ``usage`` by the model that gave
    each answer (its ``model_label``: the turn's, or the one a
    ``FallbackModel``'s answer names; "" in older ledgers).
    """

    session_id: str
    system: str
    messages: list[Message]
    turns: int
    requests: int
    sequence: int
    next_seq: int
    open_turn: int | None
    dispatched: set[str]
    closed: bool = False
    usage: Usage = attrs.field(factory=Usage)
    failed_usage: Usage = attrs.field(factory=Usage)
    cancelled: set[str] = attrs.field(factory=set)
    failed: dict[str, str] = attrs.field(factory=dict)
    reserved: int = 0
    metadata: dict[str, Any] = attrs.field(factory=dict)
    outputs: dict[int, Any] = attrs.field(factory=dict)
    pending_approvals: tuple[ToolCall, ...] = ()
    decisions: dict[str, ApprovalDecision] = attrs.field(factory=dict)
    steps: int = 0
    tool_calls: int = 0
    usage_by_model: dict[str, Usage] = attrs.field(factory=dict)
    reruns: tuple[ToolCall, ...] = ()
    effects: dict[str, str] = attrs.field(factory=dict)
    rerunning: set[str] = attrs.field(factory=set)

    @property
    def last_output(self) -> Any:
        """The most recent turn's accepted output as JSON (``outputs``), or None when
        no turn accepted one."""
        return self.outputs[max(self.outputs)] if self.outputs else None

    def writer_warnings(self) -> tuple[str, ...]:
        """What a resume should tell about how the last writer left the session:
        nothing when it closed it, else where it crashed or was killed."""
        if self.closed:
            return ()
        if self.open_turn is None:
            where = "between turns"
        else:
            where = (
                f"during turn {self.open_turn}; its events are numbered below "
                f"{self.sequence}, where this writer's begin"
            )
        return (
            f"{self.session_id}: the last writer did not close the session: it crashed or "
            f"was killed {where}",
        )

    def closed_messages(self) -> list[Message]:
        """The transcript with ``closing_results`` in their calls' places; the calls
        in ``pending_approvals`` are still open in it."""
        return self.closed_conversation().messages

    def closed_conversation(self) -> Conversation:
        """``closed_messages`` as a ``Conversation`` (no journal) whose linker has
        the ``pending_approvals`` and ``reruns`` calls open, so their results can join it later
        (``Conversation.from_messages`` refuses a transcript with open calls)."""
        closed = Conversation.from_messages(())
        for message in self.messages:
            closed.append(message)
        for result, _ in self.closing_results():
            closed.append(result)
        return closed

    def never_rerun(self, call_ids: Iterable[str]) -> None:
        """Take these calls out of ``reruns``: ``closing_results`` answers them
        ``TOOL_OUTCOME_UNKNOWN`` instead (a resume whose tool is now declared
        ``"once"``: the stricter effect wins)."""
        dropped = set(call_ids)
        for call_id in dropped:
            self.effects.pop(call_id, None)
        self.reruns = tuple(call for call in self.reruns if call.id not in dropped)

    def closing_results(self) -> list[tuple[ToolResultMessage, str]]:
        """Explicit results for the calls of the last assistant message left without one.

        ``TOOL_FATAL`` or ``TOOL_CANCELLED`` for a call recorded as such,
        ``TOOL_OUTCOME_UNKNOWN`` for one dispatched with no word of its end
        (the process died during it) unless its effect lets it run again
        (``reruns``: left open), ``TOOL_NOT_STARTED`` for one never dispatched.
        A call held for approval and not dispatched (``pending_approvals``) is
        left open: the turn that resolves it answers it (an approved one
        dispatched is closed as any call).
        """
        answered = {m.tool_call_id for m in self.messages if type(m) is ToolResultMessage}
        answered.update(call.id for call in self.pending_approvals)
        answered.update(call.id for call in self.reruns)
        last = next((m for m in reversed(self.messages) if type(m) is AssistantMessage), None)
        if last is None:
            return []
        closing = []
        for block in last.content:
            if type(block) is ToolCall and block.id not in answered:
                code = self._closing_code(block.id)
                result = closing_result(block, code, self.failed.get(block.id, ""))
                closing.append((result, code))
        return closing

    def _closing_code(self, call_id: str) -> str:
        if call_id in self.failed:
            return TOOL_FATAL
        if call_id in self.cancelled:
            return TOOL_CANCELLED
        return TOOL_OUTCOME_UNKNOWN if call_id in self.dispatched else TOOL_NOT_STARTED


@final
class _Replay:
    """The records' rules, one method per kind. Between turns, in a turn, in a step
    of a turn: each record is refused where it cannot be."""

    def __init__(self, start: SessionStartRecord) -> None:
        if start.format != FORMAT_VERSION:
            raise LedgerCorruptError(f"ledger format {start.format} is not {FORMAT_VERSION}")
        self.conversation = Conversation.from_messages(())  # the live transcript's own rules
        self.session = DerivedSession(
            session_id=start.session_id,
            system=start.system,
            messages=self.conversation.messages,
            turns=0,
            requests=start.first_request - 1,
            sequence=start.first_sequence,
            next_seq=1,
            open_turn=None,
            dispatched=set(),
            metadata=dict(start.metadata),
        )
        self.step: str | None = None  # the open step's request id
        self.model = ""  # the open turn's model (its label)
        self.step_usage = False  # the open step's response recorded its usage
        # Calls held for approval and not answered yet, in request order, and the
        # decisions on them.
        self.held: dict[str, ToolCall] = {}
        self.decided: dict[str, ApprovalDecision] = {}

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
        self.conversation.append(self.conversation.check_new(message))

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
            by_model[label] = add_usage(by_model.get(label, _NO_USAGE), record.usage)
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
        session.rerunning.add(call_id)

    def tool_skipped(self, record: ToolSkippedRecord) -> None:
        self._open_call("tool/skipped", record.call_id, dispatched=True)
        if record.call_id in self.session.rerunning:  # its first dispatch's outcome: unknown
            self.session.rerunning.discard(record.call_id)
            return
        self.session.dispatched.discard(record.call_id)
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
        # in the step whose response made the call, before its turn ends
        self._in_turn("approval/requested")
        if record.turn != self.session.open_turn:
            raise LedgerCorruptError(
                f"approval/requested in turn {record.turn} where the open turn is "
                f"{self.session.open_turn}"
            )
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
        # a held call dispatched (approved, then run) is answered as any call
        pending = [call for key, call in self.held.items() if key not in session.dispatched]
        session.pending_approvals = tuple(pending)
        session.decisions = {c.id: self.decided[c.id] for c in pending if c.id in self.decided}
        session.reruns = tuple(
            call
            for key, call in self.conversation.linker.open_calls.items()
            if key in session.effects and key not in session.cancelled and key not in session.failed
        )
        return session


_RULES: dict[type, Callable[[_Replay, Any], None]] = {
    SessionStartRecord: _Replay.session_start,
    SessionClosedRecord: _Replay.session_closed,
    EventsReservedRecord: _Replay.events_reserved,
    TurnStartRecord: _Replay.turn_start,
    TurnEndRecord: _Replay.turn_end,
    StepStartRecord: _Replay.step_start,
    StepEndRecord: _Replay.step_end,
    AttemptFailedRecord: _Replay.attempt_failed,
    MessageRecord: _Replay.message,
    ToolCallRecord: _Replay.tool_call,
    ToolSkippedRecord: _Replay.tool_skipped,
    ToolCancelledRecord: _Replay.tool_cancelled,
    ToolFailedRecord: _Replay.tool_failed,
    ToolResultRecord: _Replay.tool_result,
    CompactedRecord: _Replay.compacted,
    OutputRecord: _Replay.output,
    ApprovalRequestedRecord: _Replay.approval_requested,
    ApprovalDecidedRecord: _Replay.approval_decided,
}


def derive(records: Iterable[Record]) -> DerivedSession:
    """Replay ``records``: ``seq`` contiguous from 0, each record where it can be.

    Raises ``LedgerCorruptError`` for a gap, a missing or second
    ``session/start``, an unknown format, a record out of place (a turn
    inside a turn, a step outside one, a call dispatched twice or not
    open), or records that do not make a valid transcript (messages are
    checked as live ones are, arguments within the limits included; a
    transcript cut after a tool call is valid here: calls may be open).
    Approvals: a request outside a step or for a call that is not open, a
    decision for a call not waiting for one (never requested, answered, or
    already decided), a held call dispatched without an approval, or one
    answered without being dispatched by anything but an error result.
    """
    replay: _Replay | None = None
    for record in records:
        if replay is None:
            if type(record) is not SessionStartRecord:
                raise LedgerCorruptError("the ledger does not begin with session/start")
            if record.seq != 0:
                raise LedgerCorruptError(f"record seq {record.seq} where 0 was expected")
            replay = _Replay(record)
        else:
            replay.feed(record)
    if replay is None:
        raise LedgerCorruptError("the ledger is empty")
    return replay.finish()
