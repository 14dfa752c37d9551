"""Every option check (``engine/_options.py``): run_agent_loop validates every option
before it returns (DESIGN 7); the Agent refuses what the loop refuses, in its words
(issue 14): the step budget, ``tools=`` as any iterable of ``Tool`` (a registry for
the loop), metadata as plain JSON."""

from __future__ import annotations

import pytest
import trio
from helpers import add, user
from ledger_scenario import ok_model
from sessions import add_text, adding, wait

from trio_agent import (
    MAX_AGENT_STEPS,
    Agent,
    FallbackModel,
    ToolRegistry,
    ToolResultMessage,
    run_agent_loop,
)
from trio_agent.testing import ScriptedModel


def options(**overrides):
    base = dict(
        messages=[user()],
        model=ScriptedModel([]),
        tools=ToolRegistry([add]),
        max_steps=1,
    )
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (0, ValueError),
        (65, ValueError),
        (-1, ValueError),
        (True, TypeError),
        (False, TypeError),
        (1.0, TypeError),
        ("3", TypeError),
        (None, TypeError),
    ],
)
def test_bad_max_steps_raise_before_returning(value, error):
    with pytest.raises(error, match="max_steps"):
        run_agent_loop(**options(max_steps=value))


def test_max_steps_64_is_accepted_outside_trio():
    run = run_agent_loop(**options(max_steps=MAX_AGENT_STEPS))
    assert run.result is None


@pytest.mark.parametrize(
    ("start", "steps", "error"),
    [
        (0, 1, ValueError),
        (-3, 1, ValueError),
        (True, 1, TypeError),
        (1.0, 1, TypeError),
        (None, 1, TypeError),
        ("1", 1, TypeError),
        (2, 64, ValueError),
        (64, 2, ValueError),
        (61, 5, ValueError),
    ],
)
def test_request_range_past_64_raises(start, steps, error):
    with pytest.raises(error, match="request"):
        run_agent_loop(**options(request_sequence_start=start, max_steps=steps))


@pytest.mark.parametrize(("start", "steps"), [(1, 64), (64, 1), (60, 5), (33, 32)])
def test_request_range_ending_at_64_is_accepted(start, steps):
    run_agent_loop(**options(request_sequence_start=start, max_steps=steps))


@pytest.mark.parametrize("model", [object(), None, 3, type("NoStream", (), {"stream": 3})()])
def test_model_without_callable_stream_raises(model):
    with pytest.raises(TypeError, match="stream"):
        run_agent_loop(**options(model=model))


class AsyncDefModel:
    """The natural first try at 'Your own model': ``stream`` as an ``async def``."""

    async def stream(self, request):
        raise AssertionError("never called")


class AsyncGeneratorModel:
    async def stream(self, request):
        yield request


@pytest.mark.parametrize(
    ("model", "shape"),
    [(AsyncDefModel(), "an async function"), (AsyncGeneratorModel(), "an async generator")],
)
def test_regression_a_model_whose_stream_is_async_def_is_refused_when_made(model, shape):
    """``async def stream`` returns a coroutine, never the async context manager a
    turn enters: the turn failed later as MODEL_ERROR with Python's "'coroutine'
    object does not support the asynchronous context manager protocol" and a
    "never awaited" warning. The Agent, the loop and a FallbackModel refuse it
    when made, saying what to write instead."""
    said = rf"{type(model).__name__}\.stream is {shape}.*plain `def stream"
    with pytest.raises(TypeError, match=said):
        run_agent_loop(**options(model=model))
    with pytest.raises(TypeError, match=said):
        Agent(model=model)
    with pytest.raises(TypeError, match=said):
        FallbackModel(ScriptedModel([]), model)


@pytest.mark.parametrize(
    "hook",
    [
        "transform_context",
        "before_tool_call",
        "after_tool_call",
        "should_stop_turn",
        "compact",
        "approval",
    ],
)
def test_regression_a_hook_that_is_no_function_is_refused_saying_a_plain_def_will_do(hook):
    """The hooks page says a hook may be an async function or a plain one; the
    refusal of one that is no function said "must be an async callable", sending
    a user to rewrite a plain hook that was fine."""
    with pytest.raises(
        TypeError, match=rf"{hook} must be a function \(async def, or a plain def\)"
    ):
        Agent(model=ScriptedModel([]), **{hook: "yes"})


def test_a_str_model_is_a_model_name_and_one_without_a_provider_says_so():
    """A str is a model name (``providers.infer_model``): one that is not
    ``provider:model`` says what a name looks like, before the run exists."""
    with pytest.raises(ValueError, match="a model name is 'provider:model'"):
        run_agent_loop(**options(model="model"))


@pytest.mark.parametrize("tools", [None, [add], {"add": add}, (add,), ToolRegistry])
def test_tools_not_a_registry_raise(tools):
    with pytest.raises(TypeError, match="ToolRegistry"):
        run_agent_loop(**options(tools=tools))


@pytest.mark.parametrize("messages", [None, user(), "hello", iter([user()]), {user()}, {"a": 1}])
def test_messages_not_a_list_or_tuple_raise(messages):
    with pytest.raises(TypeError, match="list or tuple"):
        run_agent_loop(**options(messages=messages))


def test_messages_as_tuple_are_accepted():
    run_agent_loop(**options(messages=(user(),)))


def test_foreign_cancel_scope_raises():
    class FakeScope:
        def cancel(self): ...

    with pytest.raises(TypeError, match="cancel_scope"):
        run_agent_loop(**options(cancel_scope=FakeScope()))
    with pytest.raises(TypeError, match="cancel_scope"):
        run_agent_loop(**options(cancel_scope=trio.move_on_after))


async def test_used_cancel_scope_raises():
    scope = trio.CancelScope()
    with scope:
        pass
    with pytest.raises(ValueError, match="already been entered"):
        run_agent_loop(**options(cancel_scope=scope))
    active = trio.CancelScope()
    with active, pytest.raises(ValueError, match="already been entered"):
        run_agent_loop(**options(cancel_scope=active))


async def test_regression_a_scope_given_to_one_run_is_refused_for_another():
    """One cancel scope given to two runs was accepted, and the second, started after
    the first, ended Failed(INTERNAL_ERROR) with trio's RuntimeError; it is refused
    with ValueError when given, as a turn's scope is."""
    scope = trio.CancelScope()
    with pytest.raises(ValueError, match="max_parallel_tools"):  # a refused call keeps no scope
        run_agent_loop(**options(cancel_scope=scope), max_parallel_tools=0)
    first = run_agent_loop(**options(cancel_scope=scope, model=ok_model("r1")))
    with pytest.raises(ValueError, match="already given to another turn"):
        run_agent_loop(**options(cancel_scope=scope))
    with pytest.raises(ValueError, match="already given to another turn"):
        Agent(model=ScriptedModel([])).turn("x", cancel_scope=scope)
    assert (await first.wait()).status == "completed"


@pytest.mark.parametrize("how", ["wait", "async with"])
async def test_regression_a_scope_entered_before_its_run_starts_raises_valueerror(how):
    """A scope entered after run_agent_loop returned and before the run started gave
    a run.finished with Failed(INTERNAL_ERROR) and trio's RuntimeError; the run
    refuses it as run_agent_loop does, with ValueError and no event."""
    scope = trio.CancelScope()
    model = ok_model("r1")
    run = run_agent_loop(**options(cancel_scope=scope, model=model))
    with scope:
        pass
    events = []
    with pytest.raises(ValueError, match="already been entered"):
        if how == "wait":
            await run.wait()
        else:
            async with run:
                async for event in run:
                    events.append(event)
    assert events == [] and run.result is None and model.call_count == 0


def test_fresh_cancel_scope_is_accepted():
    run_agent_loop(**options(cancel_scope=trio.CancelScope()))


@pytest.mark.parametrize("system", [None, 1, b"sys", ["a"]])
def test_system_must_be_a_str(system):
    with pytest.raises(TypeError, match="system"):
        run_agent_loop(**options(system=system))


def test_options_are_keyword_only():
    with pytest.raises(TypeError):
        run_agent_loop([user()], ScriptedModel([]), ToolRegistry(), 1)  # type: ignore[misc]


def test_system_with_a_lone_surrogate_is_refused():
    """A system prompt with a lone surrogate was taken and failed later, when encoded; it is refused
    at once."""
    with pytest.raises(ValueError, match="system is not valid Unicode"):
        run_agent_loop(
            messages=[], model=ScriptedModel([]), tools=ToolRegistry(), max_steps=1, system="\ud800"
        )


@pytest.mark.parametrize("make", [list, tuple, lambda tools: (t for t in tools), ToolRegistry])
async def test_tools_may_be_any_iterable_of_tool(make):
    """Issue 14: an Agent's ``tools=`` may be any iterable of ``Tool``."""
    agent = Agent(model=ScriptedModel(adding()), tools=make([add_text, wait]))
    result = await agent.prompt("1+2")
    assert result.final_text == "3"
    assert isinstance(result.messages[2], ToolResultMessage) and not result.messages[2].is_error


def test_a_registry_given_is_kept_and_one_is_built_for_anything_else():
    """Issue 14: a registry given as ``tools=`` is kept; anything else is built into one."""
    registry = ToolRegistry([add_text])
    assert Agent(model=ScriptedModel([]), tools=registry)._state.tools is registry
    built = Agent(model=ScriptedModel([]), tools=[add_text])._state.tools
    assert type(built) is ToolRegistry and [s.name for s in built.specs()] == ["add"]


@pytest.mark.parametrize(
    ("tools", "error", "match"),
    [
        ([add_text, add_text], ValueError, "a tool named 'add' is already registered"),
        ([add_text, "wait"], TypeError, r"tools\[1\] must be a Tool, got str"),
        ([add_text, wait, None], TypeError, r"tools\[2\] must be a Tool, got NoneType"),
        (add_text, TypeError, r"pass \[tool\]"),
        ("add", TypeError, "got str"),
        ({"add": add_text}, TypeError, "got dict"),
        (3, TypeError, "got int"),
    ],
)
def test_bad_tools_are_refused_by_index(tools, error, match):
    """Issue 14: bad ``tools=`` are refused naming the index of the bad one."""
    with pytest.raises(error, match=match):
        Agent(model=ScriptedModel([]), tools=tools)


def test_run_agent_loop_still_takes_a_registry_only():
    """Issue 14: run_agent_loop still takes a registry only."""
    with pytest.raises(TypeError, match="tools must be a ToolRegistry"):
        run_agent_loop(messages=[], model=ScriptedModel([]), tools=[add_text], max_steps=1)


@pytest.mark.parametrize("bad", [0, 65, 100, True, 1.5, "3", None])
def test_agent_and_loop_refuse_the_same_step_budgets_in_the_same_words(bad):
    """Issue 14: the Agent and the loop refuse the same step budgets, in the same words."""
    with pytest.raises((TypeError, ValueError)) as loop_error:
        run_agent_loop(messages=[], model=ScriptedModel([]), tools=ToolRegistry(), max_steps=bad)
    with pytest.raises(type(loop_error.value)) as agent_error:
        Agent(model=ScriptedModel([]), max_steps=bad)
    assert str(agent_error.value) == str(loop_error.value)


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("metadata", "error", "match"),
    [
        ("provider=openai", TypeError, "metadata must be a mapping"),
        ({1: "x"}, ValueError, r"at `\$`: key 1 is not a valid str"),
        ({"k": {1, 2}}, ValueError, r"at `\$\.k`: a set is not plain JSON"),
        ({"k": [1, (2,)]}, ValueError, r"at `\$\.k\[1\]`: a tuple is not plain JSON"),
        ({"k": float("nan")}, ValueError, "not finite"),
        ({"k": 2**64}, ValueError, "64-bit range"),
        ({"k": "\ud800"}, ValueError, "not valid Unicode"),
        ({"k": _nested(40)}, ValueError, "nested deeper than 32"),
        ({"system": "x" * 70_000}, ValueError, "more than 65536"),
    ],
)
def test_metadata_must_be_plain_json(metadata, error, match):
    """Issue 14: metadata must be plain JSON, refused at the path of what is not."""
    with pytest.raises(error, match=match):
        Agent(model=ok_model(), metadata=metadata)


def test_metadata_may_hold_a_long_system_prompt():
    """Issue 14: Metadata is run configuration, not tool arguments: their 4096-character limit does
    not apply."""
    config = {"cli": {"system": "be careful. " * 2000, "max_tokens": None, "retries": 2}}
    assert Agent(model=ok_model(), metadata=config).metadata == config
