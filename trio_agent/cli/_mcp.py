"""MCP servers as tool sources on the command line: ``--mcp 'COMMAND
ARGS...'`` (a stdio server, split as a shell would, run without one),
``--mcp-http URL`` (streamable HTTP), both repeatable and numbered together in
the order given; a stdio server runs in the workspace directory. ``--mcp-env
NAME`` passes a variable of our environment to the stdio servers (they get
only ``PATH``, ``HOME`` and a few more otherwise).

Each server's tools are named ``{prefix}_{tool}``: the prefix is ``mcp1``,
``mcp2``, ... by position, or the ``NAME`` of a ``NAME=`` written before the
command or URL (``--mcp 'fs=npx -y @modelcontextprotocol/server-filesystem .'``
gives ``fs_read_file``). The servers are recorded in the ledger (as given, the
prefix resolved) so ``resume`` starts them again; ``--mcp-env`` records names,
never values.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Final, Literal

from msgspec import Struct

from ..tools._tool import Tool
from ._errors import UsageError

__all__ = [
    "MCPServerSpec",
    "MCPSpecAction",
    "http_server",
    "numbered",
    "open_servers",
    "stdio_server",
]

_PREFIX: Final = re.compile(r"([A-Za-z0-9_-]{1,32})=(?=\S)")
_ENV_LIKE: Final = re.compile(r"[A-Z][A-Z0-9_]*\Z")


class MCPServerSpec(Struct, kw_only=True, omit_defaults=True):
    """One ``--mcp``/``--mcp-http`` as recorded: ``command`` (argv) for stdio, ``url``
    for HTTP; ``prefix`` None until numbered (``numbered``)."""

    kind: Literal["stdio", "http"]
    prefix: str | None = None
    command: list[str] | None = None
    url: str | None = None

    def as_flag(self, *, named: bool = True, quote: Callable[[str], str] = shlex.quote) -> str:
        """The flag that gives this server: ``--mcp`` or ``--mcp-http``, its value
        (``NAME=`` first, when ``named`` and it has a prefix) quoted by ``quote`` (for
        a shell by default; ``repr`` to name it in a message)."""
        target = shlex.join(self.command or []) if self.kind == "stdio" else str(self.url)
        name = "" if not named or self.prefix is None else f"{self.prefix}="
        return f"--mcp{'-http' if self.kind == 'http' else ''} {quote(name + target)}"


def _split_prefix(text: str) -> tuple[str | None, str]:
    match = _PREFIX.match(text)
    if match is None or text.startswith(("http://", "https://")):
        return None, text
    return match.group(1), text[match.end() :]


def stdio_server(text: str) -> MCPServerSpec:
    """``--mcp``'s value, as argparse's ``type``: ``[NAME=]COMMAND ARGS...``. A
    ``NAME=`` in capitals reads as an environment variable (``TOKEN=... npx ...``,
    a shell habit): refused, pointing to ``--mcp-env``, its value never quoted."""
    prefix, rest = _split_prefix(text.strip())
    if prefix is not None and _ENV_LIKE.match(prefix):
        raise argparse.ArgumentTypeError(
            f"{prefix}=... reads as setting an environment variable, which --mcp does not "
            f"do: set {prefix} in this shell and pass it with --mcp-env {prefix} (a tool "
            "prefix NAME=... is written in lower case)"
        )
    try:
        argv = shlex.split(rest)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"cannot split {text!r} as a shell would: {exc}") from None
    if not argv:
        raise argparse.ArgumentTypeError("a command is needed, got none")
    return MCPServerSpec(kind="stdio", prefix=prefix, command=argv)


def http_server(text: str) -> MCPServerSpec:
    """``--mcp-http``'s value, as argparse's ``type``: ``[NAME=]URL``."""
    prefix, url = _split_prefix(text.strip())
    if not url.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"an http:// or https:// URL is needed, got {url!r}")
    return MCPServerSpec(kind="http", prefix=prefix, url=url)


class MCPSpecAction(argparse.Action):
    """Appends to one list for both flags, so the servers keep the order given."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, [*(given or []), values])


def numbered(specs: Sequence[MCPServerSpec]) -> list[MCPServerSpec]:
    """``specs`` with each missing prefix set to ``mcp{position}`` (from 1); a
    usage error if two servers would share a prefix."""
    out = []
    seen: dict[str, MCPServerSpec] = {}
    for position, spec in enumerate(specs, 1):
        prefix = spec.prefix or f"mcp{position}"
        if prefix in seen:
            raise UsageError(
                f"{spec.as_flag(named=False, quote=repr)} and "
                f"{seen[prefix].as_flag(named=False, quote=repr)} both use the tool prefix "
                f"{prefix!r}: name one of them (NAME=...)"
            )
        out.append(MCPServerSpec(kind=spec.kind, prefix=prefix, command=spec.command, url=spec.url))
        seen[prefix] = out[-1]
    return out


def _environment(names: Sequence[str]) -> dict[str, str]:
    missing = [name for name in names if name not in os.environ]
    if missing:
        raise UsageError(
            f"the environment variable(s) {', '.join(missing)} (named by --mcp-env) are not set"
        )
    return {name: os.environ[name] for name in names}


@asynccontextmanager
async def open_servers(
    specs: Sequence[MCPServerSpec], env_names: Sequence[str] = (), cwd: str | None = None
) -> AsyncIterator[list[Any]]:
    """Enter each server for the block's lifetime, in order (left in reverse);
    yields them (``MCPServerBase``s: ``.tools()`` is each one's current list).
    The stdio servers run in ``cwd`` (the workspace; None: the current directory).
    A server that cannot be used (``MCPServerError``) is a usage error naming
    it; nothing started is left running."""
    if not specs:
        yield []
        return
    try:
        from ..mcp._servers import MCPServerHTTP, MCPServerStdio
        from ..mcp._session import MCPServerError
    except ImportError as exc:
        raise UsageError(
            f"--mcp and --mcp-http need the MCP SDK ({exc}): pip install 'trio-agent[mcp]'"
        ) from None
    env = _environment(env_names)
    servers: list[Any] = []
    for spec in specs:
        if spec.kind == "stdio":
            assert spec.command
            servers.append(
                MCPServerStdio(
                    spec.command[0], spec.command[1:], env=env, cwd=cwd, prefix=spec.prefix
                )
            )
        else:
            assert spec.url is not None
            servers.append(MCPServerHTTP(spec.url, prefix=spec.prefix))
    async with AsyncExitStack() as stack:
        for server in servers:
            try:
                await stack.enter_async_context(server)
            except MCPServerError as exc:  # it names the server
                raise UsageError(str(exc)) from None
        yield servers


def all_tools(base: Sequence[Tool], servers: Sequence[Any]) -> list[Tool]:
    """``base`` and every server's current tools, one list (a usage error when two
    share a name)."""
    tools = list(base)
    names = {tool.name for tool in tools}
    for server in servers:
        for tool in server.tools():
            if tool.name in names:
                raise UsageError(
                    f"{server.label} offers a tool named {tool.name!r}, which is taken: "
                    "give the server another prefix (NAME=...)"
                )
            names.add(tool.name)
            tools.append(tool)
    return tools
