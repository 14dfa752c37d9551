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

import importlib
import importlib.util
import math
import sys
import warnings
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Final

import msgspec
import trio
from msgspec import Meta, Struct

from ..model import Usage

__all__ = [
    "Price",
    "charge",
    "check_prices",
    "cost_of",
    "flat_price",
    "genai_installed",
    "priced",
    "priced_turn",
    "warm_up",
]

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
        if isinstance(price, Price):
            price = msgspec.structs.asdict(price)  # checked as given: Price() checks nothing
        if not isinstance(price, Mapping):
            raise TypeError(f"prices[{name!r}] must be a Price, got {price!r:.80}")
        try:
            price = msgspec.convert(price, Price)
        except msgspec.ValidationError as exc:
            raise ValueError(f"prices[{name!r}]: {exc}") from None
        rates = (price.input, price.output, price.cache_read, price.cache_write)
        if not all(rate is None or math.isfinite(rate) for rate in rates):
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


_TIERED: Final = "tiered"
"""A model genai-prices prices in tiers (by the request's size): priced per call."""
_looked_up: dict[tuple[str, str], Price | str | None] = {}


def _genai_prices() -> Any:
    """The genai-prices module if it is imported already (``warm_up`` imports it,
    in a thread), else None: never imported on the trio thread by a turn."""
    return sys.modules.get("genai_prices")


def _genai_usage(genai: Any, usage: Usage, provider: str) -> Any:
    """``usage`` in genai-prices' terms: its ``input_tokens`` include the cached."""
    extra = usage.cache_read_tokens + usage.cache_write_tokens if provider == "anthropic" else 0
    return genai.Usage(
        input_tokens=usage.input_tokens + extra,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )


def _rate(value: object) -> float | None:
    return float(value) if isinstance(value, int | float | Decimal) else None


def _from_genai_prices(genai: Any, model: str, provider: str) -> Price | str | None:
    """The package's price of ``model``: a flat ``Price`` (looked up once per
    model), ``_TIERED`` when it prices by tiers, None when it does not know it."""
    key = (provider, model)
    if key in _looked_up:
        return _looked_up[key]
    found: Price | str | None = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            price = genai.calc_price(
                genai.Usage(input_tokens=1), model, provider_id=provider or None
            ).model_price
        names = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok")
        given = [getattr(price, name, None) for name in names]
        rates = [_rate(value) for value in given]
        if any(
            value is not None and rate is None for value, rate in zip(given, rates, strict=True)
        ):
            found = _TIERED
        elif rates[0] is not None and rates[1] is not None:
            read, write = rates[2], rates[3]
            found = Price(
                input=rates[0] / _PER_MTOK,
                output=rates[1] / _PER_MTOK,
                cache_read=None if read is None else read / _PER_MTOK,
                cache_write=None if write is None else write / _PER_MTOK,
            )
    except (LookupError, ValueError, TypeError, AttributeError, ArithmeticError):
        found = None
    if len(_looked_up) > 1000:
        _looked_up.clear()
    _looked_up[key] = found
    return found


async def warm_up() -> None:
    """Import genai-prices in a worker thread, once, if it is installed (its
    import takes a few hundred milliseconds: not on the trio thread).
    Cancellation: it finishes (shielded, once per process)."""
    global _warmed
    if _warmed:
        return
    _warmed = True
    if _genai_prices() is None and importlib.util.find_spec("genai_prices") is not None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(importlib.import_module, "genai_prices")


_warmed = False


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
    price: Price | str | None = None if prices is None else prices.get(name)
    genai = _genai_prices() if price is None else None
    if genai is not None:
        price = _from_genai_prices(genai, name, provider)
        if price == _TIERED:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    total = genai.calc_price(
                        _genai_usage(genai, usage, provider), name, provider_id=provider or None
                    ).total_price
            except (LookupError, ValueError, TypeError, AttributeError, ArithmeticError):
                return None
            return float(total)
    return None if not isinstance(price, Price) else _cost(price, usage, provider)


def priced(usage: Usage, model: object, prices: Mapping[str, Price] | None = None) -> Usage:
    """``usage`` with its ``cost`` set when it can be known."""
    cost = cost_of(usage, model, prices)
    return usage if cost is None else msgspec.structs.replace(usage, cost=cost)


async def priced_turn(
    usage: Usage, model: object, prices: Mapping[str, Price] | None = None
) -> Usage:
    """``priced``, for a turn: genai-prices imported in a thread first (once).
    ``model`` may be a list of ``(model, usage)``, each answer with the model that
    gave it (a ``FallbackModel``'s turn): the cost is theirs summed, if each is known."""
    if type(model) is list:
        if not _warmed:
            await warm_up()
        costs = [cost_of(part, answered, prices) for answered, part in model]
        if not costs or any(cost is None for cost in costs):
            return usage
        return msgspec.structs.replace(usage, cost=sum(cost for cost in costs if cost is not None))
    if not _warmed and _names(model, None)[0] is not None:
        await warm_up()
    return priced(usage, model, prices)


def flat_price(
    model: object, prices: Mapping[str, Price] | None = None, *, provider: str | None = None
) -> tuple[Price, str] | str:
    """The flat ``Price`` of ``model`` (a model object, or its name with its
    ``provider``) and the provider it is billed as, for a cost limit to add up
    response by response: from ``prices``, else from genai-prices if it is
    imported (``warm_up``) and prices the model flat. Else why it has none (a
    sentence naming the model)."""
    name, provider = _names(model, provider)
    if name is None:
        return f"{type(model).__qualname__} has no model name to look its price up by"
    price = None if prices is None else prices.get(name)
    if price is not None:
        return price, provider
    genai = _genai_prices()
    if genai is None:
        return f"no price for model {name!r}: pass prices={{{name!r}: Price(...)}}"
    found = _from_genai_prices(genai, name, provider)
    if isinstance(found, Price):
        return found, provider
    if found == _TIERED:
        return (
            f"genai-prices prices model {name!r} in tiers (by request size): pass "
            f"prices={{{name!r}: Price(...)}} for a cost limit"
        )
    return f"no price for model {name!r} (genai-prices does not know it): pass prices="


def charge(price: Price, usage: Usage, provider: str) -> float:
    """What ``usage`` costs at ``price``, billed as ``provider`` bills it."""
    return _cost(price, usage, provider)


def genai_installed() -> bool:
    """Whether genai-prices can be imported (without importing it)."""
    return importlib.util.find_spec("genai_prices") is not None
