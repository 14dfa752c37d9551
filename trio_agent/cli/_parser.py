"""The command line's grammar: commands, options, their help and defaults, and the
checks argparse makes at parse time (a usage error, exit 2, names the option)."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable
from typing import Final

import attrs

from .._settings import REASONING_EFFORTS
from ..limits import MAX_AGENT_STEPS
from ._parser_serve import serve_command
from ._values import (
    agent_ref,
    base_url,
    count,
    env_name,
    fraction,
    json_object,
    lease_seconds,
    seconds,
)

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_RETRIES",
    "APPROVE_MODES",
    "DEFAULT_SYSTEM",
    "GUARDED_TOOLS",
    "KEY_VARIABLES",
    "Parsers",
    "build_parser",
]

KEY_VARIABLES: Final = {
    "openai": "OPENAI_API_KEY",
    "openai-responses": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}
DEFAULT_SYSTEM: Final = "You are a careful assistant working in a workspace."
DEFAULT_MAX_STEPS: Final = 32
DEFAULT_RETRIES: Final = 4  # five attempts in all, as RetryPolicy() makes
ANTHROPIC_MAX_TOKENS: Final = 4096


@attrs.frozen
class Parsers:
    """The top-level parser and each command's own (for its usage line in errors)."""

    main: argparse.ArgumentParser
    commands: dict[str, argparse.ArgumentParser]


_EPILOG = """\
--json prints one JSON object per line: {"schema": 1, "event": {...}} for demo,
run and resume, {"schema": 1, "record": {...}} for show. `trio-agent schema`
prints their JSON Schema.

exit codes: 0 the turn completed, 1 it ended otherwise (failed, max_steps, ...)
or the ledger or the provider failed, 2 bad usage (a session not there or not
free, a decision that cannot be made), 3 tool calls were left waiting for
approval, 130 interrupted (Ctrl-C)."""

APPROVE_MODES: Final = ("ask", "auto", "deny", "wait", "defer")
GUARDED_TOOLS: Final = ("write_file", "edit_file", "run")
_APPROVE_HELP = (
    "who says yes to the workspace's write_file, edit_file and run calls: ask (at this "
    "terminal: y, n, or e to edit the arguments), auto (nobody: they run, and calls a "
    "paused session holds are approved), deny (each is rejected, and the model told so), "
    "wait (the session is let go and the calls wait for `trio-agent approve`/`reject` "
    "from another shell; it goes on once all are decided), defer (the command ends, "
    "exit 3, printing the commands that decide and go on) (default: ask when stdin is a "
    "terminal, else deny; not recorded in the ledger)"
)


_AGENT_HELP = (
    "run your own agent instead of a model with the workspace tools: NAME in MODULE, "
    "imported from the current directory (or the Python path), either an Agent (its "
    "model, tools and options{each}) or a session factory, (store, session_id, new) -> "
    "Agent (sync or async, as trio_agent.fleet.agent_maker makes one){factory}. The "
    "agent brings its model, tools and options, so the options that make them "
    "(--provider, --model, --workspace, --system, --mcp, ...) are refused beside it; "
    "--approve decides the calls its own policy holds. {recorded}"
)


_AGENT_HELP_BY_COMMAND: Final = {  # each command's words: each, factory, recorded
    "run": (
        "; with --ledger, a new session with them",
        ", called as (store, session_id, True): it needs --ledger",
        "With --ledger, an Agent's session records MODULE:NAME as its configuration (a "
        "factory's session, the metadata the factory gives it) (default: none)",
    ),
    "resume": (
        ", the recorded session rebuilt with them",
        ", called as (store, session_id, False)",
        "A session `run --agent` made needs it again: resume says which (default: none; "
        "the recorded configuration)",
    ),
    "worker": (
        ", each session made or resumed with them",
        ", called for each session the worker takes",
        "An Agent's new sessions record MODULE:NAME (default: none)",
    ),
}


def _agent_help(command: str) -> str:
    each, factory, recorded = _AGENT_HELP_BY_COMMAND[command]
    return _AGENT_HELP.format(each=each, factory=factory, recorded=recorded)


def _agent_options(
    sub: argparse.ArgumentParser, *, resumed: bool, json: bool = True, command: str = "run"
) -> None:
    """The options ``run``, ``resume`` and ``worker`` share; on ``resume`` each
    defaults to what ``run`` recorded in the ledger, and a flag given overrides it
    for this resume. ``--provider``, ``--model`` and ``--workspace`` are needed
    (checked when the command runs) unless ``--agent`` names the agent."""

    def default(value: str) -> str:
        return "default: as recorded by `run`" if resumed else f"default: {value}"

    def needed() -> str:
        if resumed:
            return "default: as recorded by `run`"
        return "required unless --agent is given; default: none"

    sub.add_argument("--agent", type=agent_ref, metavar="MODULE:NAME", help=_agent_help(command))
    sub.add_argument(
        "--provider",
        choices=sorted(KEY_VARIABLES),
        help="the model provider's API: openai (Chat Completions, and compatible servers), "
        f"openai-responses (OpenAI's Responses API), anthropic ({needed()})"
        + (
            "; switching it drops the recorded model, base URL, key variable, max tokens, CA file"
            if resumed
            else ""
        ),
    )
    sub.add_argument("--model", metavar="NAME", help=f"the model name ({needed()})")
    workspace = (
        "default: as recorded by `run`; for a session `run` did not record, none: "
        "no workspace tools"
        if resumed
        else needed()
    )
    sub.add_argument(
        "--workspace",
        metavar="DIR",
        help="the directory the tools read, write and run commands in, and the --mcp "
        f"servers run in ({workspace})",
    )
    _connection_options(sub, default)
    sub.add_argument(
        "--system",
        metavar="TEXT",
        help=f"the system prompt ({default(repr(DEFAULT_SYSTEM))})",
    )
    sub.add_argument(
        "--max-steps",
        type=count(1, MAX_AGENT_STEPS),
        metavar="N",
        help=f"model requests per turn, 1..{MAX_AGENT_STEPS} ({default(str(DEFAULT_MAX_STEPS))})",
    )
    sub.add_argument(
        "--max-tokens",
        type=count(1),
        metavar="N",
        help="the most output tokens per model response: Anthropic's max_tokens, OpenAI's "
        "max_completion_tokens, the Responses API's max_output_tokens ("
        + default(f"{ANTHROPIC_MAX_TOKENS} for anthropic, the server's own for the others")
        + ")",
    )
    sub.add_argument(
        "--temperature",
        type=fraction(2.0),
        metavar="T",
        help="sampling temperature, 0..2 (" + default("the provider's own") + ")",
    )
    sub.add_argument(
        "--tool-choice",
        metavar="CHOICE",
        help="auto, none, required, or the name of a workspace tool the model must call ("
        + default("the provider's own: auto")
        + ")",
    )
    sub.add_argument(
        "--reasoning-effort",
        choices=REASONING_EFFORTS,
        help="how hard a reasoning model thinks (" + default("the provider's own") + ")",
    )
    sub.add_argument(
        "--retries",
        type=count(0),
        metavar="N",
        help="retry a transient model error (rate limit, 5xx, timeout, dropped connection) "
        f"up to N times, with backoff; 0 never retries ({default(str(DEFAULT_RETRIES))})",
    )
    _sandbox_options(sub)
    _mcp_options(sub, resumed=resumed)
    if json:
        sub.add_argument(
            "--json", action="store_true", help="print events as JSON lines (default: off)"
        )


def _connection_options(sub: argparse.ArgumentParser, default: Callable[[str], str]) -> None:
    """``--base-url``, ``--api-key-env`` and ``--ca-file``: how the provider is reached
    (``default``: the help's default, as the command says it)."""
    sub.add_argument(
        "--base-url",
        type=base_url,
        metavar="URL",
        help="an OpenAI-compatible or Anthropic server ("
        + default("$OPENAI_BASE_URL / $ANTHROPIC_BASE_URL, else the provider's own")
        + ")",
    )
    sub.add_argument(
        "--api-key-env",
        type=env_name,
        metavar="NAME",
        help="read the API key from this environment variable ("
        + default("OPENAI_API_KEY or ANTHROPIC_API_KEY, by provider")
        + "); only the name is recorded, never the key",
    )
    sub.add_argument(
        "--ca-file",
        metavar="PATH",
        help="trust the CA certificates in this PEM file, instead of the system's, for "
        "https to the provider (a private CA, a TLS-inspecting proxy); recorded as an "
        "absolute path (" + default("the system's trust store, or $SSL_CERT_FILE") + ")",
    )


def _sandbox_options(sub: argparse.ArgumentParser) -> None:
    """``--sandbox`` and ``--allow-network``: what confines the run tool's commands."""
    sub.add_argument(
        "--sandbox",
        choices=["auto", "bwrap", "none"],
        help="confine the run tool's commands: bwrap (bubblewrap: the workspace read-write "
        "at its own path, the system read-only, no network; refused if missing), none "
        "(run as you), auto (bwrap where installed and working, else none with a warning; "
        "default: auto; not recorded)",
    )
    sub.add_argument(
        "--allow-network",
        action="store_true",
        help="give sandboxed commands the network (default: none; not recorded)",
    )


def _mcp_options(sub: argparse.ArgumentParser, *, resumed: bool) -> None:
    """``--mcp``, ``--mcp-http``, ``--mcp-env`` (``_mcp``: MCP servers as tool sources)."""
    from ._mcp import MCPSpecAction, http_server, stdio_server

    named = (
        "; its tools are named PREFIX_TOOL, PREFIX being mcp1, mcp2, ... by its position "
        "among the --mcp and --mcp-http given, or NAME when written NAME=... first; they "
        "are not held for approval; repeatable; needs the [mcp] extra ("
    )
    if resumed:
        named += "default: as recorded by `run`; given, these replace all the recorded servers)"
    else:
        named += "default: none)"
    sub.add_argument(
        "--mcp",
        dest="mcp",
        action=MCPSpecAction,
        type=stdio_server,
        metavar="[NAME=]COMMAND",
        help="an MCP server to run while the command runs, as a tool source, spoken to "
        "over its stdin and stdout: the command and its arguments in one string, split as "
        "a shell would, run without one, in the workspace directory (the current "
        "directory when there is no workspace)" + named,
    )
    sub.add_argument(
        "--mcp-http",
        dest="mcp",
        action=MCPSpecAction,
        type=http_server,
        metavar="[NAME=]URL",
        help="an MCP server reached over streamable HTTP at URL, as a tool source" + named,
    )
    sub.add_argument(
        "--mcp-env",
        action="append",
        type=env_name,
        metavar="NAME",
        help="pass this variable of the environment to the --mcp servers, which get only "
        "PATH, HOME, USER, SHELL, TERM, LANG, LC_ALL and LOGNAME otherwise; repeatable; "
        "only the name is recorded ("
        + ("default: as recorded by `run`" if resumed else "default: none")
        + ")",
    )


def _decision_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``approve`` and ``reject``: decide a call a recorded session holds."""
    decided = (
        ". The session must be paused (no process writing it: a `run --approve wait` "
        "waiting for the decision has let it go; one asking at its terminal has not). The "
        "decision is recorded in the ledger, with who and when; `trio-agent resume` (or "
        "the waiting run) then goes on."
    )
    approve = command(
        "approve", "approve a tool call a recorded session holds for approval", decided
    )
    approve.add_argument("ledger", metavar="FILE.jsonl", help="the session's ledger")
    approve.add_argument("call_id", metavar="CALL_ID", help="the held call's id (see `show`)")
    approve.add_argument(
        "--arguments",
        type=json_object,
        metavar="JSON",
        help="run the call with these arguments (a JSON object, checked against the "
        "tool's parameters) instead of the model's (default: the model's)",
    )
    approve.add_argument(
        "--by", metavar="NAME", help="who decides, as recorded (default: the OS user name)"
    )
    reject = command(
        "reject",
        "reject a tool call a recorded session holds for approval: the model is told why",
        decided,
    )
    reject.add_argument("ledger", metavar="FILE.jsonl", help="the session's ledger")
    reject.add_argument("call_id", metavar="CALL_ID", help="the held call's id (see `show`)")
    reject.add_argument(
        "--reason",
        default="",
        metavar="TEXT",
        help="why, sent to the model with the rejection (default: none given)",
    )
    reject.add_argument(
        "--by", metavar="NAME", help="who decides, as recorded (default: the OS user name)"
    )


def build_parser(version: str) -> Parsers:
    """The parser of ``trio-agent``; ``run``'s defaults are filled in at parse time,
    ``resume``'s are left None (taken from the ledger later)."""
    main = argparse.ArgumentParser(
        prog="trio-agent",
        description="LLM agent loops on trio.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    main.add_argument("--version", action="version", version=f"trio-agent {version}")
    main.add_argument(
        "-v",
        "--verbose",
        dest="verbose_before",
        action="count",
        default=0,
        help="as a command's -v: log INFO (-v) or DEBUG (-vv) to stderr",
    )
    sub = main.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands: dict[str, argparse.ArgumentParser] = {}

    def command(name: str, text: str, more: str = "") -> argparse.ArgumentParser:
        parser = sub.add_parser(
            name,
            help=text,
            description=textwrap.fill(text + more, 79),
            epilog=_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument(
            "-v",
            "--verbose",
            action="count",
            default=0,
            help="log to stderr: -v turns, retries and resume notes (INFO), -vv also each "
            "request, step and tool call (DEBUG); never a key or message content "
            "(default: no log)",
        )
        commands[name] = parser
        return parser

    demo = command("demo", "run an offline multi-step demo on a scripted model (no key needed)")
    demo.add_argument(
        "--json", action="store_true", help="print events as JSON lines (default: off)"
    )

    run = command(
        "run",
        "run an agent on a task: a model with the workspace tools, or your own agent (--agent)",
    )
    _agent_options(run, resumed=False, command="run")
    run.add_argument(
        "--ledger",
        metavar="FILE.jsonl",
        help="record the session and its configuration to this new file, for `show` and "
        "`resume` (default: not recorded)",
    )
    run.add_argument(
        "--output-schema",
        metavar="FILE.json",
        help="a JSON Schema of an object: the answer must fit it (checked, and sent back to "
        "the model to fix when it does not), and is printed last, as one line of compact "
        "JSON; with --json, turn.finished carries it as result.output (default: a text "
        "answer)",
    )
    run.add_argument("--approve", choices=APPROVE_MODES, help=_APPROVE_HELP)
    run.add_argument("task", help="what the agent should do")

    _resume_command(command)
    _decision_commands(command)
    _reading_commands(command)
    _fleet_commands(command)
    serve_command(command)
    return Parsers(main, commands)


def _resume_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``resume``: go on with a recorded session."""
    resume = command(
        "resume",
        "go on with a recorded session: a new turn with --message, else the turn an "
        "interruption or a pause for approval left owing a reply",
        ". Without --message it continues only a reply an interruption left owed: the "
        "last turn was cut by a crash (left open) or ended interrupted or cancelled "
        "(Ctrl-C), or calls were left without a result (the resume closes them). A turn "
        "that ended any other way (completed, max_steps, failed, ...) is not continued: "
        "that is a usage error, and nothing is written. Every option defaults to what "
        "`run` recorded in the ledger; an option "
        "given overrides it for this resume (the record is kept as it is)."
        " Calls a turn left waiting for approval are continued too (with or without "
        "--message): those decided (`trio-agent approve`/`reject`) run or are answered "
        "first, the others are decided as --approve says. A session `run --agent "
        "MODULE:NAME` made is resumed with --agent MODULE:NAME again. A ledger `run` did "
        "not write (an application's) records no configuration: pass --agent "
        "MODULE:NAME to go on with the application's agent, or --provider and --model to "
        "go on with a model alone, with no tools but the workspace's when --workspace is "
        "given and the --mcp servers'.",
    )
    resume.add_argument("ledger", metavar="FILE.jsonl", help="the session's ledger")
    _agent_options(resume, resumed=True, command="resume")
    resume.add_argument("--approve", choices=APPROVE_MODES, help=_APPROVE_HELP)
    resume.add_argument(
        "--message",
        dest="task",
        metavar="TEXT",
        help="a new message (default: continue a turn a crash or Ctrl-C left owing a "
        "reply; any other turn end is a usage error)",
    )


def _database_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--dsn",
        required=True,
        metavar="DSN",
        help="the PostgreSQL database: a libpq connection string or URL (required)",
    )
    sub.add_argument(
        "--schema",
        default="trio_agent",
        metavar="NAME",
        help="the schema holding the sessions, leases and inbox (default: trio_agent)",
    )
    sub.add_argument(
        "--listen-dsn",
        metavar="DSN",
        help="the same database reached directly, to LISTEN for notifications when --dsn "
        "goes through a transaction pooler such as PgBouncer (default: --dsn, or polling "
        "when it is behind a pooler)",
    )


def _fleet_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``worker`` and ``submit``: sessions shared through PostgreSQL (``trio_agent.fleet``)."""
    worker = command(
        "worker",
        "work as one of a fleet: take sessions with queued input from PostgreSQL and "
        "answer it, until SIGTERM or Ctrl-C",
        ". Each session works in its own directory, WORKSPACE/SESSION (made on first "
        "use), with the workspace tools, or with --agent MODULE:NAME as your agent "
        "makes it. A new session records this configuration; a "
        "worker that takes a recorded session over resumes it (calls a dead worker left "
        "open are answered as unknown, never run again). The first SIGTERM or Ctrl-C "
        "drains: no new turn starts, the turns under way finish (cancelled after "
        "--drain-seconds), the leases are let go; a second one cancels at once. Needs "
        "the [postgres] extra.",
    )
    _database_options(worker)
    _agent_options(worker, resumed=False, json=False, command="worker")
    worker.add_argument(
        "--concurrency",
        type=count(1, 10_000),
        default=4,
        metavar="N",
        help="sessions this worker runs at a time (default: 4)",
    )
    worker.add_argument(
        "--drain-seconds",
        type=seconds,
        default=30.0,
        metavar="S",
        help="how long a drain lets the turns under way finish (default: 30)",
    )
    worker.add_argument(
        "--lease-seconds",
        type=lease_seconds,
        default=30.0,
        metavar="S",
        help="how long a session stays with a worker that stopped renewing it (it died, "
        "or lost the database) before another takes it over (default: 30)",
    )
    submit = command(
        "submit",
        "queue a message for a session in PostgreSQL, for the fleet's workers; prints "
        "its input number",
    )
    _database_options(submit)
    submit.add_argument(
        "--create",
        action="store_true",
        help="start the session if it does not exist (default: it must exist)",
    )
    submit.add_argument(
        "--wait",
        action="store_true",
        help="wait for a worker's answer and print it (exit 1 unless the turn completed) "
        "(default: print the input number and return)",
    )
    submit.add_argument("session", metavar="SESSION", help="the session's id")
    submit.add_argument("message", metavar="MESSAGE", help="the message")


def _fork_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``fork``: a new session from a recorded one's history through a turn."""
    fork = command(
        "fork",
        "start a new session from a recorded one's history through the end of a turn",
        ". The new session has the source's transcript, configuration and held calls "
        "as they stood when that turn ended; the source is only read. Go on with the "
        "new session as with any: `trio-agent resume FILE.jsonl` for a ledger in a "
        "directory, `Agent.resume` in code for any store.",
    )
    fork.add_argument(
        "session",
        metavar="FILE.jsonl|SESSION",
        help="the source's ledger, or with --store or --dsn its id",
    )
    fork.add_argument(
        "--at-turn",
        "--turn",
        dest="at_turn",
        type=int,
        required=True,
        metavar="N",
        help="the last turn the new session takes (0: none, the session as created) (required)",
    )
    fork.add_argument(
        "--new-id",
        "--new-session-id",
        dest="new_id",
        metavar="ID",
        help="the new session's id (default: a fresh one); refused if it exists",
    )
    where = fork.add_mutually_exclusive_group()
    where.add_argument(
        "--store",
        metavar="DIR|FILE",
        help="the source's store: a directory of SESSION.jsonl ledgers or a SQLite "
        "database (default: a .jsonl file)",
    )
    where.add_argument(
        "--dsn", metavar="DSN", help="the source's PostgreSQL database (default: a .jsonl file)"
    )
    to = fork.add_mutually_exclusive_group()
    to.add_argument(
        "--to-store",
        metavar="DIR|FILE",
        help="put the new session in this store: a directory of ledgers, or a SQLite "
        "database (a .db/.sqlite file is made if missing) (default: the source's store)",
    )
    to.add_argument(
        "--to-dsn",
        metavar="DSN",
        help="put the new session in this PostgreSQL database (default: the source's store)",
    )
    fork.add_argument(
        "--schema",
        default="trio_agent",
        metavar="NAME",
        help="with --dsn/--to-dsn: the schema holding the sessions (default: trio_agent)",
    )


def _reading_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``show`` and ``schema``: commands that read and print."""
    show = command(
        "show",
        "show a recorded session: its configuration, turns, calls, usage",
        ". It is read from a .jsonl ledger, a store (--store: a directory of .jsonl "
        "ledgers, as JsonlStore keeps them, or a SQLite database, as SqliteStore keeps "
        "one, opened read-only), or PostgreSQL (--dsn); nothing is written.",
    )
    show.add_argument(
        "ledger",
        metavar="FILE.jsonl|SESSION",
        help="the session's ledger, or with --store or --dsn the session's id",
    )
    where = show.add_mutually_exclusive_group()
    where.add_argument(
        "--store",
        metavar="DIR|FILE",
        help="read the session from this store: a directory of SESSION.jsonl ledgers, or "
        "a SQLite database file (told by its content) (default: a .jsonl file)",
    )
    where.add_argument(
        "--dsn",
        metavar="DSN",
        help="read the session from this PostgreSQL database (default: a .jsonl file)",
    )
    show.add_argument(
        "--schema",
        default="trio_agent",
        metavar="NAME",
        help="with --dsn: the schema holding the sessions (default: trio_agent)",
    )
    show.add_argument(
        "--json", action="store_true", help="print the records as JSON lines (default: off)"
    )
    _fork_command(command)
    schema = command("schema", "print the JSON Schema of the --json lines")
    schema.add_argument(
        "--kind",
        choices=["events", "records", "all"],
        default="all",
        help="events (demo, run, resume), records (show) or both (default: all)",
    )
