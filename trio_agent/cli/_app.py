"""``--agent MODULE:NAME``: an application's own agent on the command line.

NAME in MODULE is an ``Agent`` (a template: its options, ``Agent.options``,
make each session ``run``, ``resume`` or ``worker`` needs) or a session factory
``(store, session_id, new) -> Agent``, sync or async, as
``trio_agent.fleet.agent_maker`` returns (``new``: the session is not recorded
yet). MODULE is imported as ``python -m`` would find it: from the current
directory first, then the Python path. Every mistake (no such module, no such
name, something that is neither) is a usage error saying what to write; an
error the module raises while it is imported is reported with where it was
raised. The agent brings its model, tools and options: the flags that would
make them are refused beside it (``refuse_beside``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
import sysconfig
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, final

import attrs

from ..session._agent import Agent
from ..stores._base import SessionStore
from ..tools._tool import ToolRegistry
from ._config import agent_metadata
from ._errors import AppError, UsageError

__all__ = ["AppAgent", "load_agent", "refuse_beside", "tools_of"]

# The flags that make the agent --agent names already has: dest, and as written.
_MADE_BY_THE_AGENT: Final = (
    ("provider", "--provider"),
    ("model", "--model"),
    ("base_url", "--base-url"),
    ("api_key_env", "--api-key-env"),
    ("ca_file", "--ca-file"),
    ("max_tokens", "--max-tokens"),
    ("temperature", "--temperature"),
    ("tool_choice", "--tool-choice"),
    ("reasoning_effort", "--reasoning-effort"),
    ("retries", "--retries"),
    ("system", "--system"),
    ("max_steps", "--max-steps"),
    ("workspace", "--workspace"),
    ("sandbox", "--sandbox"),
    ("allow_network", "--allow-network"),
    ("mcp", "--mcp/--mcp-http"),
    ("mcp_env", "--mcp-env"),
    ("output_schema", "--output-schema"),
)


def refuse_beside(args: argparse.Namespace) -> None:
    """A usage error naming each flag given beside ``--agent`` that would make
    what the agent already has (its model, tools, options)."""
    given = [
        flag for dest, flag in _MADE_BY_THE_AGENT if getattr(args, dest, None) not in (None, False)
    ]
    if given:
        them = "it" if len(given) == 1 else "them"
        raise UsageError(
            f"--agent {args.agent} brings its own model, tools and options, so "
            f"{', '.join(given)} cannot be used beside it (drop {them}, or set this in the "
            "agent)"
        )


@final
@attrs.frozen
class AppAgent:
    """The agent ``--agent`` names: ``reference`` as given, and either an Agent
    (``template``) or a session factory (``factory``)."""

    reference: str
    template: Agent | None = None
    factory: Callable[..., Any] | None = None

    def metadata(self, own: Any = ()) -> dict[str, Any]:
        """A new session's metadata: ``own`` and the configuration that says
        ``--agent`` made it."""
        return agent_metadata(self.reference, dict(own))

    async def start(self, store: SessionStore | None, session_id: str | None) -> Agent:
        """The agent of a new session: recorded in ``store`` as ``session_id`` when
        given. A template without a store is itself that agent; one with a store
        is made again with its options, transcript and metadata there."""
        if self.factory is not None:
            if store is None or session_id is None:
                raise UsageError(self.needs_a_store("run"))
            return await self.made(store, session_id, True)
        assert self.template is not None
        template = self.template
        if store is None:
            return template
        if template.session_id is not None:
            raise UsageError(
                f"--agent {self.reference} records its sessions in a store of its own "
                f"(session {template.session_id}): drop --ledger, or make the agent without "
                "store="
            )
        return Agent(
            **template.options.as_keywords(),
            messages=template.messages,
            request_sequence_start=template.requests + 1,
            store=store,
            session_id=session_id,
            metadata=self.metadata(template.metadata),
        )

    async def resume(self, store: SessionStore, session_id: str) -> Agent:
        """The agent of the recorded session ``session_id``: the factory's, or the
        session rebuilt with the template's options (its recorded system prompt kept)."""
        if self.factory is not None:
            return await self.made(store, session_id, False)
        assert self.template is not None
        return await Agent.resume(store, session_id, **self.template.options.resume_keywords())

    def maker(self) -> Callable[[Any, str, bool], Awaitable[Agent]]:
        """The worker's ``make_agent``: the factory's, or ``agent_maker`` with the
        template's options, each new session recording the ``MODULE:NAME``."""
        if self.factory is not None:
            return self.made
        assert self.template is not None
        from ..fleet._maker import agent_maker  # the [postgres] extra: a worker has it

        template = self.template
        return agent_maker(
            **template.options.as_keywords(), metadata=self.metadata(template.metadata)
        )

    async def made(self, store: Any, session_id: str, new: bool) -> Agent:
        """The factory's agent for a session (awaited when it returns an awaitable);
        a usage error when it is not an ``Agent``, an ``AppError`` naming the
        factory and where it raised when it fails (a cancellation propagates)."""
        assert self.factory is not None
        try:
            made = self.factory(store, session_id, new)
            if inspect.isawaitable(made):
                made = await made
        except Exception as exc:  # the application's own failure, whatever its type
            raise AppError(
                f"--agent {self.reference} raised {type(exc).__name__}: {exc}{_at(exc)}, "
                f"making the agent of session {session_id}"
            ) from exc
        if not isinstance(made, Agent):
            raise UsageError(
                f"--agent {self.reference} returned {_kind(made)}, not an Agent, for "
                f"session {session_id}"
            )
        return made

    def needs_a_store(self, command: str) -> str:
        return (
            f"--agent {self.reference} is a session factory (store, session_id, new): it "
            f"makes sessions recorded in the store it is given, so `{command}` needs "
            "--ledger FILE.jsonl (or name an Agent)"
        )


def tools_of(agent: Agent) -> ToolRegistry | None:
    """The agent's own tools, to check arguments an approver edits."""
    tools = agent.options.tools
    return tools if isinstance(tools, ToolRegistry) else None


def load_agent(reference: str) -> AppAgent:
    """Import MODULE (from the current directory first, as ``python -m`` does) and
    take NAME from it: an ``Agent`` or a session factory; a usage error otherwise."""
    module_name, _, name = reference.partition(":")
    where = os.getcwd()
    if where not in sys.path and "" not in sys.path:
        sys.path.insert(0, where)
    module = _imported(reference, module_name, where)
    value: Any = module
    for part in name.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            agents = _agents_in(module)
            known = f" (its Agents: {', '.join(agents)})" if agents else ""
            raise UsageError(
                f"--agent {reference}: {_describe(module)} has no {name!r}{known}"
            ) from None
    if isinstance(value, Agent):
        return AppAgent(reference, template=value)
    if callable(value) and not isinstance(value, type) and _takes_three(value):
        return AppAgent(reference, factory=value)
    raise UsageError(
        f"--agent {reference} is {_kind(value)}: it must be an Agent, or a session factory "
        "taking (store, session_id, new) and returning one (as "
        "trio_agent.fleet.agent_maker(...) makes)"
    )


def _imported(reference: str, module_name: str, where: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise UsageError(
                f"--agent {reference}: no module named {missing!r} in {where} or on the Python path"
            ) from None
        raise UsageError(
            f"--agent {reference}: importing {module_name} failed: {exc}{_at(exc)}"
        ) from None
    except (Exception, SystemExit) as exc:  # the application's own error, as it imports
        raise UsageError(
            f"--agent {reference}: importing {module_name} raised "
            f"{type(exc).__name__}: {exc}{_at(exc)}"
        ) from None


def _at(exc: BaseException) -> str:
    """Where the application raised ``exc``: the file and line of its innermost
    frame outside Python's own library (the import machinery, ``os``, ...), or "".
    A module that does not compile raised nowhere: it is named at its own line."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f" (at {exc.filename}:{exc.lineno})"
    stdlib = sysconfig.get_path("stdlib")
    frames: Sequence[traceback.FrameSummary] = traceback.extract_tb(exc.__traceback__)
    own = [
        f for f in frames if not f.filename.startswith("<") and not f.filename.startswith(stdlib)
    ]
    if not own:
        return ""
    return f" (at {own[-1].filename}:{own[-1].lineno})"


def _describe(module: Any) -> str:
    file = getattr(module, "__file__", None)
    return f"module {module.__name__}" + (f" ({file})" if file else "")


def _agents_in(module: Any) -> list[str]:
    return sorted(n for n, v in vars(module).items() if isinstance(v, Agent))[:10]


def _kind(value: object) -> str:
    if isinstance(value, type):
        return f"the class {value.__name__}"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _takes_three(function: Callable[..., Any]) -> bool:
    """Whether ``function`` can be called with three positional arguments (True
    when its signature cannot be told)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(None, "", True)
    except TypeError:
        return False
    return True
