"""``show``: a recorded session for a person (its configuration, each turn with the
model that ran it, calls, results, approvals asked for and decided, its accepted
typed output, how its last writer left it, the calls still waiting for approval,
usage), or its records as versioned JSON lines (after the warnings reading it
gave, when it gave any: a line a crash cut off)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from ..events import ApprovalDecision
from ..ledger._derive import DerivedSession, derive
from ..ledger._records import (
    ApprovalDecidedRecord,
    ApprovalRequestedRecord,
    AttemptFailedRecord,
    MessageRecord,
    OutputRecord,
    Record,
    SessionClosedRecord,
    StepStartRecord,
    ToolCancelledRecord,
    ToolFailedRecord,
    ToolResultRecord,
    TurnEndRecord,
    TurnStartRecord,
)
from ..messages._ir import (
    AssistantMessage,
    Block,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    UserMessage,
)
from ..model import Usage
from ..stores._base import LoadedSession
from ..stores._lock import holder_of
from ..telemetry._pricing import cost_of
from ._commands import ledger_location, read_ledger
from ._config import METADATA_KEY
from ._drive import EXIT_OK
from ._errors import UsageError
from ._output import content_line, describe_end, json_line, one_line, visible
from ._parser import ANTHROPIC_MAX_TOKENS, KEY_VARIABLES
from ._schema import SCHEMA_VERSION, RecordLine, WarningsLine
from ._stored import read_stored, store_hint

__all__ = ["show"]


def _loaded(args: argparse.Namespace) -> tuple[LoadedSession, str | None]:
    """The session's records and who writes it now (None: nobody), from its
    ``.jsonl`` file, a store (``--store``: a directory or a SQLite file) or, with
    ``--dsn``, PostgreSQL. A store given as a ledger is a usage error that says
    how to name the session."""
    dsn = getattr(args, "dsn", None)  # absent when called with a namespace of its own
    if dsn is not None:
        from ._fleet import read_session

        return read_session(dsn, getattr(args, "schema", "trio_agent"), args.ledger)
    store = getattr(args, "store", None)
    if store is not None:
        return read_stored(store, args.ledger)
    if not args.ledger.endswith(".jsonl") and (hint := store_hint(Path(args.ledger))):
        raise UsageError(hint)
    loaded = read_ledger(args.ledger)
    _, _, file = ledger_location(args.ledger)
    return loaded, holder_of(file)


def show(args: argparse.Namespace) -> int:
    loaded, holder = _loaded(args)
    out = sys.stdout
    if args.json:
        encoder = msgspec.json.Encoder()
        if loaded.warnings:  # first, as the text form says them
            said = WarningsLine(schema=SCHEMA_VERSION, warnings=list(loaded.warnings))
            out.write(encoder.encode(said).decode() + "\n")
        for record in loaded.records:
            wrapped = RecordLine(schema=SCHEMA_VERSION, record=record)
            out.write(encoder.encode(wrapped).decode() + "\n")
        return EXIT_OK
    derived = derive(loaded.records)
    lines = [f"warning: {warning}" for warning in loaded.warnings]
    lines.append(
        f"session {derived.session_id}: {derived.turns} turn(s), {derived.requests} request(s)"
    )
    lines += _configuration(derived.metadata)
    for record in loaded.records:
        lines += _record_lines(record)
    lines.append(f"\n{_state_of(derived, holder)}")
    lines += _pending_lines(derived)
    usage, failed = derived.usage, derived.failed_usage
    line = f"usage: {usage.input_tokens} input / {usage.output_tokens} output tokens"
    if failed.input_tokens or failed.output_tokens:
        line += (
            f" (and {failed.input_tokens} input / {failed.output_tokens} output in "
            "responses that were refused)"
        )
    cost = _cost(usage, derived.metadata)
    if cost is not None:
        line += f"; cost ${cost:.6f}"
    lines.append(line)
    out.write("".join(visible(text) + "\n" for text in lines))
    return EXIT_OK


def _cost(usage: Usage, metadata: Mapping[str, Any] | None) -> float | None:
    """The session's cost, when ``run`` recorded its model and its prices are known
    (the ``genai-prices`` package, when installed)."""
    config = (metadata or {}).get(METADATA_KEY)
    if not isinstance(config, Mapping) or not isinstance(config.get("model"), str):
        return None
    provider = str(config.get("provider") or "").removesuffix("-responses")
    try:
        import genai_prices  # noqa: F401  # imported for cost_of, when installed
    except ImportError:
        pass
    return cost_of(usage, config["model"], provider=provider)


def _configuration(metadata: Mapping[str, Any] | None) -> list[str]:
    """The configuration ``run`` recorded (and any other metadata), one line each."""
    config = (metadata or {}).get(METADATA_KEY)
    if isinstance(config, Mapping):
        lines = ["configuration (recorded by `trio-agent run`; `resume` uses it):"]
        for name, value in config.items():
            if name == "format":
                continue
            if value is None:
                value = _default_of(name, config)
            elif name == "system":
                value = one_line(str(value), 80)
            elif name == "mcp":
                value = _servers(value)
            lines.append(f"  {name}: {value}")
    else:
        lines = [
            "configuration: none recorded by `trio-agent run` (resume needs --agent "
            "MODULE:NAME, or --provider and --model: with no tools but --workspace's)"
        ]
    rest = {k: v for k, v in (metadata or {}).items() if k != METADATA_KEY}
    if rest:
        lines.append(f"metadata: {one_line(msgspec.json.encode(rest).decode(), 200)}")
    return lines


def _servers(value: Any) -> str:
    """The recorded MCP servers as ``run`` would take them (``PREFIX=COMMAND``,
    ``PREFIX=URL``), on one line."""
    shown = []
    for server in value if isinstance(value, list) else [value]:
        if not isinstance(server, Mapping):
            shown.append(repr(server))
        elif server.get("kind") == "stdio" and isinstance(server.get("command"), list):
            command = shlex.join(str(part) for part in server["command"])
            given = f"{server.get('prefix')}={command}"
            shown.append(f"--mcp {shlex.quote(given)}")
        else:
            shown.append(f"--mcp-http {server.get('prefix')}={server.get('url')}")
    return one_line(" ".join(shown), 400)


def _default_of(name: str, config: Mapping[str, Any]) -> str:
    """What a setting recorded as None (not given) meant."""
    provider = str(config.get("provider"))
    if name == "api_key_env":
        variable = KEY_VARIABLES.get(provider, "the provider's variable")
        return f"(not given: {variable})"
    if name == "max_tokens" and provider == "anthropic":
        return f"(not given: {ANTHROPIC_MAX_TOKENS})"
    if name == "max_tokens":
        return "(not given: the server's own)"
    return "(not given)"


def _state_of(derived: DerivedSession, holder: str | None) -> str:
    """How the last writer left the session: closed, being written, or died."""
    if holder is not None:
        return f"open: {holder} is writing it"
    if derived.closed:
        return "closed cleanly by its last writer"
    where = "in a turn" if derived.open_turn is not None else "between turns"
    return f"not closed: its last writer crashed or was killed ({where})"


def _pending_lines(derived: DerivedSession) -> list[str]:
    """The calls waiting for approval, each with its arguments and decision, if any."""
    if not derived.pending_approvals:
        return []
    lines = [f"waiting for approval: {len(derived.pending_approvals)} call(s)"]
    for call in derived.pending_approvals:
        decision = derived.decisions.get(call.id)
        said = _decision_text(decision) if decision is not None else "undecided"
        lines.append(f"  {call.id} {_call_text(call)}: {said}")
    return lines


def _call_text(call: ToolCall) -> str:
    """A call as ``name({...})``, its arguments as compact JSON cut to fit a line."""
    return f"{call.name}({one_line(json_line(call.arguments), 80)})"


def _decision_text(decision: ApprovalDecision) -> str:
    """``approved``/``rejected``, by whom, why, and the approver's arguments."""
    text = "approved" if decision.approved else "rejected"
    if decision.by:
        text += f" by {one_line(decision.by, 40)}"
    if decision.reason:
        text += f" ({one_line(decision.reason, 80)})"
    if decision.arguments is not None:
        text += f", to run with {one_line(json_line(decision.arguments), 80)}"
    return text


def _record_lines(record: Record) -> list[str]:
    """What a person reads of one record (nothing for the bookkeeping ones)."""
    match record:
        case TurnStartRecord():
            model = f" ({record.model})" if record.model else ""
            return [f"\n== turn {record.turn}{model}"]
        case MessageRecord(message=UserMessage() as message):
            return [f"user: {content_line(message.content)}"]
        case MessageRecord(message=AssistantMessage() as message):
            return [_block_line(block) for block in message.content if _block_line(block)]
        case ToolResultRecord():
            mark = "error" if record.result.is_error else "ok"
            code = f" {record.code}" if record.code else ""
            return [f"  result [{mark}{code}] {content_line(record.result.content)}"]
        case ToolCancelledRecord():
            return [f"  call {record.call_id} was cancelled while it ran"]
        case ToolFailedRecord():
            return [f"  call {record.call_id} failed fatally: {one_line(record.error, 80)}"]
        case ApprovalRequestedRecord():
            return [f"  call {record.call_id} waits for approval"]
        case ApprovalDecidedRecord():
            return [f"approval: call {record.call_id} {_decision_text(record.decision)}"]
        case StepStartRecord():
            return [f"- {record.request_id}"]
        case AttemptFailedRecord():
            return [f"  attempt {record.attempt} failed: {one_line(record.error, 80)}"]
        case OutputRecord():
            return [_output_line(record)]
        case TurnEndRecord():
            return [f"== turn {record.turn} ended: {describe_end(record.end)}"]
        case SessionClosedRecord():
            return ["(session closed)"]
    return []


def _output_line(record: OutputRecord) -> str:
    """A turn's accepted output, whole, as compact JSON on one line (``json_line``)."""
    if record.error is not None:
        return f"output (from {record.request_id}): not recorded: {one_line(record.error, 200)}"
    return f"output (from {record.request_id}): {json_line(record.output)}"


def _block_line(block: Block) -> str:
    if isinstance(block, TextBlock):
        return f"assistant: {one_line(block.text)}" if block.text else ""
    if isinstance(block, ThinkingBlock):
        signed = ", signed" if block.signature else ""
        return f"  thinking{signed}: {one_line(block.thinking, 80)}"
    if isinstance(block, RedactedThinkingBlock):
        return f"  thinking (redacted, {len(block.data)} characters)"
    return f"  call {_call_text(block)} [{block.id}]"
