"""The step engine that ``run_agent_loop`` and ``Agent`` both run on.

One turn is ``run_turn``: steps until the model stops, the step budget is
spent, a hook stops it or it fails, with every event emitted through one
``Emitter``. The layers differ only in the ``StepHooks`` they pass: the
defaults give exactly the core contract (no inbox, no retries, no hooks);
the session layer overrides them. Like ``trio.lowlevel``, this module is for
building layers, not for everyday use; it is a page of names, each defined
in the private module that owns it (see ARCHITECTURE.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._public import lazy as _lazy
from .._public import publish as _publish
from ..errors import HOOK_ERROR as HOOK_ERROR
from ..errors import ModelProtocolError as ModelProtocolError
from ..errors import StepError as StepError
from ._emit import Emitter as Emitter
from ._emit import Journal as Journal
from ._hooks import StepHooks as StepHooks
from ._hooks import TurnSpec as TurnSpec
from ._hooks import TurnState as TurnState
from ._hooks import build_spec as build_spec
from ._hooks import call_hook as call_hook
from ._transcript import Conversation as Conversation
from ._turn import TurnOutcome as TurnOutcome
from ._turn import accept as accept
from ._turn import run_turn as run_turn

StepFailure = StepError
"""The name ``StepError`` had before it was named as an error; kept working."""

if TYPE_CHECKING:
    from ._batch import ToolBatch as ToolBatch
    from ._batch import run_tool_batch as run_tool_batch

__all__ = [
    "HOOK_ERROR",
    "Conversation",
    "Emitter",
    "Journal",
    "ModelProtocolError",
    "StepError",
    "StepFailure",
    "StepHooks",
    "ToolBatch",
    "TurnOutcome",
    "TurnSpec",
    "TurnState",
    "accept",
    "build_spec",
    "call_hook",
    "run_tool_batch",
    "run_turn",
]

_publish(globals())  # each name says this page is its module (tracebacks, reprs, pickles)

# A tool batch's machinery is imported with a step's first tool call.
__getattr__ = _lazy(globals(), {"ToolBatch": "._batch", "run_tool_batch": "._batch"})
