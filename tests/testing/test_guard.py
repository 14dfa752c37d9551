"""trio_agent.testing.block_network: real providers refuse to connect (issue 17, item 6)."""

from __future__ import annotations

import pytest
import trio

from trio_agent import (
    Agent,
    AnthropicModel,
    OpenAIChatModel,
    OpenAIResponsesModel,
    RetryPolicy,
    ToolRegistry,
    UserMessage,
    run_agent_loop,
)
from trio_agent.model import ModelRequest, ModelRequestError
from trio_agent.providers.http import _connection
from trio_agent.testing import NetworkBlockedError, _guard, block_network

pytest_plugins = ["pytester"]


HERE = "tests/testing/test_guard.py"
KEY = "sk-test-0123456789"  # a one-letter key would be scrubbed out of every message
PROVIDERS = {
    "openai": lambda url: OpenAIChatModel(
        "gpt-4o-mini", api_key=KEY, base_url=f"{url}/v1", proxy=None
    ),
    "anthropic": lambda url: AnthropicModel(
        "claude-sonnet-4-5", api_key=KEY, base_url=url, proxy=None
    ),
    "responses": lambda url: OpenAIResponsesModel(
        "gpt-5", api_key=KEY, base_url=f"{url}/v1", proxy=None
    ),
}


def request() -> ModelRequest:
    return ModelRequest(id="request-001", messages=(UserMessage("u1", "hi"),), tools=())


def blocked() -> bool:
    return any(guard is _guard._refuse for guard in _connection._guards)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_real_provider_fails_the_turn_naming_where_and_the_test(provider):
    model = PROVIDERS[provider]("https://api.example.invalid")
    agent = Agent(model=model, retry=RetryPolicy(attempts=5, jitter=0))
    with block_network():
        async with model:
            events = []
            async with agent.turn("hi") as run:
                async for event in run:
                    events.append(event)
    end = run.result.end
    assert end.reason == "failed" and end.code == "MODEL_ERROR"
    assert "tried to connect to https://api.example.invalid:443 while the network is blocked" in (
        end.detail
    )
    test = f"{HERE}::test_a_real_provider_fails_the_turn_naming_where_and_the_test[{provider}]"
    assert f"(test {test})" in end.detail
    # a ModelRequestError: never retried (the policy would allow 5 attempts)
    failed = [e for e in events if e.type == "attempt.failed"]
    assert len(failed) == 1 and failed[0].retry_in is None
    assert not blocked()


async def test_the_error_carries_the_origin_and_the_given_test_label():
    model = OpenAIChatModel("m", api_key=KEY, base_url="http://127.0.0.1:9/v1", proxy=None)
    async with model:
        with block_network("my suite: offline"):
            with pytest.raises(NetworkBlockedError) as caught:
                async with model.stream(request()):
                    pass  # pragma: no cover - never opened
    error = caught.value
    assert isinstance(error, ModelRequestError)
    assert error.origin == "http://127.0.0.1:9" and error.test == "my suite: offline"
    assert str(error) == (
        "trio-agent: OpenAI tried to connect to http://127.0.0.1:9 while the network is "
        "blocked (test my suite: offline); give the agent an offline model (ScriptedModel, "
        "ReplayModel)"
    )


async def test_run_agent_loop_fails_with_model_error():
    model = AnthropicModel("c", api_key=KEY, base_url="http://127.0.0.1:9", proxy=None)
    async with model:
        with block_network():
            run = run_agent_loop(
                messages=[UserMessage("u1", "hi")], model=model, tools=ToolRegistry(), max_steps=2
            )
            result = await run.wait()
    assert result.status == "failed" and result.code == "MODEL_ERROR"
    assert "while the network is blocked" in result.detail


def test_guards_nest_and_restore_the_real_connect_even_on_error():
    assert not blocked()
    with pytest.raises(RuntimeError, match="boom"):
        with block_network():
            assert blocked()
            with block_network("inner"):
                assert blocked()
            assert blocked()  # the outer guard still holds
            raise RuntimeError("boom")
    assert not blocked()


def test_guards_left_out_of_order_keep_blocking_until_the_last():
    first, second = block_network("first"), block_network("second")
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # as concurrent tasks may leave them
    assert blocked()
    second.__exit__(None, None, None)
    assert not blocked()


async def test_the_innermost_label_is_named(autojump_clock):
    model = OpenAIChatModel("m", api_key=KEY, base_url="http://127.0.0.1:9/v1", proxy=None)
    async with model:
        with block_network("outer"), block_network("inner"):
            with pytest.raises(NetworkBlockedError, match=r"\(test inner\)"):
                async with model.stream(request()):
                    pass  # pragma: no cover - never opened


async def test_a_refused_connect_is_a_checkpoint_and_can_be_cancelled():
    model = OpenAIChatModel("m", api_key=KEY, base_url="http://127.0.0.1:9/v1", proxy=None)
    async with model:
        with block_network(), trio.CancelScope() as scope:
            scope.cancel()
            async with model.stream(request()):
                pass  # pragma: no cover - never opened
    assert scope.cancelled_caught


async def test_the_fixture_blocks_one_test_and_names_it(network_blocked):
    assert blocked()
    model = OpenAIChatModel("m", api_key=KEY, base_url="http://127.0.0.1:9/v1", proxy=None)
    async with model:
        result = await Agent(model=model).prompt("hi")
    assert result.end.code == "MODEL_ERROR"
    assert f"(test {HERE}::test_the_fixture_blocks_one_test_and_names_it)" in result.end.detail


def test_without_the_fixture_or_option_nothing_is_blocked():
    assert not blocked()


SUITE = """
import os

from trio_agent import Agent, OpenAIChatModel
from trio_agent.providers.http import _connection


async def test_calls_out():
    if os.environ["EXPECT_BLOCKED"] == "0":
        assert not _connection._guards
        return
    model = OpenAIChatModel(
        "m", api_key="sk-test-0123456789", base_url="https://api.example.invalid/v1", proxy=None
    )
    async with model:
        result = await Agent(model=model).prompt("hi")
    assert result.end.code == "MODEL_ERROR"
    assert "(test test_suite.py::test_calls_out)" in result.end.detail
"""


@pytest.mark.parametrize(
    ("ini", "args", "expect"),
    [
        ("", ["--trio-agent-block-network"], "1"),
        ("trio_agent_block_network = true\n", [], "1"),
        ("trio_agent_block_network = false\n", ["--trio-agent-block-network"], "1"),
        ("", [], "0"),
        ("trio_agent_block_network = false\n", [], "0"),
    ],
)
def test_the_plugin_option_blocks_a_whole_suite(pytester, monkeypatch, ini, args, expect):
    pytester.makeini(f"[pytest]\ntrio_mode = true\n{ini}")
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("EXPECT_BLOCKED", expect)
    result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(passed=1)
    assert not blocked()  # put back after the inner session


async def test_outside_pytest_and_without_a_label_no_test_is_named(monkeypatch):
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    model = OpenAIChatModel("m", api_key=KEY, base_url="http://127.0.0.1:9/v1", proxy=None)
    async with model:
        with block_network(), pytest.raises(NetworkBlockedError) as caught:
            async with model.stream(request()):
                pass  # pragma: no cover - never opened
    assert caught.value.test is None
    assert "blocked; give the agent" in str(caught.value) and "(test" not in str(caught.value)


async def test_a_connection_through_a_proxy_names_the_proxy():
    model = OpenAIChatModel(
        "m", api_key=KEY, base_url="https://api.example.invalid/v1", proxy="http://127.0.0.1:3128"
    )
    async with model:
        with block_network(), pytest.raises(NetworkBlockedError) as caught:
            async with model.stream(request()):
                pass  # pragma: no cover - never opened
    assert caught.value.origin == (
        "https://api.example.invalid:443 (through the proxy http://127.0.0.1:3128)"
    )


def test_guards_entered_and_left_by_many_threads_leave_nothing_behind():
    # Before: no lock; a guard could stay installed for good, or be missing
    # while a block was active (found by review).
    import sys
    import threading

    missing = []

    def work() -> None:
        for _ in range(2000):
            with block_network("t"):
                if not blocked():
                    missing.append(1)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert missing == [] and not blocked() and _guard._active == []
