"""``Agent.resume``'s work: load a recorded session, rebuild its state from its
records, and take the session over as its one writer (the session module keeps
the signature and the contract)."""

from __future__ import annotations

from typing import final

import attrs
import trio

from .._log import LEDGER, SESSION
from ..engine._approvals import Approvals
from ..engine._options import registry_of
from ..ledger._derive import DerivedSession, derive
from ..ledger._ledger import Ledger
from ..ledger._records import SessionChangedError
from ..messages._ir import ToolResultMessage
from ..stores._base import SessionStore
from ._limits import session_used
from ._options import AgentOptions
from ._state import SessionState

__all__ = ["Resumed", "log_resume", "resume_session"]


@final
@attrs.frozen
class Resumed:
    """A session taken over: its state, the calls its resume closed (each with its
    code), and what its ledger said (``Agent.resume_warnings``)."""

    state: SessionState
    closed: tuple[tuple[ToolResultMessage, str], ...]
    warnings: tuple[str, ...]


def _rebuilt(options: AgentOptions, derived: DerivedSession, system: str | None) -> SessionState:
    """The state the records describe, before it takes the session over. Calls held
    for approval stay open in its transcript (the turn that resolves them answers
    them), so such a transcript is rebuilt as a conversation, not checked whole."""
    held = bool(derived.pending_approvals or derived.reruns)
    system = derived.system if system is None else system
    state = SessionState.new(
        attrs.evolve(options, system=system, fsync="step"),  # the fsync policy: the ledger's
        messages=() if held else derived.closed_messages(),
        request_sequence_start=derived.requests + 1,
        sequence_start=derived.sequence,
    )
    state.fsync = options.fsync
    if held:
        conversation = derived.closed_conversation()
        conversation.requests = derived.requests
        state.conversation = conversation
        state.approvals = Approvals(
            {call.id: call for call in derived.pending_approvals},
            dict(derived.decisions),
            reruns={call.id: call for call in derived.reruns} or None,
        )
    return state


def _now_once(options: AgentOptions, derived: DerivedSession) -> list[str]:
    """The calls owed a rerun whose tool this agent now declares ``"once"``: the
    stricter of the effect recorded at dispatch and the tool's today wins (a tool
    from a tool source is known only at the turn: its recorded effect stands)."""
    if not derived.reruns:
        return []
    tools = registry_of(options.tools)
    return [
        call.id
        for call in derived.reruns
        if (tool := tools.get(call.name)) is not None and tool.effect == "once"
    ]


async def resume_session(
    store: SessionStore, session_id: str, options: AgentOptions, system: str | None
) -> Resumed:
    """Load, rebuild and take over (``Agent.resume``'s contract); a session another
    writer changed meanwhile is loaded again, three times at most."""
    for attempt in range(1, 4):
        loaded = await store.load(session_id)
        derived = derive(loaded.records)
        derived.never_rerun(_now_once(options, derived))
        state = _rebuilt(options, derived, system)
        policy = state.policy
        if policy.session_usage_limits is not None:  # what it used counts against them
            state.used = await session_used(derived, policy.session_usage_limits, policy.prices)
        try:
            writer = await trio.to_thread.run_sync(store.reopen, loaded)  # file work
            ledger, closing = await Ledger.take_over(writer, derived, options.fsync)
        except SessionChangedError:
            if attempt == 3:
                raise
            continue  # another writer appended and let go meanwhile: load again
        state.attach(ledger)
        state.turns = derived.turns
        state.session_id = session_id
        state.metadata = derived.metadata
        warnings = (*loaded.warnings, *derived.writer_warnings())
        return Resumed(state, tuple(closing), warnings)
    raise AssertionError("unreachable")  # pragma: no cover


def log_resume(resumed: Resumed) -> None:
    """INFO: the session resumed, what its resume closed (calls that were open
    are named by id, never by content), and each warning of its ledger."""
    state = resumed.state
    SESSION.info(
        "session %s resumed after turn %d (%d messages; %d open calls closed, %d to run again)",
        state.session_id,
        state.turns,
        len(state.conversation.messages),
        len(resumed.closed),
        len(state.approvals.reruns or ()),
    )
    for warning in resumed.warnings:
        LEDGER.info("session %s: %s", state.session_id, warning)
