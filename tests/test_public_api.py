"""The public API, name by name: every name a user can import today, per module.

Moving a module (as the room-making issue did) must never drop one: a name
missing here fails this test. A new public name is added to its list.
Names kept for an old spelling are listed too (``StepFailure``,
``ProtocolViolation``).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

PUBLIC = {
    "trio_agent": [
        "PartialOutput",
        "PartialOutputIterator",
        "partial_output",
        "ModelSettings",
        "ToolResult",
        "OpenAIResponsesModel",
        "ImageBlock",
        "DocumentBlock",
        "ThinkingBlock",
        "RedactedThinkingBlock",
        "InputBlock",
        "content_text",
        "MAX_MEDIA_BYTES",
        "MAX_MESSAGE_MEDIA_BYTES",
        "MAX_CONTENT_BLOCKS",
        "MAX_STEP_THINKING",
        "MAX_MEDIA_URL_CHARS",
        "IMAGE_MEDIA_TYPES",
        "DOCUMENT_MEDIA_TYPES",
        "TurnRefusal",
        "TurnContentFilter",
        "ThinkingDelta",
        "ApprovalDecided",
        "ApprovalDecision",
        "ApprovalRequested",
        "TurnAwaitingApproval",
        "ToolSource",
        "OUTPUT_INVALID",
        "OUTPUT_TOOL_NAME",
        "OutputError",
        "OutputFormat",
        "Agent",
        "AnthropicModel",
        "OpenAIChatModel",
        "AgentRun",
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
        "Event",
        "Failed",
        "FailureCode",
        "FatalToolError",
        "HOOK_ERROR",
        "INTERNAL_ERROR",
        "INVALID_TRANSCRIPT",
        "JsonlStore",
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
        "MAX_INITIAL_MESSAGES",
        "MAX_STEP_CHUNKS",
        "MAX_STEP_TEXT",
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
        "ModelStream",
        "RetryPolicy",
        "RunFinished",
        "RunResult",
        "SessionChangedError",
        "SessionExistsError",
        "SessionEvent",
        "LeaseLostError",
        "SessionLockedError",
        "SessionNotFoundError",
        "SessionStore",
        "PostgresStore",
        "SqliteStore",
        "StepError",
        "StepFailure",
        "TOOL_CANCELLED",
        "TOOL_FATAL",
        "TOOL_NOT_STARTED",
        "TOOL_OUTCOME_UNKNOWN",
        "TextBlock",
        "TextDelta",
        "Tool",
        "ToolArgumentsError",
        "ToolBlocked",
        "ToolCall",
        "ToolContext",
        "ToolEffect",
        "ToolError",
        "ToolFinished",
        "ToolRegistry",
        "ToolResultMessage",
        "ToolSpec",
        "ToolStarted",
        "ToolUpdated",
        "Transcript",
        "TranscriptError",
        "TransientModelError",
        "TurnBlocked",
        "TurnCancelled",
        "TurnCompleted",
        "TurnEnd",
        "TurnFailed",
        "TurnFinished",
        "TurnInterrupted",
        "TurnLength",
        "TurnMaxSteps",
        "TurnRepeatedFailure",
        "TurnResult",
        "TurnRun",
        "TurnStarted",
        "TurnTokenBudget",
        "TurnUsageLimit",
        "FallbackModel",
        "Usage",
        "UsageLimits",
        "UserMessage",
        "Workspace",
        "WorkspaceError",
        "block",
        "check_arguments",
        "estimate_tokens",
        "execute_tool_call",
        "infer_model",
        "REJECTED_ARGUMENTS",
        "repair_transcript",
        "run_agent_loop",
        "text_from_assistant",
        "tool",
        "tool_context",
        "truncate_text",
        "validate_transcript",
        "__version__",
    ],
    "trio_agent.engine": [
        "Conversation",
        "Emitter",
        "HOOK_ERROR",
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
    ],
    "trio_agent.events": [
        "TurnRefusal",
        "TurnContentFilter",
        "AttemptFailed",
        "Cancelled",
        "Completed",
        "ContextCompacted",
        "Event",
        "Failed",
        "FailureCode",
        "MaxSteps",
        "MessageAccepted",
        "ModelChunk",
        "RunFinished",
        "RunResult",
        "SessionEvent",
        "ToolFinished",
        "ToolStarted",
        "ToolUpdated",
        "TurnBlocked",
        "TurnCancelled",
        "TurnCompleted",
        "TurnEnd",
        "TurnFailed",
        "TurnFinished",
        "TurnInterrupted",
        "TurnLength",
        "TurnMaxSteps",
        "TurnRepeatedFailure",
        "TurnResult",
        "TurnStarted",
        "TurnTokenBudget",
        "TurnUsageLimit",
        "UsageLimitName",
    ],
    "trio_agent.ledger": [
        "ApprovalDecidedRecord",
        "ApprovalRequestedRecord",
        "AttemptFailedRecord",
        "CompactedRecord",
        "DerivedSession",
        "EventsReservedRecord",
        "FORMAT_VERSION",
        "FsyncPolicy",
        "Ledger",
        "LedgerCorruptError",
        "LedgerError",
        "MessageRecord",
        "OutputRecord",
        "Record",
        "SEQUENCE_BLOCK",
        "SessionChangedError",
        "SessionClosedRecord",
        "LeaseLostError",
        "SessionLockedError",
        "SessionNotFoundError",
        "SessionStartRecord",
        "SessionWriter",
        "SnapshotRecord",
        "StepEndRecord",
        "StepStartRecord",
        "TOOL_CANCELLED",
        "TOOL_FATAL",
        "TOOL_NOT_STARTED",
        "TOOL_OUTCOME_UNKNOWN",
        "ToolCallRecord",
        "ToolCancelledRecord",
        "ToolFailedRecord",
        "ToolResultRecord",
        "ToolSkippedRecord",
        "TurnEndRecord",
        "TurnStartRecord",
        "check_fsync",
        "derive",
        "encode_records",
        "record_decoder",
    ],
    "trio_agent.limits": [
        "MAX_MEDIA_BYTES",
        "MAX_MESSAGE_MEDIA_BYTES",
        "MAX_CONTENT_BLOCKS",
        "MAX_STEP_THINKING",
        "MAX_MEDIA_URL_CHARS",
        "IMAGE_MEDIA_TYPES",
        "DOCUMENT_MEDIA_TYPES",
        "ArgumentsError",
        "MAX_AGENT_STEPS",
        "MAX_ARGUMENT_CHARS",
        "MAX_ARGUMENT_DEPTH",
        "MAX_ARGUMENT_ENTRIES",
        "MAX_ARGUMENT_VALUES",
        "MAX_ASSISTANT_BLOCKS",
        "MAX_INITIAL_MESSAGES",
        "MAX_STEP_CHUNKS",
        "MAX_STEP_TEXT",
        "check_arguments",
        "is_valid_unicode",
    ],
    "trio_agent.loop": [
        "AgentRun",
        "run_agent_loop",
    ],
    "trio_agent.messages": [
        "ImageBlock",
        "DocumentBlock",
        "ThinkingBlock",
        "RedactedThinkingBlock",
        "InputBlock",
        "content_text",
        "AssistantMessage",
        "Block",
        "Message",
        "TextBlock",
        "ToolCall",
        "ToolResultMessage",
        "Transcript",
        "TranscriptError",
        "UserMessage",
        "repair_transcript",
        "text_from_assistant",
        "validate_transcript",
    ],
    "trio_agent.model": [
        "ModelSettings",
        "ThinkingDelta",
        "Chunk",
        "ContextOverflowError",
        "Model",
        "ModelAuthenticationError",
        "ModelError",
        "ModelRequest",
        "ModelRequestError",
        "ModelResponse",
        "ModelResponseError",
        "ModelStream",
        "ProtocolViolation",
        "StopReason",
        "TextDelta",
        "ToolSpec",
        "TransientModelError",
        "Usage",
    ],
    "trio_agent.session": [
        "Agent",
        "AgentOptions",
        "CONTEXT_OVERFLOW",
        "RetryPolicy",
        "ToolBlocked",
        "TurnRun",
        "UsageLimits",
        "block",
        "estimate_tokens",
        "truncate_text",
    ],
    "trio_agent.stores": [
        "JsonlStore",
        "LoadedSession",
        "SessionStore",
        "PostgresStore",
        "SnapshotPolicy",
        "SqliteStore",
        "parse_jsonl",
    ],
    "trio_agent.tools": [
        "REJECTED_ARGUMENTS",
        "ToolResult",
        "FatalToolError",
        "MAX_PROGRESS_TEXT",
        "PROGRESS_INTERVAL",
        "Tool",
        "ToolArgumentsError",
        "ToolContext",
        "ToolEffect",
        "TOOL_EFFECTS",
        "ToolError",
        "ToolRegistry",
        "execute_tool_call",
        "tool",
        "tool_context",
    ],
    "trio_agent.workspace": [
        "Workspace",
        "WorkspaceError",
    ],
    "trio_agent.pricing": ["Price", "check_prices", "cost_of", "priced"],
    "trio_agent.telemetry": ["CAPTURE_CONTENT_VARIABLE", "configure"],
    "trio_agent.fleet": ["MakeAgent", "Worker", "agent_maker", "submit", "wait_for_turn"],
    "trio_agent.serve": ["MAX_BODY_BYTES", "Server", "SessionFactory"],
    "trio_agent.providers": [
        "ConnectionPool",
        "OpenAIResponsesModel",
        "AnthropicModel",
        "OpenAIChatModel",
        "FallbackModel",
        "PRESETS",
        "Preset",
        "infer_model",
    ],
    "trio_agent.testing": [
        "CallableModel",
        "CorruptChunk",
        "CutStream",
        "DisagreeingResponse",
        "ExplorationFailure",
        "ExplorationReport",
        "Fault",
        "FaultyModel",
        "HangAt",
        "InvariantError",
        "NetworkBlockedError",
        "RaiseOnCall",
        "ReplayDivergenceError",
        "ReplayModel",
        "SchemaError",
        "SchemaModel",
        "ScriptExhaustedError",
        "ScriptedModel",
        "ScriptedResponse",
        "assert_run_invariants",
        "block_network",
        "explore_cancellation",
        "schema_arguments",
        "scripted_response",
        "tool_calls_for",
        "trace",
    ],
    "trio_agent.testing.strategies": [
        "arguments",
        "arguments_at_limits",
        "arguments_outside_limits",
        "json_values",
        "scripted_runs",
        "texts",
        "tool_calls",
        "transcripts",
        "user_messages",
    ],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_is_importable(module):
    found = importlib.import_module(module)
    missing = [name for name in PUBLIC[module] if not hasattr(found, name)]
    assert missing == [], f"{module} lost {missing}"


@pytest.mark.parametrize("module", sorted(m for m in PUBLIC if m != "trio_agent"))
def test_every_module_says_what_it_exports(module):
    # __all__ lists the module's public names, and no name it does not have
    found = importlib.import_module(module)
    assert all(hasattr(found, name) for name in found.__all__)
    kept = {"ProtocolViolation", "check_fsync", "MAX_PROGRESS_TEXT", "PROGRESS_INTERVAL"}
    assert set(PUBLIC[module]) - kept <= set(found.__all__)


def test_the_old_spellings_are_the_new_names():
    from trio_agent import ModelProtocolError, StepError, StepFailure
    from trio_agent.model import ProtocolViolation

    assert StepFailure is StepError and ProtocolViolation is ModelProtocolError


def test_every_failure_code_is_in_failure_code():
    import typing

    import trio_agent

    codes = set(typing.get_args(trio_agent.events.FailureCode))
    assert codes == {
        trio_agent.INVALID_TRANSCRIPT,
        trio_agent.MODEL_PROTOCOL_ERROR,
        trio_agent.OUTPUT_INVALID,
        trio_agent.MODEL_ERROR,
        trio_agent.TOOL_FATAL,
        trio_agent.HOOK_ERROR,
        trio_agent.CONTEXT_OVERFLOW,
        trio_agent.INTERNAL_ERROR,
    }


def test_the_package_lists_exactly_its_public_names():
    # __all__, the lazy table and the imports type checkers read agree, name by name
    import ast
    from pathlib import Path

    import trio_agent

    tree = ast.parse(Path(trio_agent.__file__).read_text())
    checked = {
        alias.asname
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        for statement in node.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
    }
    exported = set(trio_agent._EXPORTS)
    assert checked == exported == set(trio_agent.__all__) - {"__version__"}
    assert sorted(PUBLIC["trio_agent"]) == sorted(exported | {"__version__"})
    for name, module in trio_agent._EXPORTS.items():
        source = importlib.import_module(f"trio_agent.{module}")
        assert getattr(trio_agent, name) is getattr(source, name), name
    assert "__version__" in dir(trio_agent) and "Agent" in dir(trio_agent)
    with pytest.raises(AttributeError, match="no attribute 'Agnet'"):
        trio_agent.Agnet  # noqa: B018


def test_submodules_are_attributes_of_the_package():
    import subprocess
    import sys

    code = "import trio_agent; print(trio_agent.events.FailureCode, trio_agent.stores.JsonlStore)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "JsonlStore" in out.stdout


def test_importing_the_package_is_cheap():
    # nothing is loaded before it is used: no session, no store, no sqlite3
    import subprocess
    import sys

    code = (
        "import sys, trio_agent; "
        "print(sorted(m for m in sys.modules if m.startswith('trio_agent') or m == 'sqlite3'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['trio_agent']"


UNUSED_BY_AN_AGENT = (
    "trio_agent.stores",  # its page is cheap; no store is loaded until named
    "trio_agent.stores._jsonl",
    "trio_agent.stores._sqlite",
    "trio_agent.stores.postgres",
    "trio_agent.ledger._derive",
    "trio_agent.session._resume",
    "trio_agent.session._agent_tool",
    "trio_agent.output._partial",
    "trio_agent.engine._batch",  # with the first tool call
    "trio_agent.telemetry._observe",
    "trio_agent.telemetry._content",
    "trio_agent.providers",
    "trio_agent.mcp",
    "trio_agent.cli",
    "trio_agent.fleet",
    "trio_agent.workspace",
    "sqlite3",
    "httpx",
    "psycopg",
    "opentelemetry",
    "pydantic",
)


def test_an_agent_loads_only_what_it_uses():
    """Issue 36: ``from trio_agent import Agent, tool`` cost 1.49x the first wave's
    import time, loading every store (PostgreSQL's glue too), replay, the agent tool,
    the partial-output reader and telemetry. Those load when first used: here, an
    in-memory agent's turn runs without any of them, and naming a store or resuming
    loads what it needs then."""
    import subprocess
    import sys

    code = f"""
import sys, trio
from trio_agent import Agent, tool
from trio_agent.testing import ScriptedModel, scripted_response

def loaded():
    return sorted(
        m for m in sys.modules for u in {UNUSED_BY_AN_AGENT!r}
        if m == u or m.startswith(u + ".") or (u == "trio_agent.stores" and m.startswith(u))
    )

assert loaded() == [], loaded()
async def main():
    agent = Agent(model=ScriptedModel([scripted_response("r1", "ok")]))
    await agent.prompt("hi")
trio.run(main)
assert loaded() == [], loaded()
from trio_agent import JsonlStore
assert "trio_agent.stores._jsonl" in sys.modules and "trio_agent.stores.postgres" not in sys.modules
assert JsonlStore.__module__ == "trio_agent.stores"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def _public_modules() -> list[str]:
    import pkgutil

    import trio_agent

    found = ["trio_agent"]
    for info in pkgutil.walk_packages(trio_agent.__path__, "trio_agent."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            found.append(info.name)
    return found


def test_every_public_class_and_function_names_a_public_module_that_exports_it():
    """Issue 35: tracebacks and reprs named private modules
    (``trio_agent.mcp._session.MCPServerError``), which a user never imports from.
    Each class and function a public module exports says, in ``__module__``, a
    public module that exports it under its ``__qualname__`` (as trio does), so
    that is what tracebacks, reprs and pickles name."""
    import inspect
    import sys

    wrong = []
    for name in _public_modules():
        module = importlib.import_module(name)
        assert hasattr(module, "__all__"), f"{name} does not say what it exports"
        for exported in module.__all__:
            value = getattr(module, exported)
            if not (inspect.isclass(value) or inspect.isfunction(value)):
                continue
            home = value.__module__
            if not home.startswith("trio_agent"):
                continue  # another library's, passed on
            page = sys.modules[home]
            # a function a decorator made (hypothesis') has a qualname of its making
            own = value.__qualname__ if inspect.isclass(value) else value.__name__
            if (
                any(part.startswith("_") for part in home.split(".")[1:])
                or own not in getattr(page, "__all__", ())
                or getattr(page, own) is not value
            ):
                wrong.append(f"{name}.{exported}: {home}.{own}")
    assert wrong == []
    from trio_agent import Agent, Tool, ToolCall
    from trio_agent.mcp import MCPServerError
    from trio_agent.model import ModelSettings

    assert MCPServerError.__module__ == "trio_agent.mcp"
    assert (Agent.__module__, Tool.__module__) == ("trio_agent.session", "trio_agent.tools")
    assert (ToolCall.__module__, ModelSettings.__module__) == (
        "trio_agent.messages",
        "trio_agent.model",
    )


def test_a_traceback_names_the_public_module_however_the_private_one_was_reached():
    """The page that claims a name runs before the private module it imports from can
    be used: importing the private module first changes nothing. In a fresh process,
    a traceback names ``trio_agent.mcp.MCPServerError``, and the msgspec Structs of
    private modules, first used after their module changed, still encode and decode."""
    import subprocess
    import sys

    code = """
import traceback, msgspec
from trio_agent.mcp._session import MCPServerError
from trio_agent.session._agent import Agent
from trio_agent.messages._ir import ToolCall, UserMessage, Message
from trio_agent._settings import ModelSettings
from trio_agent.ledger import MessageRecord
print(traceback.format_exception(MCPServerError("down"))[-1].strip())
print(Agent.__module__)
message = msgspec.json.decode(msgspec.json.encode(UserMessage("u1", "hi")), type=Message)
print(type(message).__module__, message.content)
print(msgspec.json.decode(b'{"temperature": 0.5}', type=ModelSettings).temperature)
record = MessageRecord(seq=1, message=UserMessage("u1", "hi"))
print(msgspec.json.decode(msgspec.json.encode(record), type=MessageRecord).message.id)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "trio_agent.mcp.MCPServerError: down",
        "trio_agent.session",
        "trio_agent.messages hi",
        "0.5",
        "u1",
    ]


def test_public_classes_of_private_modules_survive_a_pickle_round_trip():
    """A pickle names a class by ``__module__`` and ``__qualname__``: the public module
    must export it there (msgspec Structs, attrs classes and exceptions alike)."""
    import pickle

    from trio_agent import (
        ModelSettings,
        TextBlock,
        ToolCall,
        ToolResult,
        ToolResultMessage,
        UserMessage,
    )
    from trio_agent.ledger import LedgerError, MessageRecord
    from trio_agent.mcp import MCPServerError
    from trio_agent.pricing import Price
    from trio_agent.session import RetryPolicy

    values = [
        ToolCall("c1", "add", {"left": 1}),
        UserMessage("u1", (TextBlock("hi"),)),
        ToolResultMessage("tool-result-c1", "c1", "add", "2"),
        ToolResult("ok", is_error=True),
        ModelSettings(temperature=0.5),
        MessageRecord(seq=1, message=UserMessage("u1", "hi")),
        RetryPolicy(attempts=3),
        Price(input=1e-6, output=2e-6),
    ]
    for value in values:
        assert pickle.loads(pickle.dumps(value)) == value, value
    for error in (MCPServerError("down"), LedgerError("broken")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error)


def _shape(function: Any) -> list[tuple[str, str, object]]:
    """Each parameter as (name, kind, default), ``self`` left out."""
    return [
        (p.name, p.kind.name, p.default)
        for p in inspect.signature(function).parameters.values()
        if p.name != "self"
    ]


def _has(function: Any, *expected: tuple[str, str, object]) -> None:
    shape = _shape(function)
    for each in expected:
        assert each in shape, (function, each, shape)


def test_the_second_and_third_waves_keep_the_signatures_design_md_names():
    """Sections 11 and 12 name these parameters (and their defaults): renaming
    one, making it positional or dropping its default breaks callers."""
    from trio_agent import Agent, FallbackModel, ModelSettings, UsageLimits, run_agent_loop, tool
    from trio_agent.fleet import Worker, submit
    from trio_agent.mcp import MCPServerHTTP, MCPServerStdio
    from trio_agent.providers import (
        AnthropicModel,
        OpenAIChatModel,
        OpenAIResponsesModel,
        infer_model,
    )
    from trio_agent.stores import PostgresStore
    from trio_agent.workspace import Workspace

    empty, pos, kw = inspect.Parameter.empty, "POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY"
    _has(tool, ("requires_approval", kw, False), ("effect", kw, "once"))
    _has(Agent.reject, ("call_id", pos, empty), ("reason", pos, ""))
    _has(Agent.approve, ("call_id", pos, empty))
    _has(
        Agent.fork,
        ("store", pos, empty),
        ("session_id", pos, empty),
        ("at_turn", kw, empty),
        ("new_session_id", kw, None),
    )
    limits = ("requests", "input_tokens", "output_tokens", "total_tokens", "tool_calls", "cost")
    assert [name for name, _, _ in _shape(UsageLimits)] == list(limits)
    assert all(default is None for _, _, default in _shape(UsageLimits))
    assert _shape(FallbackModel)[:2] == [("first", pos, empty), ("rest", "VAR_POSITIONAL", empty)]
    settings = ModelSettings()
    for name in ModelSettings.__struct_fields__:
        assert getattr(settings, name) in (None, ()), name
    assert set(ModelSettings.__struct_fields__) == {
        *("max_tokens", "temperature", "top_p", "stop", "seed", "tool_choice"),
        *("parallel_tool_calls", "reasoning_effort", "thinking_budget"),
        *("extra_body", "extra_headers"),
    }
    for run in (run_agent_loop, Agent):
        _has(run, ("settings", kw, None), ("output_type", kw, None), ("output_retries", kw, 2))
    _has(run_agent_loop, ("deps", kw, None))
    _has(Agent, ("usage_limits", kw, None), ("session_usage_limits", kw, None))
    for turn in (Agent.prompt, Agent.turn):
        _has(turn, ("settings", kw, None), ("output_type", kw, None), ("deps", kw, None))
        _has(turn, ("usage_limits", kw, None))
    for provider in (OpenAIChatModel, OpenAIResponsesModel, AnthropicModel):
        for name in ("api_key", "base_url", "settings", "default_headers", "ssl_context"):
            _has(provider, (name, kw, None))
        for name in ("connect_seconds", "read_seconds", "proxy"):
            assert name in [n for n, kind, _ in _shape(provider) if kind == kw], (provider, name)
        assert "VAR_KEYWORD" not in [kind for _, kind, _ in _shape(provider)], provider
    assert _shape(infer_model)[0] == ("name", pos, empty)
    assert _shape(MCPServerStdio)[:5] == [
        ("command", pos, empty),
        ("args", pos, ()),
        ("env", pos, None),
        ("cwd", pos, None),
        ("prefix", pos, None),
    ]
    assert _shape(MCPServerHTTP)[:3] == [
        ("url", pos, empty),
        ("headers", pos, None),
        ("prefix", pos, None),
    ]
    _has(PostgresStore, ("dsn", pos, empty), ("listen_dsn", kw, None))
    assert [n for n, _, _ in _shape(submit)[:3]] == ["store", "session_id", "message"]
    assert [n for n, _, _ in _shape(Worker)[:2]] == ["store", "make_agent"]
    _has(Workspace, ("root", pos, empty), ("sandbox", kw, "auto"), ("network", kw, False))
