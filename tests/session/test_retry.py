"""Retries of transient model failures inside a step, on trio's clock (issue 3),
grouped errors included."""

from __future__ import annotations

import msgspec
import pytest
import trio
from helpers import add, agent_with, call
from sessions import u

from trio_agent import (
    Agent,
    AttemptFailed,
    ModelChunk,
    RetryPolicy,
    TextBlock,
    ToolRegistry,
    TransientModelError,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    UserMessage,
    tool,
    validate_transcript,
)
from trio_agent.stores import JsonlStore
from trio_agent.testing import ScriptedModel, scripted_response


def flaky(id: str, *, retry_after: float | None = None, chunks: int = 0):
    """An attempt that streams ``chunks`` chunks, then fails with a transient error."""
    return scripted_response(
        id,
        "partial text that must not survive",
        text_chunks=max(chunks, 1),
        raise_at=chunks,
        error=TransientModelError("503 service unavailable", retry_after=retry_after),
    )


def new_agent(script, **options):
    model = ScriptedModel(script)
    options.setdefault("retry", RetryPolicy(jitter=0))
    return Agent(model=model, tools=ToolRegistry([add]), **options), model


async def run(agent, message):
    events = []
    async with agent.turn(message) as turn:
        async for event in turn:
            events.append((trio.current_time(), event))
    return events, turn.result


async def test_transient_failures_are_retried_with_growing_backoff(autojump_clock):
    agent, model = new_agent(
        [flaky("a1", chunks=2), flaky("a2"), flaky("a3", chunks=1), scripted_response("ok", "done")]
    )
    start = trio.current_time()
    events, result = await run(agent, UserMessage("u1", "go"))
    assert result.end == TurnCompleted() and result.final_text == "done"
    failed = [e for _, e in events if isinstance(e, AttemptFailed)]
    assert [(f.attempt, f.retry_in, f.chunks) for f in failed] == [
        (1, 0.5, 2),
        (2, 1.0, 0),
        (3, 2.0, 1),
    ]
    assert all(f.request_id == "request-001" for f in failed)
    assert trio.current_time() - start == pytest.approx(3.5)
    # one step, one request id, the same input for every attempt, appended once
    assert result.steps == 1 and agent.requests == 1
    assert len(model.requests) == 4
    assert all(
        r.messages == (UserMessage("u1", "go"),) and r.id == "request-001" for r in model.requests
    )
    assert [m.id for m in result.messages] == ["u1", "message-ok"]
    # chunks of failed attempts are marked with their attempt and never kept
    chunk_attempts = [e.attempt for _, e in events if isinstance(e, ModelChunk)]
    assert chunk_attempts == [1, 1, 3, 4]
    assert result.messages[-1].content == (TextBlock("done"),)
    validate_transcript(result.messages)


async def test_a_retried_step_records_its_input_and_its_start_once(autojump_clock, tmp_path):
    """DESIGN 8.1: what must happen once per step (recording the user message,
    opening the request) happens once, however many attempts the step takes."""
    store = JsonlStore(tmp_path)
    agent, model = new_agent(
        [flaky("a1", chunks=1), flaky("a2"), scripted_response("ok", "done")],
        store=store,
        session_id="s1",
    )
    async with agent:
        result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end == TurnCompleted() and model.call_count == 3
    records = [msgspec.to_builtins(r) for r in (await store.load("s1")).records]
    kinds = [r["kind"] for r in records]
    assert kinds.count("turn/start") == 1 and kinds.count("step/start") == 1
    assert [r["request_id"] for r in records if r["kind"] == "step/start"] == ["request-001"]
    assert [r["attempt"] for r in records if r["kind"] == "attempt/failed"] == [1, 2]
    assert [r["message"]["id"] for r in records if r["kind"] == "message"] == ["u1", "message-ok"]
    # the failed attempts come after the step opened and before its one answer
    assert kinds.index("step/start") < kinds.index("attempt/failed")
    assert kinds.index("attempt/failed") < kinds.index("step/end")


async def test_backoff_is_capped_and_jittered(autojump_clock):
    policy = RetryPolicy(attempts=8, initial_delay=0.5, max_delay=3.0, jitter=0.1)
    agent, _ = new_agent(
        [flaky(f"a{i}") for i in range(7)] + [scripted_response("ok", "x")], retry=policy, seed=7
    )
    events, result = await run(agent, UserMessage("u1", "go"))
    delays = [e.retry_in for _, e in events if isinstance(e, AttemptFailed)]
    bases = [0.5, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0]
    assert len(delays) == 7
    for delay, base in zip(delays, bases, strict=True):
        assert base * 0.9 <= delay <= base * 1.1
    assert len(set(delays)) > 1  # jitter really varies


async def test_retry_after_hint_is_honoured(autojump_clock):
    agent, _ = new_agent([flaky("a1", retry_after=7.0), scripted_response("ok", "x")])
    start = trio.current_time()
    events, result = await run(agent, UserMessage("u1", "go"))
    assert [e.retry_in for _, e in events if isinstance(e, AttemptFailed)] == [7.0]
    assert trio.current_time() - start == pytest.approx(7.0)


async def test_a_retry_after_past_the_limit_gives_up_at_once(autojump_clock):
    agent, model = new_agent([flaky("a1", retry_after=3600), scripted_response("ok", "x")])
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.reason == "failed" and result.end.code == "MODEL_ERROR"
    assert model.call_count == 1


async def test_give_up_after_the_last_try_fails_the_turn(autojump_clock):
    agent, model = new_agent([flaky(f"a{i}") for i in range(6)])
    events, result = await run(agent, UserMessage("u1", "go"))
    assert model.call_count == 5  # default: 5 tries in all
    failed = [e for _, e in events if isinstance(e, AttemptFailed)]
    # every failed attempt is reported, the last one as given up (its chunks are void too)
    assert [f.retry_in for f in failed] == [0.5, 1.0, 2.0, 4.0, None]
    assert result.end == TurnFailed(
        code="MODEL_ERROR", detail="TransientModelError: 503 service unavailable"
    )
    assert result.messages == (UserMessage("u1", "go"),)


async def test_permanent_errors_are_never_retried(autojump_clock):
    agent, model = new_agent([ConnectionRefusedError("bad key"), scripted_response("ok", "x")])
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.end.code == "MODEL_ERROR" and model.call_count == 1


async def test_cancelling_a_turn_during_a_backoff(autojump_clock):
    agent, model = new_agent([flaky("a1", retry_after=30.0), scripted_response("ok", "x")])
    with trio.move_on_after(10):
        await agent.prompt(UserMessage("u1", "go"))
    assert model.call_count == 1  # cancelled while waiting, before the second try
    assert agent.messages == (UserMessage("u1", "go"),)
    # the session goes on: the next turn uses the next script entry
    result = await agent.prompt(UserMessage("u2", "again"))
    assert result.end == TurnCompleted()


async def test_run_cancel_during_backoff_gives_a_cancelled_turn(autojump_clock):
    agent, model = new_agent([flaky("a1", retry_after=30.0), scripted_response("ok", "x")])
    async with agent.turn(UserMessage("u1", "go")) as turn:
        async for event in turn:
            if isinstance(event, AttemptFailed):
                turn.cancel()
    assert turn.result.end == TurnCancelled() and turn.result.steps == 1
    assert model.call_count == 1


async def test_tools_are_never_retried(autojump_clock):
    runs = []

    @tool
    async def send_email(to: str) -> str:
        runs.append(to)
        raise TransientModelError("smtp timeout")  # even a 'transient' error from a tool

    model = ScriptedModel(
        [
            scripted_response("r1", [call("send_email", "c1", {"to": "a@b"})]),
            scripted_response("r2", "ok"),
        ]
    )
    agent = Agent(model=model, tools=ToolRegistry([send_email]))
    result = await agent.prompt(UserMessage("u1", "go"))
    assert runs == ["a@b"] and result.messages[2].is_error


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attempts": 0},
        {"initial_delay": 0},
        {"max_delay": -1},
        {"jitter": 1},
        {"max_retry_after": float("inf")},
        {"attempts": 2.5},
    ],
)
def test_bad_retry_policies_raise(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


async def test_grouped_transient_errors_are_retried(autojump_clock):
    """A transient error inside an exception group (from a nursery) was not retried."""
    group = ExceptionGroup("from a nursery", [TransientModelError("429", retry_after=2.0)])
    agent, model = agent_with([group, scripted_response("ok", "x")], retry=RetryPolicy(jitter=0))
    events = []
    async with agent.turn(u("u1")) as run:
        async for event in run:
            events.append(event)
    assert run.result.end == TurnCompleted()
    assert [e.retry_in for e in events if isinstance(e, AttemptFailed)] == [2.0]
