"""Costs (issue 21, item 5): ``Usage.cost`` from ``prices=`` or the genai-prices
package; never a guess when the price is unknown; ``show`` and the CLI's
summary print it."""

from __future__ import annotations

import pytest

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
