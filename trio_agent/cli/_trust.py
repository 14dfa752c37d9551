"""Whether a ledger's recorded configuration is this user's own, before ``resume``
acts on it.

A ledger can come from anyone, and its recorded configuration says which
commands to start (``--mcp``), where to send the API key and which variable
holds it (``--base-url``, ``--api-key-env``, ``--ca-file``), and over which
directory the model gets its tools (``--workspace``). ``run`` seals what it
records with a key only this user can read (``ledger-key`` in
``$XDG_CONFIG_HOME/trio-agent``, else ``~/.config/trio-agent``, made on first
use, mode 0600). ``resume`` acts on those settings only when the seal is this
user's; otherwise each must be given again as a flag (fail closed), and the
error says which, with their recorded values. Settings that only shape the
answer (the model, its limits, the system prompt) are used either way.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from ._errors import UsageError

__all__ = ["SEAL", "TRUSTED", "check_trusted", "sealed"]

SEAL: Final = "seal"
"""The key of the seal in the recorded configuration."""
TRUSTED: Final = ("mcp", "mcp_env", "base_url", "api_key_env", "ca_file", "workspace")
"""The settings a resume acts on only when this user recorded them."""
_FLAGS: Final = {name: "--" + name.replace("_", "-") for name in TRUSTED}
_KEY_BYTES: Final = 32


def _key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "trio-agent" / "ledger-key"


def _key(create: bool) -> bytes | None:
    """This user's sealing key (made when ``create`` and missing); None when there
    is none, or it cannot be read or made (then nothing is sealed: a resume asks
    for the flags again)."""
    path = _key_path()
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        if not create:
            return None
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it meanwhile
            return _key(False)
        except OSError:
            return None
        key = secrets.token_bytes(_KEY_BYTES)
        with os.fdopen(fd, "wb") as file:
            file.write(key)
        return key
    except OSError:
        return None
    return key if len(key) == _KEY_BYTES else None


def _mac(key: bytes, config: Mapping[str, Any]) -> str:
    body = msgspec.json.encode({k: v for k, v in config.items() if k != SEAL}, order="sorted")
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def sealed(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a configuration about to be recorded) with this user's seal,
    the key made if need be; as it is when no key can be had."""
    key = _key(create=True)
    return config if key is None else {**config, SEAL: _mac(key, config)}


def _is_mine(config: Mapping[str, Any]) -> bool:
    seal = config.get(SEAL)
    key = _key(create=False)
    if key is None or type(seal) is not str:
        return False
    return hmac.compare_digest(seal, _mac(key, config))


def check_trusted(config: Mapping[str, Any], record: Any, flags: Any, dropped: set[str]) -> None:
    """A usage error when the recorded ``config`` (its ``record``, read) would have a
    resume act on a ``TRUSTED`` setting no flag gives again (``dropped``: those a
    change of provider leaves unused), and this user did not seal it."""
    unsure = [
        name
        for name in TRUSTED
        if getattr(record, name) not in (None, [])  # "" is a workspace too: the cwd
        and getattr(flags, name) is None
        and name not in dropped
    ]
    if not unsure or _is_mine(config):
        return
    again = " ".join(_as_flags(name, getattr(record, name)) for name in unsure)
    raise UsageError(
        "the ledger's recorded configuration was not recorded by you on this machine (it "
        "bears no seal of yours), and it would start commands, send your API key or give "
        f"the model a directory: give each such setting again if you mean it: {again}"
    )


def _as_flags(name: str, value: Any) -> str:
    """The flags that give ``value`` again, quoted for a shell."""
    flag = _FLAGS[name]
    if name == "mcp":
        return " ".join(_mcp_flag(server) for server in value)
    if name == "mcp_env":
        return " ".join(f"{flag} {shlex.quote(str(item))}" for item in value)
    return f"{flag} {shlex.quote(str(value))}"


def _mcp_flag(server: Any) -> str:
    """A recorded MCP server (``MCPServerSpec``) as its flag."""
    named = "" if server.prefix is None else f"{server.prefix}="
    if server.kind == "http":
        return f"--mcp-http {shlex.quote(named + str(server.url))}"
    return f"--mcp {shlex.quote(named + shlex.join(server.command or []))}"
