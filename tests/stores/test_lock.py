"""One writer per session (issue 12): a second writer is refused instead of corrupting
the session, and the lock goes with the writer."""

from __future__ import annotations

import pytest
from helpers import add
from ledger_scenario import agent_on, records_of, sums

from trio_agent import Agent, SessionLockedError, ToolRegistry, UserMessage
from trio_agent.ledger import derive
from trio_agent.testing import ScriptedModel


async def test_two_writers_of_one_session_are_refused_instead_of_corrupting_it(store):
    """Issue 12: two writers of one session interleaved their records; the second is refused, and
    the lock goes with the writer."""
    first = agent_on(store, sums("a"))
    await first.prompt(UserMessage("u1", "go"))
    await first.aclose()
    one = await Agent.resume(store, "s1", model=ScriptedModel(sums("b")), tools=ToolRegistry([add]))
    with pytest.raises(SessionLockedError, match=r"already has a writer: this process holds .*s1"):
        await Agent.resume(store, "s1", model=ScriptedModel(sums("c")), tools=ToolRegistry([add]))
    with pytest.raises(SessionLockedError):  # creating it again is refused the same way
        async with agent_on(store, []):  # (on first use: issue 14)
            pass
    await one.prompt(UserMessage("u2", "again"))
    await one.aclose()
    # the session loads whole, and the lock went with the writer
    derived = derive(await records_of(store))
    assert derived.turns == 2 and derived.closed
    two = await Agent.resume(store, "s1", model=ScriptedModel([]), tools=ToolRegistry([add]))
    await two.aclose()
