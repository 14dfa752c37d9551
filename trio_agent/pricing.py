"""What tokens cost: ``Price`` (US dollars per token), ``cost_of(usage, model)``.

Prices come from the ``prices=`` table given (model name to ``Price``), else
from the ``genai-prices`` package when it is installed (the ``[prices]``
extra), else they are unknown and the cost is None: never a guess. A turn's
``TurnResult.usage.cost`` is priced so; ``trio-agent show`` and the CLI's
summary print it.

Token counts follow ``Usage``: OpenAI's ``input_tokens`` include the cached
ones, Anthropic's do not; both are priced as their provider bills them.
"""

from __future__ import annotations

from ._public import publish as _publish
from .telemetry._pricing import Price as Price
from .telemetry._pricing import check_prices as check_prices
from .telemetry._pricing import cost_of as cost_of
from .telemetry._pricing import priced as priced
from .telemetry._pricing import priced_turn as priced_turn
from .telemetry._pricing import warm_up as warm_up

__all__ = [
    "Price",
    "check_prices",
    "cost_of",
    "priced",
    "priced_turn",
    "warm_up",
]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
