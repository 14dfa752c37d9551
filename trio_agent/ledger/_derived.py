"""What a session's records derive to (``DerivedSession``): the transcript, the
counters, and what was left open, with the explicit results that close the
calls a writer left without one. The replay that makes it is ``_derive``'s."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from ..engine._transcript import Conversation
from ..errors import TOOL_FATAL
from ..events import ApprovalDecision
from ..limits import cut_text
from ..messages._ir import (
    INTERRUPTED_RESULT_TEXT,
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
)
from ..messages._ir import tool_result as make_tool_result
from ..model import Usage

__all__ = [
    "TOOL_CANCELLED",
    "TOOL_FATAL",
    "TOOL_NOT_STARTED",
    "TOOL_OUTCOME_UNKNOWN",
    "DerivedSession",
    "add_usage",
    "closing_result",
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
NO_USAGE: Final = Usage()


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
    order, each with the arguments it was dispatched with (an approver's, when
    they were edited): a resume leaves them open and the next turn runs them
    again, with the same idempotency key. ``effects``: the effect of each call dispatched
    and not ended, when it is not ``"once"``. ``approved_reruns``: the ids of those
    of ``reruns`` the ledger shows held and approved; the others (a ``tool/call``
    is all a ledger handed over needs to name one) go through the agent's approval
    rule before they run again, as a fresh call does, and one it holds
    (``approval/requested`` after its dispatch) is in ``pending_approvals`` until
    it is approved.

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
    approved_reruns: frozenset[str] = frozenset()
    conversation: Conversation | None = attrs.field(default=None, repr=False)
    """The replay's own conversation, whose ``messages`` is ``messages``: each message
    checked once, as it was replayed. ``Agent.resume`` takes it over instead of
    checking the transcript again (``take_conversation``)."""

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
        """Take these calls out of ``reruns`` (and out of ``owed_again``):
        ``closing_results`` answers them ``TOOL_OUTCOME_UNKNOWN`` instead (a resume
        whose tool is now declared ``"once"``: the stricter effect wins)."""
        dropped = set(call_ids)
        for call_id in dropped:
            self.effects.pop(call_id, None)
            self.decisions.pop(call_id, None)
        self.reruns = tuple(call for call in self.reruns if call.id not in dropped)
        self.pending_approvals = tuple(
            c for c in self.pending_approvals if c.id not in dropped or c.id not in self.dispatched
        )

    def owed_again(self) -> tuple[ToolCall, ...]:
        """Every call owed a rerun: ``reruns``, then those a turn held for approval
        again (``pending_approvals`` dispatched once already), whose next dispatch
        is a rerun too."""
        dispatched = self.dispatched
        held = tuple(call for call in self.pending_approvals if call.id in dispatched)
        return (*self.reruns, *held)

    def take_conversation(self, closing: Sequence[tuple[ToolResultMessage, str]]) -> Conversation:
        """The replay's conversation with the ``closing`` results (``closing_results``)
        appended (their links checked, nothing else again), and the request counter
        set: for ``Agent.resume``, once. The calls in ``pending_approvals`` and
        ``reruns`` stay open in it."""
        conversation = self.conversation
        if conversation is None:  # a session made by hand: built from the messages
            conversation = Conversation.from_messages(())
            for message in self.messages:
                conversation.append(message)
        self.conversation = None  # taken: later reads of ``messages`` see the closing too
        for result, _ in closing:
            conversation.append(result)
        conversation.requests = self.requests
        return conversation

    def closing_results(self) -> list[tuple[ToolResultMessage, str]]:
        """Explicit results for the calls of the last assistant message left without one.

        ``TOOL_FATAL`` or ``TOOL_CANCELLED`` for a call recorded as such,
        ``TOOL_OUTCOME_UNKNOWN`` for one dispatched with no word of its end
        (the process died during it) unless its effect lets it run again
        (``reruns``: left open), ``TOOL_NOT_STARTED`` for one never dispatched:
        by a writer that died in its turn, with that code's text; in a turn that
        ended without it (a fatal call before it, a cancel), with the text the live
        session's next turn answers it with ("interrupted: no result was
        recorded"), so the transcript is the same either way.
        A call held for approval and not dispatched (``pending_approvals``) is
        left open: the turn that resolves it answers it (an approved one
        dispatched is closed as any call).
        """
        messages = self.messages
        at = len(messages) - 1
        while at >= 0 and type(messages[at]) is not AssistantMessage:
            at -= 1
        if at < 0:
            return []
        last = messages[at]
        # only a result after it can answer one of its calls (call ids are unique):
        # the messages after it, not the whole transcript
        answered = {m.tool_call_id for m in messages[at + 1 :] if type(m) is ToolResultMessage}
        answered.update(call.id for call in self.pending_approvals)
        answered.update(call.id for call in self.reruns)
        closing = []
        for block in last.content:
            if type(block) is ToolCall and block.id not in answered:
                code = self._closing_code(block.id)
                if code == TOOL_NOT_STARTED and self.open_turn is None:
                    # its turn ended without it (a fatal call before it, a cancel):
                    # answered as the live session's next turn answers it
                    result = make_tool_result(block, INTERRUPTED_RESULT_TEXT, True)
                else:
                    result = closing_result(block, code, self.failed.get(block.id, ""))
                closing.append((result, code))
        return closing

    def _closing_code(self, call_id: str) -> str:
        if call_id in self.failed:
            return TOOL_FATAL
        if call_id in self.cancelled:
            return TOOL_CANCELLED
        return TOOL_OUTCOME_UNKNOWN if call_id in self.dispatched else TOOL_NOT_STARTED
