"""Usage limits: ``UsageLimits`` (what a turn or a session may use), ``Used``
(what it used), and ``UsageMeter``, which holds a turn to its limits and the
session's."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, final

import attrs

from ..engine._fallback import FallbackModel
from ..engine._hooks import TurnState
from ..events import TurnUsageLimit
from ..model import Model, Usage
from ..telemetry._pricing import Price, charge, flat_price, genai_installed, warm_up

if TYPE_CHECKING:
    from ..ledger._derive import DerivedSession

__all__ = [
    "NOTHING_USED",
    "UsageLimits",
    "UsageMeter",
    "Used",
    "check_limits",
    "check_priced",
    "resolve_prices",
    "session_used",
]


def _count(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (type(value) is not int or value < 0):
        raise ValueError(
            f"UsageLimits: {attribute.name} must be None or an int >= 0, got {value!r}"
        )


def _dollars(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    number = value if type(value) is int or type(value) is float else None
    if value is not None and (number is None or not math.isfinite(number) or number < 0):
        raise ValueError(
            f"UsageLimits: cost must be None or a finite number >= 0 (US dollars), got {value!r}"
        )


@final
@attrs.frozen(kw_only=True)
class UsageLimits:
    """What a turn (``Agent(usage_limits=)``, ``prompt(..., usage_limits=)``) or a
    session (``Agent(session_usage_limits=)``) may use; None: no limit.

    ``requests``: model requests (steps; the retries of one are one);
    ``input_tokens``, ``output_tokens``, ``total_tokens`` (both): as the
    providers reported them; ``cost``: US dollars, priced by ``Agent(prices=)``
    or genai-prices; ``tool_calls``: calls that ran (the output tool's are not
    counted). Requests, tokens and cost are checked before each request against
    what was used so far: at or past a limit, the request is not sent and the
    turn ends with reason ``usage_limit`` (``TurnUsageLimit``). A response's own
    size is not known before it comes: the last one may take the tokens or the
    cost past a limit (``ModelSettings(max_tokens=)`` bounds it). Tool calls are
    checked before each call runs: the calls past the limit get an error result
    saying so, and the turn ends with ``usage_limit`` after its batch (every
    call answered).
    """

    requests: int | None = attrs.field(default=None, validator=_count)
    input_tokens: int | None = attrs.field(default=None, validator=_count)
    output_tokens: int | None = attrs.field(default=None, validator=_count)
    total_tokens: int | None = attrs.field(default=None, validator=_count)
    tool_calls: int | None = attrs.field(default=None, validator=_count)
    cost: float | None = attrs.field(default=None, validator=_dollars)


def check_limits(name: str, limits: object) -> UsageLimits | None:
    """``limits`` if it is None or a ``UsageLimits``; else ``TypeError`` naming ``name``."""
    if limits is not None and type(limits) is not UsageLimits:
        raise TypeError(f"{name} must be a UsageLimits or None, got {limits!r:.100}")
    return limits


def _models(model: Model) -> tuple[Model, ...]:
    return model.models if type(model) is FallbackModel else (model,)


def check_priced(
    model: Model,
    prices: Mapping[str, Price] | None,
    limits: UsageLimits | None,
    more: UsageLimits | None = None,
) -> None:
    """With a cost limit in ``limits`` or ``more``: ``ValueError`` unless each model
    that may answer has a price in ``prices``, or genai-prices is installed (it is
    looked up when a turn starts)."""
    if (limits is None or limits.cost is None) and (more is None or more.cost is None):
        return
    if genai_installed():
        return
    for each in _models(model):
        found = flat_price(each, prices)
        if isinstance(found, str):
            raise ValueError(f"a cost limit needs the price of every model: {found}")


async def resolve_prices(
    model: Model, prices: Mapping[str, Price] | None
) -> dict[int, tuple[Price, str]]:
    """The flat price of each model that may answer (by ``id``), genai-prices imported
    first (in a thread) when ``prices`` lacks one; ``ValueError`` naming a model
    none is known for. Cancellation: the import finishes, shielded."""
    models = _models(model)
    if any(isinstance(flat_price(each, prices), str) for each in models):
        await warm_up()
    found: dict[int, tuple[Price, str]] = {}
    for each in models:
        price = flat_price(each, prices)
        if isinstance(price, str):
            raise ValueError(f"a cost limit needs the price of every model: {price}")
        found[id(each)] = price
    return found


@final
@attrs.frozen
class Used:
    """What a turn or a session used (``cost`` in US dollars, when a cost limit asks)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    cost: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def plus(self, other: Used) -> Used:
        return Used(
            self.requests + other.requests,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.tool_calls + other.tool_calls,
            self.cost + other.cost,
        )


NOTHING_USED: Final = Used()
"""What a session that has done nothing used (shared: ``Used`` is a value)."""


def _reached(
    limits: UsageLimits | None, used: Used, scope: Literal["turn", "session"]
) -> TurnUsageLimit | None:
    """The first limit of ``limits`` that ``used`` is at or past (tool calls aside)."""
    if limits is None:
        return None
    for name in ("requests", "input_tokens", "output_tokens", "total_tokens", "cost"):
        limit = getattr(limits, name)
        if limit is not None:
            value = getattr(used, name)
            if value >= limit:
                return TurnUsageLimit(name=name, scope=scope, used=value, limit=limit)
    return None


@final
class UsageMeter:
    """Holds one turn to its limits and to the session's: made for a turn that has
    any (none otherwise: nothing is counted or priced), after ``resolve_prices``
    when a cost limit is among them. ``session`` is what the session used before
    this turn."""

    __slots__ = ("_prices", "_stop", "_tool_calls", "session", "session_limits", "turn_limits")

    def __init__(
        self,
        turn_limits: UsageLimits | None,
        session_limits: UsageLimits | None,
        session: Used,
        prices: dict[int, tuple[Price, str]] | None = None,
    ) -> None:
        self.turn_limits = turn_limits
        self.session_limits = session_limits
        self.session = session
        self._prices = prices
        self._tool_calls = 0
        self._stop: TurnUsageLimit | None = None

    def used(self, state: TurnState, model: Model) -> Used:
        """What the turn used so far (priced when a cost limit asks)."""
        cost = 0.0
        prices = self._prices
        if prices is not None:
            if state.fallback_usage is not None:  # each answer priced as its model's
                for answered, usage in state.fallback_usage:
                    price, provider = prices[id(answered)]
                    cost += charge(price, usage, provider)
            else:
                price, provider = prices[id(model)]
                cost = charge(price, _usage_of(state), provider)
        return Used(state.steps, state.input_tokens, state.output_tokens, self._tool_calls, cost)

    def check(self, state: TurnState, model: Model) -> TurnUsageLimit | None:
        """Before a request: the limit that stops the turn, if one is reached (a
        tool-call limit reached in the last batch first)."""
        if self._stop is not None:
            return self._stop
        turn = self.used(state, model)
        return _reached(self.turn_limits, turn, "turn") or _reached(
            self.session_limits, self.session.plus(turn), "session"
        )

    def admit_call(self) -> str | None:
        """Before a call runs: None (counted), or why it may not (the batch's turn
        then ends with ``usage_limit``)."""
        counted = self._tool_calls + 1
        for limits, used, scope in (
            (self.turn_limits, counted, "turn"),
            (self.session_limits, self.session.tool_calls + counted, "session"),
        ):
            limit = None if limits is None else limits.tool_calls
            if limit is not None and used > limit:
                if self._stop is None:
                    self._stop = TurnUsageLimit(
                        name="tool_calls",
                        scope=scope,  # type: ignore[arg-type]
                        used=used,
                        limit=limit,
                    )
                return (
                    f"the {scope}'s tool_calls limit ({limit}) is reached (UsageLimits): "
                    "this call did not run"
                )
        self._tool_calls = counted
        return None

    def session_after(self, state: TurnState, model: Model) -> Used:
        """What the session used once this turn is over."""
        return self.session.plus(self.used(state, model))


def _usage_of(state: TurnState) -> Usage:
    return Usage(
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        cache_read_tokens=state.cache_read_tokens,
        cache_write_tokens=state.cache_write_tokens,
    )


async def session_used(
    derived: DerivedSession, limits: UsageLimits | None, prices: Mapping[str, Price] | None
) -> Used:
    """What a recorded session used, for its ``session_usage_limits``: its requests,
    tokens and tool calls from its ledger, and with a cost limit its answers
    priced by the model that gave each (``ValueError`` for one with no known
    price: a limit that cannot be kept is refused). Cancellation: as ``warm_up``."""
    cost = 0.0
    if limits is not None and limits.cost is not None:
        models = [(label.partition(":"), usage) for label, usage in derived.usage_by_model.items()]
        if any(isinstance(flat_price(name, prices), str) for (_, _, name), _ in models):
            await warm_up()
        for (provider, colon, name), usage in models:
            found = flat_price(name, prices, provider=provider) if colon else None
            if not isinstance(found, tuple):
                said = found or f"model {provider or '(not named in older ledgers)'!r} has no name"
                raise ValueError(f"a cost limit cannot price what the session used: {said}")
            cost += charge(found[0], usage, found[1])
    usage = derived.usage
    return Used(derived.steps, usage.input_tokens, usage.output_tokens, derived.tool_calls, cost)
