"""Sessions: an ``Agent`` keeps a conversation across turns.

A turn is ``trio_agent.engine.run_turn`` with session hooks
(``SessionHooks``): an inbox (steering before the next
request, follow-ups when the turn would end), user hooks, retries of
transient model failures inside a step, budgets that end a turn with their
own reason, and a context-window guard. One event counter runs across all
turns of a session. The ``Agent`` is a thin shell: a frozen
``SessionPolicy``, an ``Inbox``, the transcript, and the ledger.
"""

from __future__ import annotations

from .._public import publish as _publish
from ..errors import CONTEXT_OVERFLOW as CONTEXT_OVERFLOW
from ..events import ApprovalDecision as ApprovalDecision
from ._agent import Agent as Agent
from ._limits import UsageLimits as UsageLimits
from ._options import AgentOptions as AgentOptions
from ._policy import ToolBlocked as ToolBlocked
from ._policy import block as block
from ._retry import RetryPolicy as RetryPolicy
from ._retry import estimate_tokens as estimate_tokens
from ._retry import truncate_text as truncate_text
from ._turn_run import TurnRun as TurnRun

__all__ = [
    "CONTEXT_OVERFLOW",
    "ApprovalDecision",
    "Agent",
    "AgentOptions",
    "RetryPolicy",
    "ToolBlocked",
    "TurnRun",
    "UsageLimits",
    "block",
    "estimate_tokens",
    "truncate_text",
]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)
