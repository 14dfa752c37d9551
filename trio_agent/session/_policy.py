"""How an ``Agent`` runs its turns, as one frozen value: ``SessionPolicy`` (the step
budget, retries, budgets, the context guard, the hooks, the tool-batch
options), checked once and shared by agents built alike; and what its hooks
are (``block`` stops a call)."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, final

import attrs
import msgspec

from .._settings import ModelSettings, check_run_settings, check_settings, merge_settings
from ..engine._approvals import ApprovalPolicy
from ..engine._hooks import SessionKey, TurnSpec, TurnState, build_spec
from ..engine._options import (
    check_int,
    check_max_steps,
    check_optional_hook,
    check_system,
    check_tool_execution,
)
from ..messages._ir import (
    Message,
    ToolCall,
    ToolResultMessage,
)
from ..model import Model, ModelRequest
from ..output._spec import OutputSpec, offered
from ..telemetry._pricing import Price, check_prices
from ..tools._context import ToolContext
from ..tools._tool import ToolRegistry, ToolSource
from ._limits import UsageLimits, check_limits
from ._retry import DEFAULT_RETRY, RetryPolicy, estimate_tokens

__all__ = [
    "POLICY_OPTIONS",
    "takes_context",
    "AfterToolCall",
    "BeforeToolCall",
    "Compact",
    "CountTokens",
    "SessionPolicy",
    "ShouldStopTurn",
    "ToolBlocked",
    "TransformContext",
    "block",
]


@final
@attrs.frozen
class ToolBlocked:
    """What ``before_tool_call`` returns to stop a call; build it with ``block(reason)``."""

    reason: str


TransformContext = Callable[[tuple[Message, ...]], Awaitable[Sequence[Message]] | Sequence[Message]]
"""A hook is an async function or a plain one (called on the trio thread: keep it
quick); so is each below."""
BeforeToolCall = (
    Callable[[ToolCall], Awaitable[ToolBlocked | None] | ToolBlocked | None]
    | Callable[[ToolCall, ToolContext[Any]], Awaitable[ToolBlocked | None] | ToolBlocked | None]
)
"""``before_tool_call(call)``, or ``(call, ctx)`` to get the call's ``ToolContext``."""
AfterToolCall = (
    Callable[[ToolCall, ToolResultMessage], Awaitable[ToolResultMessage] | ToolResultMessage]
    | Callable[
        [ToolCall, ToolResultMessage, ToolContext[Any]],
        Awaitable[ToolResultMessage] | ToolResultMessage,
    ]
)
"""``after_tool_call(call, result)``, or ``(call, result, ctx)`` to get the call's
``ToolContext``."""
ShouldStopTurn = Callable[[TurnState], Awaitable[bool | None] | bool | None]
Compact = Callable[[tuple[Message, ...]], Awaitable[Sequence[Message]] | Sequence[Message]]
CountTokens = Callable[[ModelRequest], int]


def block(reason: str) -> ToolBlocked:
    """Block a tool call: it does not run, and the model sees ``reason`` as an error result."""
    if type(reason) is not str:
        raise TypeError(f"block() takes a str reason, got {reason!r}")
    return ToolBlocked(reason)


@final
@attrs.frozen
class SessionPolicy:
    """How an ``Agent`` runs its turns, checked once (``build``) and then fixed: the
    step budget, retries, budgets, the context guard, the hooks and the
    tool-batch options. (The model and the tools are the Agent's own.)

    A value: agents built with the same options share one policy object
    (``build`` interns it), so a thousand agents cost one, not a thousand.
    """

    system: str
    max_steps: int
    retry: RetryPolicy
    seed: int | None
    max_turn_tokens: int | None
    max_repeated_failures: int | None
    context_window: int | None
    reserve_output_tokens: int
    count_tokens: CountTokens
    max_tool_result_chars: int | None
    transform_context: TransformContext | None
    before_tool_call: BeforeToolCall | None
    after_tool_call: AfterToolCall | None
    should_stop_turn: ShouldStopTurn | None
    compact: Compact | None
    approval: ApprovalPolicy | None
    tool_execution: Literal["sequential", "parallel"]
    max_parallel_tools: int
    tool_grace_period: float
    settings: ModelSettings | None
    prices: Mapping[str, Price] | None
    before_takes_context: bool = attrs.field(init=False, default=False)
    """``before_tool_call`` takes the call's ``ToolContext`` as a second argument."""
    after_takes_context: bool = attrs.field(init=False, default=False)
    """``after_tool_call`` takes the call's ``ToolContext`` as a third argument."""

    def __attrs_post_init__(self) -> None:
        before = takes_context("before_tool_call", self.before_tool_call, 1)
        object.__setattr__(self, "before_takes_context", before)
        after = takes_context("after_tool_call", self.after_tool_call, 2)
        object.__setattr__(self, "after_takes_context", after)

    usage_limits: UsageLimits | None
    session_usage_limits: UsageLimits | None

    @classmethod
    def build(cls, **options: Any) -> SessionPolicy:
        """Check every option (``TypeError``/``ValueError`` naming it), then fix them.
        Options given as plain values already seen give the policy they made then,
        unchecked again (the checks depend on the values alone)."""
        given = _given_key(options)
        if given is not None:
            known = _GIVEN.get(given)
            if known is not None:
                return known
        check_system(options["system"])
        check_tool_execution(
            options["tool_execution"], options["max_parallel_tools"], options["tool_grace_period"]
        )
        # as the loop's: per turn here, while request numbers run on across turns
        check_max_steps(options["max_steps"])
        check_int("reserve_output_tokens", options["reserve_output_tokens"], 0)
        for name in ("max_turn_tokens", "max_repeated_failures", "context_window"):
            check_int(name, options[name], 1, optional=True)
        limit = options["max_tool_result_chars"]
        if limit is not None and (type(limit) is not int or limit < 200):
            raise ValueError(
                "max_tool_result_chars must be None or an int >= 200 (room for the cut marker), "
                f"got {limit!r}"
            )
        seed = options["seed"]
        if seed is not None and type(seed) not in (int, float, str, bytes):
            raise TypeError(f"seed must be None, an int, a float, a str or bytes, got {seed!r}")
        retry = options["retry"]
        if retry is not None and type(retry) is not RetryPolicy:
            raise TypeError(f"retry must be a RetryPolicy or None, got {retry!r}")
        if not callable(options["count_tokens"]):
            raise TypeError(f"count_tokens must be callable, got {options['count_tokens']!r}")
        for name in (
            "transform_context",
            "before_tool_call",
            "after_tool_call",
            "should_stop_turn",
            "compact",
            "approval",
        ):
            check_optional_hook(name, options[name])
        policy = cls(
            **{
                **options,
                "retry": DEFAULT_RETRY if retry is None else retry,
                "tool_grace_period": float(options["tool_grace_period"]),
                "settings": check_settings(options["settings"]),
                "prices": check_prices(options["prices"]),
                "usage_limits": check_limits("usage_limits", options["usage_limits"]),
                "session_usage_limits": check_limits(
                    "session_usage_limits", options["session_usage_limits"]
                ),
            }
        )
        key = _sharing_key(policy)
        if key is None:
            return policy
        shared = _POLICIES.setdefault(key, policy)
        if given is not None:
            if len(_GIVEN) >= _GIVEN_AT_MOST:
                _GIVEN.clear()  # start over (one call: safe beside agents made in threads)
            _GIVEN[given] = shared
        return shared

    def spec(
        self,
        model: Model,
        tools: ToolRegistry,
        settings: ModelSettings | None = None,
        output: OutputSpec | None = None,
        sources: tuple[ToolSource, ...] = (),
        deps: Any = None,
        session_key: str | SessionKey = "",
    ) -> TurnSpec:
        """A turn's spec: ``tools`` as registered now, and the agent's settings with
        the turn's ``settings`` over them (``ValueError`` if a ``tool_choice``
        names a tool it does not have), and the turn's ``deps``."""
        return build_spec(
            model,
            tools,
            self.system,
            self.max_steps,
            self.tool_execution,
            self.max_parallel_tools,
            self.tool_grace_period,
            check_run_settings(
                merge_settings(self.settings, settings), offered(tools, output, sources)
            ),
            output,
            sources,
            deps,
            session_key,
        )


POLICY_OPTIONS = tuple(field.name for field in attrs.fields(SessionPolicy) if field.init)
"""The ``Agent()`` options that make its ``SessionPolicy``, by name."""

_POLICIES: weakref.WeakValueDictionary[tuple[Any, ...], SessionPolicy] = (
    weakref.WeakValueDictionary()
)
"""Policies of live agents that can be shared, by their plain values; an entry goes
with the last agent holding its policy."""

_GIVEN: dict[tuple[Any, ...], SessionPolicy] = {}
"""Up to ``_GIVEN_AT_MOST`` shared policies made, by the options as given
(``_given_key``): an agent made with options seen before skips their checks and
the policy's making (most of what ``Agent()`` cost), even when the agents made
with them before are gone (as when each request makes its agent)."""

_GIVEN_AT_MOST = 64

_PLAIN = frozenset((type(None), bool, int, float, str))


def _given_key(options: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The options, each with its type (``1``, ``1.0`` and ``True`` never stand for
    one another), when every one is a plain value or the default token count:
    nothing else a check reads. None otherwise (no user object is hashed)."""
    values = [options[name] for name in POLICY_OPTIONS]  # in one order, whoever calls
    for value in values:
        if type(value) not in _PLAIN and value is not estimate_tokens:
            return None
    return tuple((type(value), value) for value in values)


def takes_context(name: str, hook: object, arguments: int) -> bool:
    """Whether the tool-call ``hook`` takes the call's ``ToolContext`` after its
    ``arguments`` positional ones (it has room for one more), read from its
    signature once, when the agent is built. A hook whose signature cannot be
    read, or that takes ``*args`` after its ``arguments``, is called as before;
    ``TypeError`` if it cannot take ``arguments`` positional arguments at all."""
    if hook is None:
        return False
    try:
        signature = inspect.signature(hook)  # type: ignore[arg-type]  # checked callable
    except (TypeError, ValueError):  # a builtin or an odd callable: as before
        return False
    positional = required = 0
    variadic = False
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            positional += 1
            required += parameter.default is parameter.empty
        elif parameter.kind is parameter.VAR_POSITIONAL:
            variadic = True
        elif parameter.kind is parameter.KEYWORD_ONLY and parameter.default is parameter.empty:
            required = arguments + 2  # a keyword it must get: it cannot be called so
    if positional > arguments and required <= arguments + 1:
        return True
    if (positional == arguments or variadic) and required <= arguments:
        return False
    shape = "(call)" if arguments == 1 else "(call, result)"
    context = "(call, ctx)" if arguments == 1 else "(call, result, ctx)"
    raise TypeError(
        f"{name} must take {shape}, or {context} to get the call's ToolContext; "
        f"{hook!r:.80} takes {signature}"
    )


def _sharing_key(policy: SessionPolicy) -> tuple[Any, ...] | None:
    """A key by which agents may share ``policy``: only one made of plain values
    (no hook, the approval policy included, the default retries and token count),
    each with its type, so that ``1``, ``1.0`` and ``True`` never stand for one
    another. None: not shared (a hook equal to another is still not the other)."""
    hooks = (
        policy.transform_context,
        policy.before_tool_call,
        policy.after_tool_call,
        policy.should_stop_turn,
        policy.compact,
        policy.approval,
    )
    if any(hook is not None for hook in hooks) or policy.retry is not DEFAULT_RETRY:
        return None
    if policy.prices is not None:  # a dict: not a key
        return None
    if policy.count_tokens is not estimate_tokens:
        return None
    values = attrs.astuple(policy, recurse=False)
    # settings may hold dicts: their canonical JSON stands for them
    return tuple(
        (type(value), msgspec.json.encode(value, order="sorted"))
        if type(value) is ModelSettings
        else (type(value), value)
        for value in values
    )
