"""The options of an ``Agent``, declared once.

``AgentOptions`` is every option that configures how an agent runs (its
model, tools, budgets, hooks, output, approvals, ...), with its default: what
``Agent()``, ``Agent.resume`` (``RESUMED_OPTIONS``), ``fleet.agent_maker``,
``as_tool``'s copies and the CLI all build from. ``SESSION_OPTIONS`` are the
few that say which conversation an ``Agent()`` starts (its messages, store,
session id, counters, metadata): a resumed session takes those from its
ledger. The keyword arguments of ``Agent()`` and ``Agent.resume`` spell these
out for type checkers and readers; a test holds them equal to this
declaration, name by name and default by default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, final

import attrs

from ._retry import RetryPolicy, estimate_tokens

if TYPE_CHECKING:
    from ..engine._approvals import ApprovalPolicy
    from ..ledger._ledger import FsyncPolicy
    from ..model import Model, ModelSettings
    from ..output._spec import OutputValidator
    from ..telemetry._pricing import Price
    from ..tools._tool import ToolRegistry, ToolSource
    from ._limits import UsageLimits
    from ._policy import (
        AfterToolCall,
        BeforeToolCall,
        Compact,
        CountTokens,
        ShouldStopTurn,
        TransformContext,
    )

__all__ = ["AGENT_OPTIONS", "RESUMED_OPTIONS", "SESSION_OPTIONS", "AgentOptions"]


@final
@attrs.frozen(kw_only=True)
class AgentOptions:
    """How an ``Agent`` runs, as ``Agent()`` takes it (each option's meaning is in
    ``Agent``'s docstring). A value, unchecked: ``Agent`` checks it when it is
    built, naming the option at fault."""

    model: Model | str
    tools: ToolRegistry | Iterable[object] | None = None
    settings: ModelSettings | None = None
    system: str = ""
    max_steps: int = 32
    retry: RetryPolicy | None = None
    max_turn_tokens: int | None = None
    max_repeated_failures: int | None = 3
    context_window: int | None = None
    reserve_output_tokens: int = 4096
    count_tokens: CountTokens = estimate_tokens
    max_tool_result_chars: int | None = 32_768
    transform_context: TransformContext | None = None
    before_tool_call: BeforeToolCall | None = None
    after_tool_call: AfterToolCall | None = None
    should_stop_turn: ShouldStopTurn | None = None
    compact: Compact | None = None
    seed: int | None = None
    fsync: FsyncPolicy = "step"
    tool_execution: Literal["sequential", "parallel"] = "sequential"
    max_parallel_tools: int = 10
    tool_grace_period: float = 5.0
    output_type: Any = None
    deps_type: Any = None
    output_mode: Literal["tool", "native"] = "tool"
    output_retries: int = 2
    output_validator: OutputValidator | None = None
    approval: ApprovalPolicy | None = None
    tool_sources: Sequence[ToolSource] = ()
    prices: Mapping[str, Price] | None = None
    name: str | None = None
    usage_limits: UsageLimits | None = None
    session_usage_limits: UsageLimits | None = None

    def as_keywords(self) -> dict[str, Any]:
        """The options as ``Agent()`` keywords."""
        return {name: getattr(self, name) for name in AGENT_OPTIONS}

    def resume_keywords(self) -> dict[str, Any]:
        """The options as ``Agent.resume`` keywords, the recorded system prompt kept
        (``system=None``): a session goes on as it was started."""
        keywords = self.as_keywords()
        keywords["system"] = None
        return keywords


AGENT_OPTIONS: Final = tuple(field.name for field in attrs.fields(AgentOptions))
"""The names of ``AgentOptions``, in order: the keywords ``Agent.resume`` takes."""

RESUMED_OPTIONS: Final = tuple(
    name for name in AGENT_OPTIONS if name not in ("model", "system", "fsync")
)
"""The options ``Agent.resume`` passes on to the agent as they are (the model,
the system prompt and the fsync policy are its own arguments)."""

SESSION_OPTIONS: Final = (
    "messages",
    "request_sequence_start",
    "sequence_start",
    "store",
    "session_id",
    "metadata",
)
"""The keywords of ``Agent()`` that say which conversation it starts, beside
``AgentOptions``; a resumed session takes these from its ledger."""
