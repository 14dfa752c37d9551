"""The ledger tests' stock sessions: ``sums`` and ``script`` script two ``add``
calls and an answer, ``agent_on`` records a script as session ``s1`` of a store,
``records_of`` loads what a session recorded, ``ok_model`` answers plain text."""

from __future__ import annotations

from helpers import add, call

from trio_agent import Agent, ToolRegistry, Usage
from trio_agent.testing import ScriptedModel, scripted_response


def sums(prefix: str = "r", usage: Usage | None = None):
    """Two steps: two add calls, then an answer."""
    return [
        scripted_response(
            f"{prefix}1",
            [
                call("add", f"{prefix}c1", {"left": 1, "right": 2}),
                call("add", f"{prefix}c2", {"left": 3, "right": 4}),
            ],
            usage=usage,
        ),
        scripted_response(f"{prefix}2", "3 and 7", usage=usage),
    ]


def agent_on(store, script, session_id="s1", **options) -> Agent:
    tools = options.pop("tools", ToolRegistry([add]))
    return Agent(
        model=ScriptedModel(script), tools=tools, store=store, session_id=session_id, **options
    )


async def records_of(store, session_id="s1"):
    return (await store.load(session_id)).records


def ok_model(*ids: str) -> ScriptedModel:
    return ScriptedModel([scripted_response(i, f"answer {i}") for i in ids or ("r1",)])


def script():
    return [
        scripted_response(
            "r1",
            [
                call("add", "c1", {"left": 1, "right": 2}),
                call("add", "c2", {"left": 3, "right": 4}),
            ],
            text_chunks=2,
        ),
        scripted_response("r2", "done", text_chunks=2),
        scripted_response("r3", "next"),
    ]
