"""Running again the calls a resumed session left open (DESIGN 12.4): those whose
process died mid-call, outcome unknown, and whose tool's effect is
``"idempotent"`` or ``"pure"``. The next turn runs each once more, with the
same call id (so the same ``ToolContext.idempotency_key``), before its new
input; the ledger records that dispatch as a rerun."""

from __future__ import annotations

import trio

from ..events import ApprovalDecision
from ..messages._ir import AssistantMessage
from ._approvals import Approvals, run_passing
from ._emit import Emitter
from ._hooks import StepHooks, TurnSpec
from ._transcript import Conversation

__all__ = ["run_again"]

_RAN_BEFORE = "it ran before a crash; its effect lets it run again"


async def run_again(
    approvals: Approvals,
    conversation: Conversation,
    spec: TurnSpec,
    hooks: StepHooks,
    emit: Emitter,
    host: trio.Nursery | None,
) -> None:
    """Run each call in ``approvals.reruns`` again, in call order, one at a time,
    as any call (``before_tool_call`` and ``after_tool_call`` included), but
    never held for approval again, nor counted again against ``UsageLimits``:
    it was let run once. A call leaves
    ``reruns`` just before it is run, so a cancellation never runs it twice in
    this process; one cancelled before its dispatch is answered as interrupted
    by the next turn (the ledger still says its outcome is unknown)."""
    reruns = approvals.reruns or {}
    while reruns:
        call_id, call = next(iter(reruns.items()))
        del reruns[call_id]
        decision = ApprovalDecision(call_id=call_id, approved=True, reason=_RAN_BEFORE)
        batch = AssistantMessage(f"rerun-{call_id}", (call,))
        approvals.rerunning = call_id
        try:
            await run_passing(batch, decision, approvals, conversation, spec, hooks, emit, host)
        finally:
            approvals.rerunning = None
