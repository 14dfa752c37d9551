"""The testing toolkit's stock scenario: a model that calls ``add`` once, then
answers, over three steps at most; faults, replays and explorations run on it."""

from __future__ import annotations

from helpers import add, call, user

from trio_agent import ToolRegistry, run_agent_loop
from trio_agent.testing import scripted_response


def two_steps():
    return [
        scripted_response("r1", [call("add", "c1", {"left": 1, "right": 2})], text_chunks=2),
        scripted_response("r2", "three, as computed", text_chunks=3),
    ]


def core_run(model, **options):
    return run_agent_loop(
        messages=[user()], model=model, tools=ToolRegistry([add]), max_steps=3, **options
    )
