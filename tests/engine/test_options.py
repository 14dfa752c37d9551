"""run_agent_loop validates every option before it returns (DESIGN 7)."""

from __future__ import annotations

import pytest
import trio
from helpers import add, user

from trio_agent import MAX_AGENT_STEPS, ToolRegistry, run_agent_loop
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


@pytest.mark.parametrize("model", [object(), None, "model", type("NoStream", (), {"stream": 3})()])
def test_model_without_callable_stream_raises(model):
    with pytest.raises(TypeError, match="stream"):
        run_agent_loop(**options(model=model))


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
