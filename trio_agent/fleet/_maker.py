"""Many worker processes, on any machines, sharing sessions through PostgreSQL.

- ``await submit(store, session_id, message)``: queue input for a session,
  from any process (a web handler), and wake the workers;
- ``Worker(store, make_agent, concurrency=N)``: lease sessions with queued
  input, answer it, let them go; a dead worker's sessions are taken over once
  their leases expire, with the resume rules (nothing dispatched twice);
- ``await wait_for_turn(store, session_id, number)``: the result of the turn
  that answered a submitted input;
- ``agent_maker(**options)``: a ``make_agent`` that starts or resumes each
  session with the same options.

The store is a ``PostgresStore`` (the ``[postgres]`` extra); its schema holds
the inbox next to the sessions' records and leases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..ledger._ledger import FsyncPolicy
from ..model import Model
from ..session._agent import Agent
from ..session._hooks import RESUMED_OPTIONS
from ..stores.postgres._store import PostgresStore
from ._inbox import submit as submit
from ._inbox import wait_for_turn as wait_for_turn
from ._worker import MakeAgent as MakeAgent
from ._worker import Worker as Worker

__all__ = ["MakeAgent", "Worker", "agent_maker", "submit", "wait_for_turn"]


def agent_maker(
    *,
    model: Model,
    system: str = "",
    metadata: Mapping[str, Any] | None = None,
    fsync: FsyncPolicy = "step",
    **options: Any,
) -> MakeAgent:
    """A ``make_agent`` for ``Worker``: a new session is ``Agent(model=model,
    system=system, metadata=metadata, fsync=fsync, store=store,
    session_id=session_id, **options)``, a recorded one ``Agent.resume(store,
    session_id, model=model, fsync=fsync, **options)`` (its recorded system
    prompt kept). ``options``: those ``Agent.resume`` also takes (``tools``,
    ``max_steps``, ``tool_execution``, ...); any other is a ``TypeError`` here."""
    unknown = sorted(set(options) - set(RESUMED_OPTIONS))
    if unknown:
        raise TypeError(
            f"agent_maker takes model, system, metadata, fsync and the options Agent.resume "
            f"takes; not {', '.join(unknown)}"
        )

    async def make_agent(store: PostgresStore, session_id: str, new: bool) -> Agent:
        if new:
            return Agent(
                model=model,
                system=system,
                metadata=metadata,
                fsync=fsync,
                store=store,
                session_id=session_id,
                **options,
            )
        return await Agent.resume(store, session_id, model=model, fsync=fsync, **options)

    return make_agent
