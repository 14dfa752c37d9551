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

import math
import warnings
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Final

import msgspec
from msgspec import Meta, Struct

from .model import Usage

__all__ = ["Price", "check_prices", "cost_of", "priced"]

_PER_MTOK: Final = 1_000_000


class Price(Struct, frozen=True, kw_only=True):
    """US dollars per token of each kind (``3e-6`` is $3 per million tokens);
    cached input at ``cache_read`` and ``cache_write`` (the input price when
    not given)."""

    input: Annotated[float, Meta(ge=0)]
    output: Annotated[float, Meta(ge=0)]
    cache_read: Annotated[float, Meta(ge=0)] | None = None
    cache_write: Annotated[float, Meta(ge=0)] | None = None


def check_prices(prices: object) -> dict[str, Price] | None:
    """``prices=``: None, or a mapping of model names to ``Price``s (a dict of its
    fields is taken too); a ``TypeError``/``ValueError`` saying what is wrong."""
    if prices is None:
        return None
    if not isinstance(prices, Mapping):
        raise TypeError(f"prices must be a mapping of model names to Price, got {prices!r:.80}")
    checked: dict[str, Price] = {}
    for name, price in prices.items():
        if type(name) is not str or not name:
            raise TypeError(f"prices: a model name must be a non-empty str, got {name!r}")
        if isinstance(price, Mapping):
            try:
                price = msgspec.convert(price, Price)
            except msgspec.ValidationError as exc:
                raise ValueError(f"prices[{name!r}]: {exc}") from None
        if not isinstance(price, Price):
            raise TypeError(f"prices[{name!r}] must be a Price, got {price!r:.80}")
        if not all(math.isfinite(v) for v in (price.input, price.output)):
            raise ValueError(f"prices[{name!r}] must be finite numbers")
        checked[name] = price
    return checked


def _billed(usage: Usage, provider: str) -> tuple[int, int, int, int]:
    """(uncached input, cache reads, cache writes, output), as billed."""
    cached = usage.cache_read_tokens + usage.cache_write_tokens
    if provider == "anthropic":  # its input_tokens leave the cached ones out
        return (
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            (usage.output_tokens),
        )
    return (
        max(usage.input_tokens - cached, 0),
        usage.cache_read_tokens,
        (usage.cache_write_tokens),
        usage.output_tokens,
    )


def _cost(price: Price, usage: Usage, provider: str) -> float:
    fresh, read, write, output = _billed(usage, provider)
    read_price = price.input if price.cache_read is None else price.cache_read
    write_price = price.input if price.cache_write is None else price.cache_write
    return fresh * price.input + read * read_price + write * write_price + output * price.output


_looked_up: dict[tuple[str, str], Price | None] = {}


def _from_genai_prices(model: str, provider: str) -> Price | None:
    """The package's price of ``model`` as a flat ``Price`` (looked up once per
    model); None when it is not installed, does not know the model, or prices
    it in tiers."""
    key = (provider, model)
    if key in _looked_up:
        return _looked_up[key]
    price: Price | None = None
    try:
        import genai_prices  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        _looked_up[key] = None
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found: Any = genai_prices.calc_price(
                genai_prices.Usage(input_tokens=1), model, provider_id=provider or None
            ).model_price
        rates = [getattr(found, f, None) for f in ("input_mtok", "output_mtok", "cache_read_mtok")]
        flat = all(r is None or isinstance(r, int | float | Decimal) for r in rates)
        if flat and rates[0] is not None and rates[1] is not None:
            price = Price(
                input=float(rates[0]) / _PER_MTOK,
                output=float(rates[1]) / _PER_MTOK,
                cache_read=None if rates[2] is None else float(rates[2]) / _PER_MTOK,
            )
    except (LookupError, ValueError, TypeError, AttributeError):
        price = None
    if len(_looked_up) > 1000:
        _looked_up.clear()
    _looked_up[key] = price
    return price


def _names(model: object, provider: str | None) -> tuple[str | None, str]:
    if isinstance(model, str):
        return model, (provider or "").lower()
    name = getattr(model, "model", None)
    given = getattr(model, "provider", "") if provider is None else provider
    return (name if isinstance(name, str) else None), (
        given.lower() if isinstance(given, str) else ""
    )


def cost_of(
    usage: Usage,
    model: object,
    prices: Mapping[str, Price] | None = None,
    *,
    provider: str | None = None,
) -> float | None:
    """What ``usage`` cost with ``model`` (a model object, or its name with its
    ``provider``: ``openai``, ``anthropic``), in US dollars: from ``prices`` when
    it names the model, else from ``genai-prices`` when installed, else None."""
    name, provider = _names(model, provider)
    if name is None:
        return None
    price = None if prices is None else prices.get(name)
    if price is None:
        price = _from_genai_prices(name, provider)
    return None if price is None else _cost(price, usage, provider)


def priced(usage: Usage, model: object, prices: Mapping[str, Price] | None = None) -> Usage:
    """``usage`` with its ``cost`` set when it can be known."""
    cost = cost_of(usage, model, prices)
    return usage if cost is None else msgspec.structs.replace(usage, cost=cost)
