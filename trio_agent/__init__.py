"""trio-agent: LLM agent loops on trio, with one totally ordered event stream.

Every public name is importable from here (``from trio_agent import Agent,
tool``) and listed in ``__all__``; anything else is private. Names are loaded
on first use (PEP 562), so ``import trio_agent`` costs almost nothing and a
program pays only for what it uses: a store's ``sqlite3`` or a provider's
HTTP client is imported when that part is first touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:  # what type checkers and editors see; at run time, __getattr__
    from .engine import StepFailure as StepFailure
    from .errors import CONTEXT_OVERFLOW as CONTEXT_OVERFLOW
    from .errors import HOOK_ERROR as HOOK_ERROR
    from .errors import INTERNAL_ERROR as INTERNAL_ERROR
    from .errors import INVALID_TRANSCRIPT as INVALID_TRANSCRIPT
    from .errors import MODEL_ERROR as MODEL_ERROR
    from .errors import MODEL_PROTOCOL_ERROR as MODEL_PROTOCOL_ERROR
    from .errors import ModelProtocolError as ModelProtocolError
    from .errors import OUTPUT_INVALID as OUTPUT_INVALID
    from .errors import StepError as StepError
    from .errors import TOOL_FATAL as TOOL_FATAL
    from .events import ApprovalDecided as ApprovalDecided
    from .events import ApprovalDecision as ApprovalDecision
    from .events import ApprovalRequested as ApprovalRequested
    from .events import AttemptFailed as AttemptFailed
    from .events import Cancelled as Cancelled
    from .events import Completed as Completed
    from .events import ContextCompacted as ContextCompacted
    from .events import Event as Event
    from .events import Failed as Failed
    from .events import FailureCode as FailureCode
    from .events import MaxSteps as MaxSteps
    from .events import MessageAccepted as MessageAccepted
    from .events import ModelChunk as ModelChunk
    from .events import RunFinished as RunFinished
    from .events import RunResult as RunResult
    from .events import SessionEvent as SessionEvent
    from .events import ToolFinished as ToolFinished
    from .events import ToolStarted as ToolStarted
    from .events import ToolUpdated as ToolUpdated
    from .events import TurnAwaitingApproval as TurnAwaitingApproval
    from .events import TurnBlocked as TurnBlocked
    from .events import TurnCancelled as TurnCancelled
    from .events import TurnCompleted as TurnCompleted
    from .events import TurnContentFilter as TurnContentFilter
    from .events import TurnEnd as TurnEnd
    from .events import TurnFailed as TurnFailed
    from .events import TurnFinished as TurnFinished
    from .events import TurnInterrupted as TurnInterrupted
    from .events import TurnLength as TurnLength
    from .events import TurnMaxSteps as TurnMaxSteps
    from .events import TurnRefusal as TurnRefusal
    from .events import TurnRepeatedFailure as TurnRepeatedFailure
    from .events import TurnResult as TurnResult
    from .events import TurnStarted as TurnStarted
    from .events import TurnTokenBudget as TurnTokenBudget
    from .events import TurnUsageLimit as TurnUsageLimit
    from .ledger import LeaseLostError as LeaseLostError
    from .ledger import Ledger as Ledger
    from .ledger import LedgerCorruptError as LedgerCorruptError
    from .ledger import LedgerError as LedgerError
    from .ledger import SessionChangedError as SessionChangedError
    from .ledger import SessionExistsError as SessionExistsError
    from .ledger import SessionLockedError as SessionLockedError
    from .ledger import SessionNotFoundError as SessionNotFoundError
    from .ledger import TOOL_CANCELLED as TOOL_CANCELLED
    from .ledger import TOOL_NOT_STARTED as TOOL_NOT_STARTED
    from .ledger import TOOL_OUTCOME_UNKNOWN as TOOL_OUTCOME_UNKNOWN
    from .limits import ArgumentsError as ArgumentsError
    from .limits import DOCUMENT_MEDIA_TYPES as DOCUMENT_MEDIA_TYPES
    from .limits import IMAGE_MEDIA_TYPES as IMAGE_MEDIA_TYPES
    from .limits import MAX_AGENT_STEPS as MAX_AGENT_STEPS
    from .limits import MAX_ARGUMENT_CHARS as MAX_ARGUMENT_CHARS
    from .limits import MAX_ARGUMENT_DEPTH as MAX_ARGUMENT_DEPTH
    from .limits import MAX_ARGUMENT_ENTRIES as MAX_ARGUMENT_ENTRIES
    from .limits import MAX_ARGUMENT_VALUES as MAX_ARGUMENT_VALUES
    from .limits import MAX_ASSISTANT_BLOCKS as MAX_ASSISTANT_BLOCKS
    from .limits import MAX_CONTENT_BLOCKS as MAX_CONTENT_BLOCKS
    from .limits import MAX_INITIAL_MESSAGES as MAX_INITIAL_MESSAGES
    from .limits import MAX_MEDIA_BYTES as MAX_MEDIA_BYTES
    from .limits import MAX_MEDIA_URL_CHARS as MAX_MEDIA_URL_CHARS
    from .limits import MAX_MESSAGE_MEDIA_BYTES as MAX_MESSAGE_MEDIA_BYTES
    from .limits import MAX_STEP_CHUNKS as MAX_STEP_CHUNKS
    from .limits import MAX_STEP_TEXT as MAX_STEP_TEXT
    from .limits import MAX_STEP_THINKING as MAX_STEP_THINKING
    from .limits import OUTPUT_TOOL_NAME as OUTPUT_TOOL_NAME
    from .limits import check_arguments as check_arguments
    from .loop import AgentRun as AgentRun
    from .loop import run_agent_loop as run_agent_loop
    from .messages import AssistantMessage as AssistantMessage
    from .messages import Block as Block
    from .messages import DocumentBlock as DocumentBlock
    from .messages import ImageBlock as ImageBlock
    from .messages import InputBlock as InputBlock
    from .messages import Message as Message
    from .messages import RedactedThinkingBlock as RedactedThinkingBlock
    from .messages import TextBlock as TextBlock
    from .messages import ThinkingBlock as ThinkingBlock
    from .messages import ToolCall as ToolCall
    from .messages import ToolResultMessage as ToolResultMessage
    from .messages import Transcript as Transcript
    from .messages import TranscriptError as TranscriptError
    from .messages import UserMessage as UserMessage
    from .messages import content_text as content_text
    from .messages import repair_transcript as repair_transcript
    from .messages import text_from_assistant as text_from_assistant
    from .messages import validate_transcript as validate_transcript
    from .model import Chunk as Chunk
    from .model import ContextOverflowError as ContextOverflowError
    from .model import Model as Model
    from .model import ModelAuthenticationError as ModelAuthenticationError
    from .model import ModelError as ModelError
    from .model import ModelRequest as ModelRequest
    from .model import ModelRequestError as ModelRequestError
    from .model import ModelResponse as ModelResponse
    from .model import ModelResponseError as ModelResponseError
    from .model import ModelSettings as ModelSettings
    from .model import ModelStream as ModelStream
    from .model import OutputFormat as OutputFormat
    from .model import TextDelta as TextDelta
    from .model import ThinkingDelta as ThinkingDelta
    from .model import ToolSpec as ToolSpec
    from .model import TransientModelError as TransientModelError
    from .model import Usage as Usage
    from .output import OutputError as OutputError
    from .output import PartialOutput as PartialOutput
    from .output import PartialOutputIterator as PartialOutputIterator
    from .output import partial_output as partial_output
    from .providers import AnthropicModel as AnthropicModel
    from .providers import FallbackModel as FallbackModel
    from .providers import OpenAIChatModel as OpenAIChatModel
    from .providers import OpenAIResponsesModel as OpenAIResponsesModel
    from .providers import infer_model as infer_model
    from .session import Agent as Agent
    from .session import RetryPolicy as RetryPolicy
    from .session import ToolBlocked as ToolBlocked
    from .session import TurnRun as TurnRun
    from .session import UsageLimits as UsageLimits
    from .session import block as block
    from .session import estimate_tokens as estimate_tokens
    from .session import truncate_text as truncate_text
    from .stores import JsonlStore as JsonlStore
    from .stores import LoadedSession as LoadedSession
    from .stores import PostgresStore as PostgresStore
    from .stores import SessionStore as SessionStore
    from .stores import SqliteStore as SqliteStore
    from .tools import FatalToolError as FatalToolError
    from .tools import REJECTED_ARGUMENTS as REJECTED_ARGUMENTS
    from .tools import Tool as Tool
    from .tools import ToolArgumentsError as ToolArgumentsError
    from .tools import ToolContext as ToolContext
    from .tools import ToolEffect as ToolEffect
    from .tools import ToolError as ToolError
    from .tools import ToolRegistry as ToolRegistry
    from .tools import ToolResult as ToolResult
    from .tools import ToolSource as ToolSource
    from .tools import execute_tool_call as execute_tool_call
    from .tools import tool as tool
    from .tools import tool_context as tool_context
    from .workspace import Workspace as Workspace
    from .workspace import WorkspaceError as WorkspaceError

# name -> the module (under trio_agent) that defines it; tests check that this
# table, ``__all__`` and the imports above list the same names.
_EXPORTS: dict[str, str] = {
    "CONTEXT_OVERFLOW": "errors",
    "HOOK_ERROR": "errors",
    "INTERNAL_ERROR": "errors",
    "INVALID_TRANSCRIPT": "errors",
    "MODEL_ERROR": "errors",
    "MODEL_PROTOCOL_ERROR": "errors",
    "OUTPUT_INVALID": "errors",
    "ModelProtocolError": "errors",
    "StepError": "errors",
    "TOOL_FATAL": "errors",
    "StepFailure": "engine",
    "ApprovalDecision": "events",
    "ApprovalDecided": "events",
    "ApprovalRequested": "events",
    "AttemptFailed": "events",
    "TurnAwaitingApproval": "events",
    "Cancelled": "events",
    "Completed": "events",
    "ContextCompacted": "events",
    "Event": "events",
    "Failed": "events",
    "FailureCode": "events",
    "MaxSteps": "events",
    "MessageAccepted": "events",
    "ModelChunk": "events",
    "RunFinished": "events",
    "RunResult": "events",
    "SessionEvent": "events",
    "ToolFinished": "events",
    "ToolStarted": "events",
    "ToolUpdated": "events",
    "TurnBlocked": "events",
    "TurnCancelled": "events",
    "TurnCompleted": "events",
    "TurnEnd": "events",
    "TurnFailed": "events",
    "TurnFinished": "events",
    "TurnInterrupted": "events",
    "TurnLength": "events",
    "TurnMaxSteps": "events",
    "TurnRepeatedFailure": "events",
    "TurnResult": "events",
    "TurnStarted": "events",
    "TurnTokenBudget": "events",
    "TurnUsageLimit": "events",
    "TurnRefusal": "events",
    "TurnContentFilter": "events",
    "Ledger": "ledger",
    "LedgerCorruptError": "ledger",
    "LedgerError": "ledger",
    "SessionChangedError": "ledger",
    "SessionExistsError": "ledger",
    "LeaseLostError": "ledger",
    "SessionLockedError": "ledger",
    "SessionNotFoundError": "ledger",
    "TOOL_CANCELLED": "ledger",
    "TOOL_NOT_STARTED": "ledger",
    "TOOL_OUTCOME_UNKNOWN": "ledger",
    "ArgumentsError": "limits",
    "MAX_AGENT_STEPS": "limits",
    "MAX_ARGUMENT_CHARS": "limits",
    "MAX_ARGUMENT_DEPTH": "limits",
    "MAX_ARGUMENT_ENTRIES": "limits",
    "MAX_ARGUMENT_VALUES": "limits",
    "MAX_ASSISTANT_BLOCKS": "limits",
    "MAX_INITIAL_MESSAGES": "limits",
    "MAX_STEP_CHUNKS": "limits",
    "MAX_STEP_TEXT": "limits",
    "check_arguments": "limits",
    "MAX_MEDIA_BYTES": "limits",
    "MAX_MESSAGE_MEDIA_BYTES": "limits",
    "MAX_CONTENT_BLOCKS": "limits",
    "MAX_STEP_THINKING": "limits",
    "OUTPUT_TOOL_NAME": "limits",
    "MAX_MEDIA_URL_CHARS": "limits",
    "IMAGE_MEDIA_TYPES": "limits",
    "DOCUMENT_MEDIA_TYPES": "limits",
    "AgentRun": "loop",
    "run_agent_loop": "loop",
    "OutputError": "output",
    "PartialOutput": "output",
    "PartialOutputIterator": "output",
    "partial_output": "output",
    "OutputFormat": "model",
    "AssistantMessage": "messages",
    "Block": "messages",
    "Message": "messages",
    "Transcript": "messages",
    "TextBlock": "messages",
    "ToolCall": "messages",
    "ToolResultMessage": "messages",
    "TranscriptError": "messages",
    "UserMessage": "messages",
    "repair_transcript": "messages",
    "text_from_assistant": "messages",
    "validate_transcript": "messages",
    "ImageBlock": "messages",
    "DocumentBlock": "messages",
    "ThinkingBlock": "messages",
    "RedactedThinkingBlock": "messages",
    "InputBlock": "messages",
    "content_text": "messages",
    "Chunk": "model",
    "ContextOverflowError": "model",
    "Model": "model",
    "ModelAuthenticationError": "model",
    "ModelError": "model",
    "ModelRequest": "model",
    "ModelRequestError": "model",
    "ModelResponse": "model",
    "ModelResponseError": "model",
    "ModelStream": "model",
    "TextDelta": "model",
    "ToolSpec": "model",
    "TransientModelError": "model",
    "Usage": "model",
    "ThinkingDelta": "model",
    "ModelSettings": "model",
    "AnthropicModel": "providers",
    "FallbackModel": "providers",
    "infer_model": "providers",
    "OpenAIChatModel": "providers",
    "OpenAIResponsesModel": "providers",
    "Agent": "session",
    "RetryPolicy": "session",
    "UsageLimits": "session",
    "ToolBlocked": "session",
    "TurnRun": "session",
    "block": "session",
    "estimate_tokens": "session",
    "truncate_text": "session",
    "JsonlStore": "stores",
    "LoadedSession": "stores",
    "SessionStore": "stores",
    "PostgresStore": "stores",
    "SqliteStore": "stores",
    "REJECTED_ARGUMENTS": "tools",
    "FatalToolError": "tools",
    "Tool": "tools",
    "ToolArgumentsError": "tools",
    "ToolContext": "tools",
    "ToolEffect": "tools",
    "ToolError": "tools",
    "ToolRegistry": "tools",
    "execute_tool_call": "tools",
    "tool": "tools",
    "tool_context": "tools",
    "ToolResult": "tools",
    "ToolSource": "tools",
    "Workspace": "workspace",
    "WorkspaceError": "workspace",
}

__all__ = [
    "Agent",
    "AgentRun",
    "AnthropicModel",
    "ApprovalDecided",
    "ApprovalDecision",
    "ApprovalRequested",
    "ArgumentsError",
    "AssistantMessage",
    "AttemptFailed",
    "Block",
    "CONTEXT_OVERFLOW",
    "Cancelled",
    "Chunk",
    "Completed",
    "ContextCompacted",
    "ContextOverflowError",
    "DOCUMENT_MEDIA_TYPES",
    "DocumentBlock",
    "Event",
    "Failed",
    "FailureCode",
    "FallbackModel",
    "FatalToolError",
    "HOOK_ERROR",
    "IMAGE_MEDIA_TYPES",
    "INTERNAL_ERROR",
    "INVALID_TRANSCRIPT",
    "ImageBlock",
    "InputBlock",
    "JsonlStore",
    "LeaseLostError",
    "Ledger",
    "LedgerCorruptError",
    "LedgerError",
    "LoadedSession",
    "MAX_AGENT_STEPS",
    "MAX_ARGUMENT_CHARS",
    "MAX_ARGUMENT_DEPTH",
    "MAX_ARGUMENT_ENTRIES",
    "MAX_ARGUMENT_VALUES",
    "MAX_ASSISTANT_BLOCKS",
    "MAX_CONTENT_BLOCKS",
    "MAX_INITIAL_MESSAGES",
    "MAX_MEDIA_BYTES",
    "MAX_MEDIA_URL_CHARS",
    "MAX_MESSAGE_MEDIA_BYTES",
    "MAX_STEP_CHUNKS",
    "MAX_STEP_TEXT",
    "MAX_STEP_THINKING",
    "MODEL_ERROR",
    "MODEL_PROTOCOL_ERROR",
    "MaxSteps",
    "Message",
    "MessageAccepted",
    "Model",
    "ModelAuthenticationError",
    "ModelChunk",
    "ModelError",
    "ModelProtocolError",
    "ModelRequest",
    "ModelRequestError",
    "ModelResponse",
    "ModelResponseError",
    "ModelSettings",
    "ModelStream",
    "OUTPUT_INVALID",
    "OUTPUT_TOOL_NAME",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "OutputError",
    "OutputFormat",
    "PartialOutput",
    "PartialOutputIterator",
    "PostgresStore",
    "REJECTED_ARGUMENTS",
    "RedactedThinkingBlock",
    "RetryPolicy",
    "RunFinished",
    "RunResult",
    "SessionChangedError",
    "SessionEvent",
    "SessionExistsError",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionStore",
    "SqliteStore",
    "StepError",
    "StepFailure",
    "TOOL_CANCELLED",
    "TOOL_FATAL",
    "TOOL_NOT_STARTED",
    "TOOL_OUTCOME_UNKNOWN",
    "TextBlock",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingDelta",
    "Tool",
    "ToolArgumentsError",
    "ToolBlocked",
    "ToolCall",
    "ToolContext",
    "ToolEffect",
    "ToolError",
    "ToolFinished",
    "ToolRegistry",
    "ToolResult",
    "ToolResultMessage",
    "ToolSource",
    "ToolSpec",
    "ToolStarted",
    "ToolUpdated",
    "Transcript",
    "TranscriptError",
    "TransientModelError",
    "TurnAwaitingApproval",
    "TurnBlocked",
    "TurnCancelled",
    "TurnCompleted",
    "TurnContentFilter",
    "TurnEnd",
    "TurnFailed",
    "TurnFinished",
    "TurnInterrupted",
    "TurnLength",
    "TurnMaxSteps",
    "TurnRefusal",
    "TurnRepeatedFailure",
    "TurnResult",
    "TurnRun",
    "TurnStarted",
    "TurnTokenBudget",
    "TurnUsageLimit",
    "Usage",
    "UsageLimits",
    "UserMessage",
    "Workspace",
    "WorkspaceError",
    "block",
    "check_arguments",
    "content_text",
    "estimate_tokens",
    "execute_tool_call",
    "infer_model",
    "partial_output",
    "repair_transcript",
    "run_agent_loop",
    "text_from_assistant",
    "tool",
    "tool_context",
    "truncate_text",
    "validate_transcript",
]


_MODULES = frozenset(
    {
        "engine",
        "errors",
        "events",
        "fleet",
        "ledger",
        "limits",
        "loop",
        "mcp",
        "messages",
        "model",
        "output",
        "pricing",
        "providers",
        "serve",
        "session",
        "stores",
        "telemetry",
        "testing",
        "tools",
        "workspace",
    }
)
"""Public submodules, reachable as attributes too (``trio_agent.events.Event``)."""


def __getattr__(name: str) -> object:
    """Load a public name (or submodule) the first time it is asked for."""
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trio_agent' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
