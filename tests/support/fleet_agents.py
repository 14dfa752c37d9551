"""The fleet tests' agent: a model that answers each user message with one ``add``
call and then a text naming the message, the ``add`` tool (which logs each
dispatch in ``dispatched``; tests/fleet/conftest.py empties it), and a worker
that runs them."""

from __future__ import annotations

from trio_agent import ToolCall, UserMessage, tool
from trio_agent.fleet import Worker, agent_maker
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
