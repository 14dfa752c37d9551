"""Pricing defects (issue 21 review)."""

import math

import pytest
from genai_prices import Usage as GUsage
from genai_prices import calc_price

from trio_agent import Agent
from trio_agent.model import Usage
from trio_agent.pricing import Price, check_prices, cost_of


def test_anthropic_cache_writes_are_priced_at_the_input_price():
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
def test_tiered_models_get_no_cost_although_genai_prices_knows_them(model, provider):
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


def test_negative_and_nan_prices_are_accepted():
    with pytest.raises((TypeError, ValueError)):
        check_prices({"m": Price(input=-3e-6, output=-15e-6)})


def test_nan_cache_price_is_accepted():
    with pytest.raises((TypeError, ValueError)):
        check_prices({"m": Price(input=3e-6, output=15e-6, cache_read=math.nan)})


def test_a_non_number_price_is_accepted_by_agent():
    with pytest.raises((TypeError, ValueError)):
        Agent(
            model=__import__("trio_agent.testing", fromlist=["x"]).ScriptedModel([]),
            prices={"m": Price(input=1e-6, output=1e-6, cache_write="free")},
        )
