"""The fleet tests' agent: a model that answers each user message with one ``add``
call and then a text naming the message, the ``add`` tool (which logs each
dispatch in ``dispatched``; tests/fleet/conftest.py empties it), a worker that
runs them, and a count of the claims workers made."""

from __future__ import annotations

from trio_agent import ToolCall, UserMessage, tool
from trio_agent.fleet import Worker, agent_maker
from trio_agent.fleet._claims import Claims
from trio_agent.testing import CallableModel, scripted_response


def answers(request):
    """A tool call for each user message, then an answer naming it."""
    last = request.messages[-1]
    if isinstance(last, UserMessage):
        return scripted_response(
            f"r-{request.id}", [ToolCall(f"c-{last.id}", "add", {"a": 1, "b": 2})]
        )
    return scripted_response(f"r-{request.id}", f"answered {asked(request.messages)}")


def asked(messages):
    return [m.content for m in messages if isinstance(m, UserMessage)][-1]


dispatched: list[str] = []


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    dispatched.append(f"{a}+{b}")
    return a + b


def fleet_worker(store, **options):
    options.setdefault("poll_seconds", 0.2)
    return Worker(store, agent_maker(model=CallableModel(answers), tools=[add]), **options)


def count_claims(monkeypatch) -> list[int]:
    """Count the claims of every worker: the list gets the number of sessions each
    claim took as it returns. A worker whose first claim returned is idle (it waits
    for a notification or its poll) until woken."""
    claims: list[int] = []
    real = Claims.claim

    async def counted(self, limit, skip):
        claimed = await real(self, limit, skip)
        claims.append(len(claimed))
        return claimed

    monkeypatch.setattr(Claims, "claim", counted)
    return claims
