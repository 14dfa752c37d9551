"""A run's configuration: from the flags, recorded in the ledger by ``run`` (Agent
metadata, under ``"cli"``), read back by ``resume`` with the flags given on top.
It holds the key's variable name, never the key."""

from __future__ import annotations

import argparse
import os
import ssl
from collections.abc import Container, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

import msgspec
from msgspec import Meta, Struct

from .._settings import ModelSettings, check_run_settings
from ..limits import MAX_AGENT_STEPS
from ..session._retry import RetryPolicy
from ._errors import UsageError
from ._mcp import MCPServerSpec, numbered
from ._parser import (
    ANTHROPIC_MAX_TOKENS,
    DEFAULT_MAX_STEPS,
    DEFAULT_RETRIES,
    KEY_VARIABLES,
)
from ._trust import sealed

if TYPE_CHECKING:
    from ..providers.anthropic import AnthropicModel
    from ..providers.openai import OpenAIChatModel
    from ..providers.responses import OpenAIResponsesModel

__all__ = [
    "CONFIG_FORMAT",
    "METADATA_KEY",
    "RunConfig",
    "Settings",
    "agent_metadata",
    "dropped_by",
    "resolve",
    "ssl_context",
]

METADATA_KEY: Final = "cli"
CONFIG_FORMAT: Final = 1

Provider = Literal["openai", "openai-responses", "anthropic"]
_Steps = Annotated[int, Meta(ge=1, le=MAX_AGENT_STEPS)]
_Positive = Annotated[int, Meta(ge=1)]
_Count = Annotated[int, Meta(ge=0)]

# The settings that belong to one provider: a resume that switches --provider
# takes none of them from the record.
_PROVIDER_SETTINGS: Final = ("model", "base_url", "api_key_env", "max_tokens", "ca_file")
_MODEL_SETTINGS: Final = ("temperature", "tool_choice", "reasoning_effort")


class Settings(Struct, kw_only=True):
    """A configuration as the flags gave it or a ledger recorded it; None: not given.
    ``agent``: the ``--agent MODULE:NAME`` a session was run with (then the rest is
    not recorded: the agent is the configuration)."""

    agent: str | None = None
    provider: Provider | None = None
    model: str | None = None
    base_url: str | None = None
    workspace: str | None = None
    system: str | None = None
    max_steps: _Steps | None = None
    max_tokens: _Positive | None = None
    retries: _Count | None = None
    api_key_env: str | None = None
    ca_file: str | None = None
    temperature: float | None = None
    tool_choice: str | None = None
    reasoning_effort: str | None = None
    mcp: list[MCPServerSpec] | None = None
    mcp_env: list[str] | None = None


class RunConfig(Struct, kw_only=True):
    """A complete configuration, as recorded: ``base_url`` is the one the model used,
    ``workspace`` absolute (None: no workspace tools, a resume of a session ``run``
    did not record), ``api_key_env`` the variable named by ``--api-key-env``
    (None: the provider's own), ``max_tokens`` None where the server decides,
    ``ca_file`` absolute (None: the system's trust store)."""

    format: int = CONFIG_FORMAT
    provider: Provider
    model: str
    base_url: str | None
    workspace: str | None
    system: str
    max_steps: int
    max_tokens: int | None
    retries: int
    api_key_env: str | None
    ca_file: str | None = None
    temperature: float | None = None
    tool_choice: str | None = None
    reasoning_effort: str | None = None
    mcp: list[MCPServerSpec] = msgspec.field(default_factory=list)
    mcp_env: list[str] = msgspec.field(default_factory=list)

    def metadata(self) -> dict[str, Any]:
        """The Agent metadata that records this configuration (model settings and
        MCP servers only when given: a record without them reads as before they
        existed)."""
        data = msgspec.to_builtins(self)
        for name in (*_MODEL_SETTINGS, "ca_file"):
            if data[name] is None:
                del data[name]
        for name in ("mcp", "mcp_env"):
            if not data[name]:
                del data[name]
        return {METADATA_KEY: sealed(data)}

    def key_variable(self) -> str:
        return self.api_key_env or KEY_VARIABLES[self.provider]

    def api_key(self, key_named_by: str = "--api-key-env") -> str:
        """The key, from the variable this configuration names; a usage error if unset
        naming that variable only (``key_named_by``: where ``api_key_env`` came from)."""
        name = self.key_variable()
        key = os.environ.get(name)
        if key:
            return key
        if self.api_key_env is not None:
            raise UsageError(
                f"no API key: the environment variable {name} (named by {key_named_by}) "
                "is not set or empty; set it or pass --api-key-env NAME"
            )
        raise UsageError(f"no API key: set {name} or pass --api-key-env NAME")

    def model_object(
        self, key_named_by: str = "--api-key-env"
    ) -> OpenAIChatModel | OpenAIResponsesModel | AnthropicModel:
        """The provider model this configuration describes (reads the key)."""
        from ..providers.anthropic import AnthropicModel
        from ..providers.openai import OpenAIChatModel
        from ..providers.responses import OpenAIResponsesModel

        key = self.api_key(key_named_by)
        context = None if self.ca_file is None else ssl_context(self.ca_file)
        if self.provider == "openai-responses":
            return OpenAIResponsesModel(
                self.model,
                api_key=key,
                base_url=self.base_url,
                max_output_tokens=self.max_tokens,
                ssl_context=context,
            )
        if self.provider == "openai":
            # OpenAI's own default otherwise: max_tokens is deprecated there, and
            # compatible servers have their own limits.
            return OpenAIChatModel(
                self.model,
                api_key=key,
                base_url=self.base_url,
                max_completion_tokens=self.max_tokens,
                ssl_context=context,
            )
        return AnthropicModel(
            self.model,
            api_key=key,
            base_url=self.base_url,
            max_tokens=self.max_tokens or ANTHROPIC_MAX_TOKENS,
            ssl_context=context,
        )

    def settings(self, tools: Container[str]) -> ModelSettings | None:
        """The model settings the flags give (None: none given); a usage error if
        ``--tool-choice`` names none of ``tools``."""
        if self.temperature is None and self.tool_choice is None and self.reasoning_effort is None:
            return None
        settings = ModelSettings(
            temperature=self.temperature,
            tool_choice=self.tool_choice,
            reasoning_effort=self.reasoning_effort,
        )
        try:
            return check_run_settings(settings, tools)
        except ValueError as exc:
            names = ", ".join(sorted(tools)) if isinstance(tools, Iterable) else ""
            raise UsageError(f"--tool-choice: {exc} ({names})") from None

    def retry(self) -> RetryPolicy:
        """``retries`` more attempts after the first, for transient model errors."""
        return RetryPolicy(attempts=self.retries + 1)


def ssl_context(ca_file: str) -> ssl.SSLContext:
    """A client context that trusts the CA certificates of ``ca_file`` (PEM) and no
    others, as ``SSL_CERT_FILE`` would; a usage error naming the file if it cannot
    be read or holds no certificate."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except FileNotFoundError:
        raise UsageError(f"--ca-file {ca_file}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"--ca-file {ca_file}: a directory, not a PEM file") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise UsageError(
            f"--ca-file {ca_file}: not a PEM file of CA certificates ({exc})"
        ) from None


def dropped_by(flags: Settings, record: Settings) -> set[str]:
    """The recorded settings a resume leaves unused because ``--provider`` names
    another provider than the record's (``resolve`` drops them)."""
    if flags.provider is not None and record.provider not in (None, flags.provider):
        return set(_PROVIDER_SETTINGS)
    return set()


def agent_metadata(reference: str, own: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata of a session ``--agent`` starts: the agent's own, and the
    configuration (its ``MODULE:NAME``) under ``METADATA_KEY``."""
    return {**own, METADATA_KEY: {"format": CONFIG_FORMAT, "agent": reference}}


def given(args: argparse.Namespace) -> Settings:
    """The settings the command line gave (None where a flag was left out)."""
    return Settings(
        provider=args.provider,
        model=args.model,
        base_url=args.base_url,
        workspace=args.workspace,
        system=args.system,
        max_steps=args.max_steps,
        max_tokens=args.max_tokens,
        retries=args.retries,
        api_key_env=args.api_key_env,
        ca_file=None if args.ca_file is None else os.path.abspath(args.ca_file),
        temperature=args.temperature,
        tool_choice=args.tool_choice,
        reasoning_effort=args.reasoning_effort,
        mcp=getattr(args, "mcp", None),
        mcp_env=getattr(args, "mcp_env", None),
    )


def recorded(metadata: Mapping[str, Any] | None) -> Settings | None:
    """The configuration ``run`` recorded in a session's metadata, if it did."""
    if not metadata or METADATA_KEY not in metadata:
        return None
    try:
        return msgspec.convert(metadata[METADATA_KEY], Settings)
    except msgspec.ValidationError as exc:
        raise UsageError(
            f"the ledger's recorded configuration cannot be used ({exc}); "
            "pass --agent MODULE:NAME, or --provider, --model and --workspace"
        ) from None


def resolve(
    flags: Settings,
    record: Settings | None = None,
    *,
    system: str,
    why: str = "",
    workspace: bool = True,
) -> RunConfig:
    """The configuration to run: each flag given, else what was recorded, else the
    default (``system``: the session's own system prompt when resuming). A usage
    error names what is missing, after ``why`` (what the command needs it for).
    ``workspace``: whether a workspace is needed (else None when none is given)."""
    base = record or Settings()
    if record is not None:
        why = "the ledger's recorded configuration has none"
    if flags.provider is not None and base.provider not in (None, flags.provider):
        base = msgspec.structs.replace(base, **dict.fromkeys(_PROVIDER_SETTINGS))
        why = (
            f"--provider {flags.provider} replaces the recorded {record and record.provider}, "
            "so its model, base URL, key variable, max tokens and CA file are not used"
        )
    merged = msgspec.structs.replace(
        base,
        **{
            name: value
            for name in Settings.__struct_fields__
            if (value := getattr(flags, name)) is not None
        },
    )
    needed = ("provider", "model", "workspace") if workspace else ("provider", "model")
    missing = [f"--{name}" for name in needed if getattr(merged, name) is None]
    if missing:
        names = ", ".join(missing)
        raise UsageError(f"{why}: pass {names}" if why else f"pass {names}")
    assert merged.provider is not None and merged.model is not None
    return RunConfig(
        provider=merged.provider,
        model=merged.model,
        base_url=merged.base_url,
        workspace=None if merged.workspace is None else str(Path(merged.workspace).resolve()),
        system=system if merged.system is None else merged.system,
        max_steps=DEFAULT_MAX_STEPS if merged.max_steps is None else merged.max_steps,
        max_tokens=merged.max_tokens,
        retries=DEFAULT_RETRIES if merged.retries is None else merged.retries,
        api_key_env=merged.api_key_env,
        ca_file=merged.ca_file,
        temperature=merged.temperature,
        tool_choice=merged.tool_choice,
        reasoning_effort=merged.reasoning_effort,
        mcp=numbered(merged.mcp or []),
        mcp_env=list(dict.fromkeys(merged.mcp_env or [])),
    )
