"""Costs (issue 21, item 5): ``Usage.cost`` from ``prices=`` or the genai-prices
package; never a guess when the price is unknown; prices checked when given;
``show`` and the CLI's summary print the cost."""

from __future__ import annotations

import math

import pytest
from genai_prices import Usage as GUsage
from genai_prices import calc_price

from trio_agent import Agent, Usage
from trio_agent.pricing import Price, check_prices, cost_of, priced
from trio_agent.testing import ScriptedModel, scripted_response


class Named(ScriptedModel):
    """A scripted model with a provider's model name."""

    provider = "OpenAI"
    model = "my-model"


def test_a_price_table_prices_the_tokens():
    prices = {"my-model": Price(input=1e-6, output=4e-6, cache_read=0.5e-6)}
    usage = Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=400)
    # OpenAI counts cached tokens in input_tokens: 600 fresh, 400 cached
    assert cost_of(usage, "my-model", prices, provider="openai") == pytest.approx(
        600e-6 + 400 * 0.5e-6 + 400e-6
    )
    # Anthropic does not: 1000 fresh besides the 400 cached
    assert cost_of(usage, "my-model", prices, provider="anthropic") == pytest.approx(
        1000e-6 + 400 * 0.5e-6 + 400e-6
    )


def test_an_unknown_model_has_no_cost():
    assert cost_of(Usage(input_tokens=10), "no-such-model-anywhere", {}) is None
    assert cost_of(Usage(input_tokens=10), ScriptedModel([])) is None  # no model name
    assert priced(Usage(input_tokens=10), "no-such-model-anywhere").cost is None


def test_genai_prices_is_used_when_installed():
    pytest.importorskip("genai_prices")
    cost = cost_of(Usage(input_tokens=1_000_000), "gpt-4o-mini", provider="openai")
    assert cost == pytest.approx(0.15)


@pytest.mark.parametrize(
    ("prices", "error"),
    [
        ([1, 2], TypeError),
        ({"m": 3}, TypeError),
        ({"m": {"input": -1, "output": 1}}, ValueError),
        ({"": Price(input=1, output=1)}, TypeError),
    ],
)
def test_bad_prices_are_refused(prices, error):
    with pytest.raises(error):
        check_prices(prices)
    with pytest.raises(error):
        Agent(model=ScriptedModel([]), prices=prices)


async def test_a_turns_usage_carries_its_cost():
    script = [scripted_response("r1", "hi", usage=Usage(input_tokens=2000, output_tokens=500))]
    agent = Agent(model=Named(script), prices={"my-model": {"input": 1e-6, "output": 2e-6}})
    result = await agent.prompt("go")
    assert result.usage.cost == pytest.approx(2000e-6 + 500 * 2e-6)
    unpriced = await Agent(model=ScriptedModel([scripted_response("r1", "hi")])).prompt("go")
    assert unpriced.usage.cost is None


async def test_the_cli_summary_and_show_print_the_cost(loopback, tmp_path):
    pytest.importorskip("genai_prices")  # in the [test] extra: never skipped in CI
    import re
    import sys

    from cli_runner import cli, command
    from loopback import Reply, fixture

    ledger = tmp_path / "s.jsonl"
    loopback.replies.append(Reply(body=fixture("openai_text.sse")))
    done = await cli(command(loopback, tmp_path, "run", "--ledger", str(ledger), "say hello"))
    assert done.returncode == 0, done.stderr
    assert re.search(
        r"\[turn 1 completed; 1 step\(s\), 82 in / 17 out tokens, \$0\.000018\]",
        done.stdout.decode(),
    )
    shown = await cli([sys.executable, "-m", "trio_agent", "show", str(ledger)])
    assert re.search(r"usage: 82 input / 17 output tokens; cost \$0\.000018", shown.stdout.decode())


def test_anthropic_cache_writes_are_priced_at_the_cache_write_price():
    """Issue 21 (review of pricing): Anthropic cache writes were priced at the input price, not the
    cache write price genai-prices gives."""
    # claude-3-5-haiku: input $0.80/MTok, cache write $1.00/MTok, read $0.08, output $4
    usage = Usage(input_tokens=0, output_tokens=0, cache_write_tokens=1_000_000)
    ours = cost_of(usage, "claude-3-5-haiku-latest", provider="anthropic")
    theirs = calc_price(
        GUsage(input_tokens=1_000_000, cache_write_tokens=1_000_000),
        "claude-3-5-haiku-latest",
        provider_id="anthropic",
    ).total_price
    assert ours == pytest.approx(float(theirs)), (ours, theirs)  # ours 0.8, theirs 1.0


@pytest.mark.parametrize(
    ("model", "provider"),
    [("claude-sonnet-4-5", "anthropic"), ("gemini-2.5-pro", "google")],
)
def test_tiered_models_get_the_cost_genai_prices_knows(model, provider):
    """Issue 21 (review of pricing): models with tiered prices got no cost although genai-prices
    knows them."""
    usage = Usage(input_tokens=1000, output_tokens=100)
    assert (
        float(
            calc_price(
                GUsage(input_tokens=1000, output_tokens=100), model, provider_id=provider
            ).total_price
        )
        > 0
    )
    assert cost_of(usage, model, provider=provider) is not None


def test_negative_prices_are_refused():
    """Issue 21 (review of pricing): negative prices were accepted."""
    with pytest.raises((TypeError, ValueError)):
        check_prices({"m": Price(input=-3e-6, output=-15e-6)})


def test_a_nan_cache_price_is_refused():
    """Issue 21 (review of pricing): a NaN cache price was accepted."""
    with pytest.raises((TypeError, ValueError)):
        check_prices({"m": Price(input=3e-6, output=15e-6, cache_read=math.nan)})


def test_a_non_number_price_is_refused_by_agent():
    """Issue 21 (review of pricing): ``Agent(prices=...)`` accepted a price that is not a number."""
    with pytest.raises((TypeError, ValueError)):
        Agent(
            model=__import__("trio_agent.testing", fromlist=["x"]).ScriptedModel([]),
            prices={"m": Price(input=1e-6, output=1e-6, cache_write="free")},
        )


def test_a_price_that_is_no_number_is_refused_when_the_agent_is_made():
    """Issue 21 (review of telemetry): a price that is no number was taken when the agent was
    made."""
    from trio_agent.pricing import Price

    with pytest.raises(ValueError, match="cache_read"):
        Agent(
            model=ScriptedModel([]),
            prices={"m": Price(input=1e-6, output=1e-6, cache_read="x")},  # type: ignore[arg-type]
        )
