"""``agent_maker``: the ``make_agent`` of a fleet's workers, from ``AgentOptions``:
the same options start a new session or resume a recorded one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..session._agent import Agent
from ..session._options import AGENT_OPTIONS, AgentOptions
from ..stores.postgres._store import PostgresStore
from ._worker import MakeAgent

__all__ = ["agent_maker"]


def agent_maker(*, metadata: Mapping[str, Any] | None = None, **options: Any) -> MakeAgent:
    """A ``make_agent`` for ``Worker``: a new session is ``Agent(**options,
    metadata=metadata, store=store, session_id=session_id)``, a recorded one
    ``Agent.resume(store, session_id, **options)`` (its recorded system prompt
    kept). ``options``: those of ``AgentOptions``, as ``Agent()`` takes them
    (``model`` at least; ``system``, ``tools``, ``max_steps``, ``fsync``, ...);
    any other is a ``TypeError`` here."""
    if "model" not in options:
        raise TypeError("agent_maker needs model=")
    unknown = sorted(set(options) - set(AGENT_OPTIONS))
    if unknown:
        raise TypeError(
            "agent_maker takes metadata and the options of Agent() that Agent.resume also "
            f"takes (AgentOptions); not {', '.join(unknown)}"
        )
    given = AgentOptions(**options)

    async def make_agent(store: PostgresStore, session_id: str, new: bool) -> Agent:
        if new:
            return Agent(
                **given.as_keywords(), metadata=metadata, store=store, session_id=session_id
            )
        return await Agent.resume(store, session_id, **given.resume_keywords())

    return make_agent
