"""``Agent.resume``'s work: load a recorded session, rebuild the agent from its
records, and take the session over as its one writer (the session module keeps
the signature and the contract)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from .._log import LEDGER, SESSION
from ..engine._approvals import Approvals
from ..ledger._derive import DerivedSession, derive
from ..ledger._ledger import Ledger
from ..ledger._records import SessionChangedError
from ..stores._base import SessionStore

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["resume_agent"]


def _rebuilt(
    cls: type[Agent], derived: DerivedSession, system: str | None, options: dict[str, Any]
) -> Agent:
    """The agent the records describe, before it takes the session over. Calls held
    for approval stay open in its transcript (the turn that resolves them answers
    them), so such a transcript is rebuilt as a conversation, not checked whole."""
    held = bool(derived.pending_approvals)
    agent = cls(
        messages=() if held else derived.closed_messages(),
        request_sequence_start=derived.requests + 1,
        sequence_start=derived.sequence,
        system=derived.system if system is None else system,
        **options,
    )
    if held:
        conversation = derived.closed_conversation()
        conversation.requests = derived.requests
        agent._conversation = conversation
        agent._approvals = Approvals(
            {call.id: call for call in derived.pending_approvals}, dict(derived.decisions)
        )
    return agent


async def resume_agent(
    cls: type[Agent],
    store: SessionStore,
    session_id: str,
    fsync: Any,
    system: str | None,
    options: dict[str, Any],
) -> Agent:
    """Load, rebuild and take over (``Agent.resume``'s contract); a session another
    writer changed meanwhile is loaded again, three times at most."""
    for attempt in range(1, 4):
        loaded = await store.load(session_id)
        derived = derive(loaded.records)
        agent = _rebuilt(cls, derived, system, options)
        try:
            writer = await trio.to_thread.run_sync(store.reopen, loaded)  # file work
            ledger, closing = await Ledger.take_over(writer, derived, fsync)
        except SessionChangedError:
            if attempt == 3:
                raise
            continue  # another writer appended and let go meanwhile: load again
        agent._attach(ledger)
        agent._turns = derived.turns
        agent._session_id = session_id
        agent._metadata = derived.metadata
        agent.closed_on_resume = tuple(closing)
        agent.resume_warnings = (*loaded.warnings, *derived.writer_warnings())
        _log_resume(agent, session_id)
        return agent
    raise AssertionError("unreachable")  # pragma: no cover


def _log_resume(agent: Any, session_id: str) -> None:
    """INFO: the session resumed, what its resume closed (calls that were open
    are named by id, never by content), and each warning of its ledger."""
    SESSION.info(
        "session %s resumed after turn %d (%d messages; %d open calls closed)",
        session_id,
        agent._turns,
        len(agent.messages),
        len(agent.closed_on_resume),
    )
    for warning in agent.resume_warnings:
        LEDGER.info("session %s: %s", session_id, warning)
