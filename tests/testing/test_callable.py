"""``CallableModel``: a response computed from the request by a function, sync or
async, its errors and its cancellation."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio

from trio_agent import (
    Agent,
    ModelRequest,
    RetryPolicy,
    TextDelta,
    ToolRegistry,
    TransientModelError,
    UserMessage,
)
from trio_agent.testing import CallableModel, scripted_response


def request(n: int = 1, text: str = "hi") -> ModelRequest:
    return ModelRequest(id=f"request-{n:03d}", messages=(UserMessage("u1", text),), tools=())


async def read(model: Any, req: ModelRequest) -> tuple[list[Any], Any]:
    async with model.stream(req) as stream:
        chunks = [chunk async for chunk in stream]
        return chunks, await stream.response()


def echo(req: ModelRequest) -> Any:
    return scripted_response(f"r-{req.id}", f"echo: {req.messages[-1].content}")


async def test_a_sync_function_answers_from_the_request_inside_an_agent():
    model = CallableModel(echo)
    agent = Agent(model=model, tools=ToolRegistry([]))
    first = await agent.prompt(UserMessage("u1", "hello"))
    second = await agent.prompt(UserMessage("u2", "again"))
    assert (first.final_text, second.final_text) == ("echo: hello", "echo: again")
    assert [r.id for r in model.requests] == ["request-001", "request-002"]
    assert model.call_count == 2 and len(model.requests[1].messages) == 3


async def test_an_async_function_is_awaited_and_its_answer_streamed_in_chunks():
    seen: list[str] = []

    async def answer(req: ModelRequest) -> Any:
        await trio.lowlevel.checkpoint()
        seen.append(req.id)
        return scripted_response("r1", "abcdef", text_chunks=3)

    model = CallableModel(answer, record_requests=False)
    chunks, response = await read(model, request(7))
    assert chunks == [TextDelta("ab"), TextDelta("cd"), TextDelta("ef")]
    assert response.request_id == "request-007" and response.id == "r1"
    assert seen == ["request-007"] and model.requests == [] and model.call_count == 1


async def test_an_error_from_the_function_is_the_models_error_as_it_is():
    boom = RuntimeError("boom")

    def fail(req: ModelRequest) -> Any:
        raise boom

    with pytest.raises(RuntimeError) as caught:
        await read(CallableModel(fail), request())
    assert caught.value is boom


async def test_a_transient_model_error_stays_one_and_the_session_retries_it(autojump_clock):
    attempts = itertools.count(1)

    def flaky(req: ModelRequest) -> Any:
        if next(attempts) == 1:
            raise TransientModelError("rate limited")
        return echo(req)

    model = CallableModel(flaky)
    agent = Agent(model=model, tools=ToolRegistry([]), retry=RetryPolicy(jitter=0))
    result = await agent.prompt(UserMessage("u1", "hi"))
    assert result.final_text == "echo: hi" and model.call_count == 2


async def test_returning_anything_but_a_scripted_response_is_a_type_error():
    with pytest.raises(TypeError, match="ScriptedResponse"):
        await read(CallableModel(lambda req: "plain text"), request())
    with pytest.raises(TypeError, match="callable"):
        CallableModel("not a function")  # type: ignore[arg-type]


async def test_cancellation_reaches_an_async_function():
    finished = []

    async def slow(req: ModelRequest) -> Any:
        await trio.sleep_forever()
        finished.append(req.id)  # never reached
        raise AssertionError

    with trio.move_on_after(0.01) as scope:
        await read(CallableModel(slow), request())
    assert scope.cancelled_caught and finished == []
