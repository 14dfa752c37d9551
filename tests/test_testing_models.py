"""CallableModel (a response computed from the request) and schema-driven runs (SchemaModel)."""

from __future__ import annotations

import inspect
import itertools
from typing import Annotated, Any, Literal, Optional

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_agent import (
    Agent,
    ModelRequest,
    RetryPolicy,
    TextDelta,
    ToolCall,
    ToolRegistry,
    TransientModelError,
    UserMessage,
    tool,
)
from trio_agent.testing import (
    CallableModel,
    SchemaError,
    SchemaModel,
    schema_arguments,
    scripted_response,
    tool_calls_for,
)
from trio_agent.tools import execute_tool_call

# --- CallableModel ---------------------------------------------------------------------


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


# --- three typed tools, for schema-driven runs -------------------------------------------


class Line(msgspec.Struct):
    sku: Annotated[str, msgspec.Meta(min_length=1, max_length=6)]
    quantity: Annotated[int, msgspec.Meta(ge=1, le=99)] = 1


class Order(msgspec.Struct):
    lines: list[Line]
    priority: Literal["low", "high"] = "low"


CALLS: list[tuple[str, dict[str, Any]]] = []


@tool
async def add(left: int, right: Annotated[int, msgspec.Meta(ge=0, le=10)]) -> dict[str, int]:
    """Add two numbers."""
    assert type(left) is int and 0 <= right <= 10
    CALLS.append(("add", {"left": left, "right": right}))
    return {"sum": left + right}


@tool
async def place(order: Order, note: Optional[str] = None) -> str:  # noqa: UP045 (as users write it)
    """Place an order."""
    assert isinstance(order, Order) and all(isinstance(line, Line) for line in order.lines)
    assert note is None or isinstance(note, str)
    CALLS.append(("place", {"order": order, "note": note}))
    return f"{len(order.lines)} lines"


@tool
def label(kind: Literal["a", "b", 3], text: Annotated[str, msgspec.Meta(max_length=4)]) -> str:
    """Label something (a plain def: it runs in a thread)."""
    assert kind in ("a", "b", 3) and len(text) <= 4
    CALLS.append(("label", {"kind": kind, "text": text}))
    return f"{kind}:{text}"


TOOLS = [add, place, label]


@pytest.fixture(autouse=True)
def _clear_calls():
    CALLS.clear()


# --- SchemaModel and tool_calls_for --------------------------------------------------------


async def test_schema_model_runs_every_tool_body_with_valid_arguments():
    model = SchemaModel(final_text="all done")
    agent = Agent(model=model, tools=ToolRegistry(TOOLS))
    result = await agent.prompt(UserMessage("u1", "go"))
    assert result.final_text == "all done" and result.end.reason == "completed"
    assert sorted(name for name, _ in CALLS) == ["add", "label", "place"]
    results = [m for m in result.messages if type(m).__name__ == "ToolResultMessage"]
    assert len(results) == 3 and not any(m.is_error for m in results)
    assert [c.name for c in model.calls] == ["add", "place", "label"]
    assert model.call_count == 2 and len(model.requests[1].messages) == 5


async def test_schema_model_calls_each_named_tool_calls_per_tool_times_per_turn():
    model = SchemaModel(["add", "label"], seed=3, calls_per_tool=4)
    agent = Agent(model=model, tools=ToolRegistry(TOOLS))
    await agent.prompt(UserMessage("u1", "go"))
    await agent.prompt(UserMessage("u2", "again"))
    assert sorted(name for name, _ in CALLS) == ["add"] * 8 + ["label"] * 8
    assert len({c.id for c in model.calls}) == 16  # unique across turns


async def test_schema_model_refuses_a_tool_the_request_does_not_offer():
    model = SchemaModel(["nope"])
    result = await Agent(model=model, tools=ToolRegistry(TOOLS)).prompt("go")
    assert result.end.reason != "completed" and CALLS == []


def test_tool_calls_are_deterministic_for_a_seed_and_vary_between_seeds():
    first = tool_calls_for(TOOLS, seed=11, calls_per_tool=5)
    assert first == tool_calls_for(ToolRegistry(TOOLS), seed=11, calls_per_tool=5)
    assert [c.id for c in first[:2]] == ["call-add-1", "call-add-2"]
    others = [tool_calls_for(TOOLS, seed=s, calls_per_tool=5) for s in range(3)]
    assert all(o != first for o in others)


async def test_two_schema_models_with_one_seed_make_the_same_run():
    runs = []
    for _ in range(2):
        model = SchemaModel(seed="s", calls_per_tool=2)
        await Agent(model=model, tools=ToolRegistry(TOOLS)).prompt("go")
        runs.append(model.calls)
    assert runs[0] == runs[1] and len(runs[0]) == 6


def test_a_required_pattern_is_a_schema_error_naming_the_tool():
    @tool
    async def coded(code: Annotated[str, msgspec.Meta(pattern="^[A-Z]{3}$")]) -> str:
        return code

    with pytest.raises(SchemaError, match=r"'coded'.*pattern"):
        tool_calls_for([coded])


# --- schema_arguments: hypothesis over the tools above and over generated signatures ----


@given(st.data())
@settings(max_examples=150, deadline=None)
def test_schema_arguments_pass_each_tools_own_validation(data):
    chosen = data.draw(st.sampled_from(TOOLS))
    arguments = data.draw(schema_arguments(chosen.parameters))
    CALLS.clear()
    result = trio.run(
        execute_tool_call, ToolRegistry(TOOLS), ToolCall("c1", chosen.name, arguments)
    )
    assert not result.is_error, result.content
    assert [name for name, _ in CALLS] == [chosen.name]


_names = itertools.count()


def _leaf_types() -> st.SearchStrategy[Any]:
    bounded = st.integers(-5, 5).flatmap(
        lambda low: st.integers(low, low + 20).map(
            lambda high: Annotated[int, msgspec.Meta(ge=low, le=high)]
        )
    )
    sized = st.integers(0, 4).map(
        lambda low: Annotated[str, msgspec.Meta(min_length=low, max_length=low + 3)]
    )
    literal = st.lists(st.sampled_from(["x", "y", 1, 2]), min_size=1, unique=True).map(
        lambda values: Literal[tuple(values)]  # type: ignore[misc]
    )
    positive = st.just(Annotated[float, msgspec.Meta(gt=0, lt=1)])
    return (
        st.sampled_from([int, float, str, bool, Any, bytes]) | bounded | sized | literal | positive
    )


def _struct_of(fields: list[Any]) -> Any:
    return msgspec.defstruct(f"S{next(_names)}", [(f"f{i}", t) for i, t in enumerate(fields)])


def _types() -> st.SearchStrategy[Any]:
    return st.recursive(
        _leaf_types(),
        lambda inner: st.one_of(
            inner.map(lambda t: list[t]),  # type: ignore[valid-type]
            inner.map(lambda t: Optional[t]),  # noqa: UP045
            inner.map(lambda t: dict[str, t]),  # type: ignore[valid-type]
            st.lists(inner, min_size=1, max_size=3).map(_struct_of),
        ),
        max_leaves=6,
    )


def _tool_taking(types: list[Any], ran: list[dict[str, Any]]) -> Any:
    """A ``@tool`` whose keyword parameters have ``types``; its body records its arguments."""

    async def body(**kwargs: Any) -> str:
        ran.append(kwargs)
        return "ran"

    parameters = [
        inspect.Parameter(f"p{i}", inspect.Parameter.KEYWORD_ONLY, annotation=t)
        for i, t in enumerate(types)
    ]
    body.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    body.__annotations__ = {p.name: p.annotation for p in parameters}
    return tool(name="generated")(body)


@given(st.lists(_types(), min_size=1, max_size=4), st.data(), st.integers(0, 2**32))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_arguments_for_any_generated_signature_reach_the_tool_body(types, data, seed):
    ran: list[dict[str, Any]] = []
    generated = _tool_taking(types, ran)
    calls = [ToolCall("c0", "generated", data.draw(schema_arguments(generated.parameters)))]
    calls += tool_calls_for([generated], seed=seed, calls_per_tool=2)

    async def run_all() -> list[Any]:
        return [await execute_tool_call(ToolRegistry([generated]), c) for c in calls]

    results = trio.run(run_all)
    assert [r.content for r in results if r.is_error] == []
    assert len(ran) == 3
