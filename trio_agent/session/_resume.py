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
from ..ledger._derive import DerivedSession, derive, derive_own
from ..ledger._ledger import Ledger
from ..ledger._records import LedgerCorruptError, Record, SessionChangedError, SnapshotRecord
from ..messages._ir import ToolResultMessage
from ..stores._base import LoadedSession, SessionStore
from ._limits import session_used
from ._options import AgentOptions
from ._state import SessionState

__all__ = ["Resumed", "derive_from_tail", "load_derived", "log_resume", "resume_session"]


@final
@attrs.frozen
class Resumed:
    """A session taken over: its state, the calls its resume closed (each with its
    code), and what its ledger said (``Agent.resume_warnings``)."""

    state: SessionState
    closed: tuple[tuple[ToolResultMessage, str], ...]
    warnings: tuple[str, ...]


def _rebuilt(
    options: AgentOptions,
    derived: DerivedSession,
    system: str | None,
    closing: list[tuple[ToolResultMessage, str]],
) -> SessionState:
    """The state the records describe, before it takes the session over: the
    replay's conversation (each message was checked once, by ``derive``) with the
    ``closing`` results. Calls held for approval or owed a rerun stay open in it
    (the turn that resolves them answers them); those owed a rerun that the ledger
    shows no approval for are ``unvetted`` (the turn asks the approval rule)."""
    system = derived.system if system is None else system
    state = SessionState.new(
        attrs.evolve(options, system=system, fsync="step"),  # the fsync policy: the ledger's
        conversation=derived.take_conversation(closing),
        request_sequence_start=derived.requests + 1,
        sequence_start=derived.sequence,
    )
    state.fsync = options.fsync
    state.unvetted = frozenset(c.id for c in derived.reruns) - derived.approved_reruns
    if derived.pending_approvals or derived.reruns:
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
    owed = derived.owed_again()
    if not owed:
        return []
    tools = registry_of(options.tools)
    return [
        call.id
        for call in owed
        if (tool := tools.get(call.name)) is not None and tool.effect == "once"
    ]


async def load_derived(
    store: SessionStore, session_id: str
) -> tuple[LoadedSession, DerivedSession, tuple[str, ...]]:
    """The session's records as loaded, what they derive to, and the warnings of
    both: from its last snapshot on when the store can load that (``load_tail``),
    else, or when the snapshot or its tail does not replay (a damaged snapshot),
    from the whole ledger, with a warning saying so."""
    load_tail = getattr(store, "load_tail", None)
    if load_tail is None:
        loaded = await store.load(session_id)
        return loaded, _own(session_id, loaded.records), loaded.warnings
    try:
        tail: LoadedSession = await load_tail(session_id)
    except LedgerCorruptError as exc:  # the records after the snapshot do not load
        return await _whole(store, session_id, exc)
    return await derive_from_tail(store, session_id, tail)


async def derive_from_tail(
    store: SessionStore, session_id: str, tail: LoadedSession
) -> tuple[LoadedSession, DerivedSession, tuple[str, ...]]:
    """``load_derived`` of a tail already loaded (a store's ``load_tail``): bounded
    by the last snapshot, not by the session's length."""
    if not tail.records or type(tail.records[0]) is not SnapshotRecord:
        return tail, _own(session_id, tail.records), tail.warnings  # no snapshot: the whole ledger
    try:
        return tail, derive_own(session_id, tail.records), tail.warnings
    except LedgerCorruptError as exc:  # in the snapshot, or in the records after it
        return await _whole(store, session_id, exc)


async def _whole(
    store: SessionStore, session_id: str, failure: LedgerCorruptError
) -> tuple[LoadedSession, DerivedSession, tuple[str, ...]]:
    said = (
        f"{session_id}: replaying from the last snapshot failed ({failure}); "
        "the whole ledger was replayed instead"
    )
    LEDGER.warning("%s", said)
    loaded = await store.load(session_id)
    return loaded, _own(session_id, loaded.records), (said, *loaded.warnings)


def _own(session_id: str, records: tuple[Record, ...]) -> DerivedSession:
    """``derive`` of a whole ledger loaded as ``session_id``'s. One whose records are
    another session's (a ledger copied or renamed) is refused, naming both: taken
    over, it would write snapshots that name the other session, which no resume of
    ``session_id`` could use. One with no record (its creation cut short) is
    refused, naming the session and what to do."""
    if not records:
        raise LedgerCorruptError(
            f"{session_id}: the ledger holds no record (its creation was cut short): "
            f"start the session again, Agent(store=..., session_id={session_id!r})"
        )
    derived = derive(records)
    if derived.session_id != session_id:
        raise LedgerCorruptError(
            f"{session_id}: its records are those of session {derived.session_id!r} (a ledger "
            "copied or renamed: fork it to go on under another id)"
        )
    return derived


async def resume_session(
    store: SessionStore, session_id: str, options: AgentOptions, system: str | None
) -> Resumed:
    """Load, rebuild and take over (``Agent.resume``'s contract); a session another
    writer changed meanwhile is loaded again, three times at most."""
    for attempt in range(1, 4):
        loaded, derived, said = await load_derived(store, session_id)
        derived.never_rerun(_now_once(options, derived))
        closing = derived.closing_results()
        state = _rebuilt(options, derived, system, closing)
        policy = state.policy
        if policy.session_usage_limits is not None:  # what it used counts against them
            state.used = await session_used(derived, policy.session_usage_limits, policy.prices)
        try:
            writer = await trio.to_thread.run_sync(store.reopen, loaded)  # file work
            ledger, closing = await Ledger.take_over(
                writer, derived, options.fsync, closing, loaded.records
            )
        except SessionChangedError:
            if attempt == 3:
                raise
            continue  # another writer appended and let go meanwhile: load again
        state.attach(ledger)
        state.turns = derived.turns
        state.session_id = session_id
        state.metadata = derived.metadata
        warnings = (*said, *derived.writer_warnings())
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
